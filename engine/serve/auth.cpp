#include "serve/auth.h"

#include <fmt/format.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <sys/random.h>

#include <cerrno>
#include <cstring>

#include "recur/error.h"

namespace recur::serve {

std::string random_bytes(std::size_t n) {
  std::string out(n, '\0');
  std::size_t done = 0;
  while (done < n) {
    const ssize_t got = getrandom(out.data() + done, n - done, 0);
    if (got < 0) {
      if (errno == EINTR) continue;
      throw Error(fmt::format("[random_bytes] getrandom: {}", std::strerror(errno)));
    }
    done += static_cast<std::size_t>(got);
  }
  return out;
}

std::string new_response_id() {
  const std::string bytes = random_bytes(16);
  std::string id = "cmpl-";
  static const char* const hex = "0123456789abcdef";
  for (const char ch : bytes) {
    const auto b = static_cast<unsigned char>(ch);
    id += hex[b >> 4];
    id += hex[b & 15];
  }
  return id;
}

std::string owner_tag(std::string_view key) {
  // A fixed label, not a per-server secret: replicas must agree on the tag without sharing
  // anything but the keys. API keys are long random strings, so the tag does not reveal one.
  static constexpr char kLabel[] = "recur serve conversation owner v1";
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  if (!HMAC(EVP_sha256(), kLabel, static_cast<int>(sizeof kLabel - 1),
            reinterpret_cast<const unsigned char*>(key.data()), key.size(), mac, &size))
    throw Error("[owner_tag] HMAC-SHA256 failed");
  return std::string(reinterpret_cast<const char*>(mac), size);
}

bool constant_time_equal(std::string_view a, std::string_view b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

void ApiKeys::add(std::string_view key, const std::string& source) {
  if (key.empty()) throw ArgumentError(fmt::format("{}: an API key is empty", source));
  for (const char ch : key) {
    const auto b = static_cast<unsigned char>(ch);
    if (b <= 0x20 || b == 0x7F)
      throw ArgumentError(fmt::format("{}: an API key holds a space or a control character", source));
  }
  tags_.push_back(owner_tag(key));
}

void ApiKeys::add_lines(std::string_view text, const std::string& source) {
  std::size_t line = 0;
  while (!text.empty()) {
    ++line;
    const std::size_t end = text.find('\n');
    std::string_view key = text.substr(0, end);
    text = end == std::string_view::npos ? std::string_view() : text.substr(end + 1);
    if (!key.empty() && key.back() == '\r') key.remove_suffix(1);
    while (!key.empty() && (key.front() == ' ' || key.front() == '\t')) key.remove_prefix(1);
    while (!key.empty() && (key.back() == ' ' || key.back() == '\t')) key.remove_suffix(1);
    if (key.empty() || key.front() == '#') continue;
    add(key, fmt::format("{} line {}", source, line));
  }
  if (tags_.empty()) throw ArgumentError(fmt::format("{}: no API key in the file", source));
}

std::optional<std::string> ApiKeys::authorize(std::string_view authorization) const {
  if (tags_.empty()) return std::string();
  // "Bearer" is case-insensitive (RFC 6750 follows RFC 7235's auth-scheme).
  constexpr std::string_view kScheme = "bearer ";
  if (authorization.size() <= kScheme.size()) return std::nullopt;
  for (std::size_t i = 0; i < kScheme.size(); ++i) {
    char ch = authorization[i];
    if (ch >= 'A' && ch <= 'Z') ch = static_cast<char>(ch - 'A' + 'a');
    if (ch != kScheme[i]) return std::nullopt;
  }
  std::string_view key = authorization.substr(kScheme.size());
  while (!key.empty() && key.front() == ' ') key.remove_prefix(1);
  while (!key.empty() && key.back() == ' ') key.remove_suffix(1);
  if (key.empty()) return std::nullopt;
  // The presented key's tag against every accepted tag: the time does not depend on which
  // key matched, nor on how much of a wrong key is right.
  const std::string tag = owner_tag(key);
  bool match = false;
  for (const auto& t : tags_) match |= constant_time_equal(tag, t);
  if (!match) return std::nullopt;
  return tag;
}

}  // namespace recur::serve
