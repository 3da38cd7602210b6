#include "text/unicode.h"

#include <utf8proc.h>

#include <array>
#include <cstdlib>
#include <memory>

#include "recur/error.h"

namespace recur::text {
namespace {

// Length of the well-formed prefix of the sequence that starts at s[i] (Unicode table 3-7):
// 0 if s[i] cannot start one; otherwise how many bytes belong to it, and whether it is complete.
struct SeqCheck {
  std::size_t valid_bytes;  // bytes that fit the pattern (>= 1 when the lead byte is a lead)
  bool complete;
};

SeqCheck check_sequence(std::string_view s, std::size_t i) {
  const auto b = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  if (c < 0x80) return {1, true};
  std::size_t need;
  unsigned char lo = 0x80, hi = 0xBF;  // the range of the second byte
  if (c >= 0xC2 && c <= 0xDF) {
    need = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    need = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    need = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return {0, false};
  }
  std::size_t k = 1;
  for (; k < need && i + k < s.size(); ++k) {
    const unsigned char x = b(i + k);
    const bool ok = k == 1 ? (x >= lo && x <= hi) : (x >= 0x80 && x <= 0xBF);
    if (!ok) break;
  }
  return {k, k == need};
}

}  // namespace

std::size_t invalid_utf8_at(std::string_view s) {
  for (std::size_t i = 0; i < s.size();) {
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    const SeqCheck c = check_sequence(s, i);
    if (!c.complete) return i;
    i += c.valid_bytes;
  }
  return std::string_view::npos;
}

std::string utf8_lossy(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    const SeqCheck c = check_sequence(s, i);
    if (c.complete) {
      out.append(s.substr(i, c.valid_bytes));
      i += c.valid_bytes;
    } else {
      out += "\xEF\xBF\xBD";
      i += c.valid_bytes == 0 ? 1 : c.valid_bytes;
    }
  }
  return out;
}

void Utf8Stream::bad(std::string& out, std::string_view bytes) const {
  if (invalid_ == Invalid::kReplace) {
    out += "\xEF\xBF\xBD";
    return;
  }
  static const char* const hex = "0123456789abcdef";
  for (const char ch : bytes) {
    const auto b = static_cast<unsigned char>(ch);
    out += "\\x";
    out += hex[b >> 4];
    out += hex[b & 15];
  }
}

std::string Utf8Stream::put(std::string_view bytes) {
  pending_.append(bytes);
  const std::string_view s = pending_;
  std::string out;
  out.reserve(s.size());
  std::size_t i = 0;
  while (i < s.size()) {
    const SeqCheck c = check_sequence(s, i);
    if (c.complete) {
      out.append(s.substr(i, c.valid_bytes));
      i += c.valid_bytes;
    } else if (c.valid_bytes > 0 && i + c.valid_bytes == s.size()) {
      break;  // a well-formed start cut short: the next piece may complete it
    } else {
      const std::size_t n = c.valid_bytes == 0 ? 1 : c.valid_bytes;
      bad(out, s.substr(i, n));
      i += n;
    }
  }
  pending_.erase(0, i);
  return out;
}

std::string Utf8Stream::finish() {
  std::string out;
  if (!pending_.empty()) bad(out, pending_);
  pending_.clear();
  return out;
}

char32_t code_point(std::string_view s, std::size_t i) {
  const auto b = [&](std::size_t k) { return static_cast<char32_t>(static_cast<unsigned char>(s[k])); };
  const char32_t c = b(i);
  if (c < 0x80) return c;
  if (c < 0xE0) return ((c & 0x1F) << 6) | (b(i + 1) & 0x3F);
  if (c < 0xF0) return ((c & 0x0F) << 12) | ((b(i + 1) & 0x3F) << 6) | (b(i + 2) & 0x3F);
  return ((c & 0x07) << 18) | ((b(i + 1) & 0x3F) << 12) | ((b(i + 2) & 0x3F) << 6) | (b(i + 3) & 0x3F);
}

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xC0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xE0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  }
}

bool is_whitespace(char32_t c) {
  // The White_Space property, which is fixed: it has not changed since Unicode 6.
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

bool is_numeric(char32_t c) {
  const auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return cat == UTF8PROC_CATEGORY_ND || cat == UTF8PROC_CATEGORY_NL || cat == UTF8PROC_CATEGORY_NO;
}

bool is_alphanumeric(char32_t c) {
  const auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return is_numeric(c) || (cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO);
}

std::string normalize(std::string_view s, NormalForm form) {
  if (s.empty()) return {};
  int options = UTF8PROC_STABLE;
  switch (form) {
    case NormalForm::kNFC: options |= UTF8PROC_COMPOSE; break;
    case NormalForm::kNFD: options |= UTF8PROC_DECOMPOSE; break;
    case NormalForm::kNFKC: options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT; break;
    case NormalForm::kNFKD: options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT; break;
  }
  utf8proc_uint8_t* out = nullptr;
  const auto n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()),
                              static_cast<utf8proc_ssize_t>(s.size()), &out,
                              static_cast<utf8proc_option_t>(options));
  std::unique_ptr<utf8proc_uint8_t, void (*)(void*)> owned(out, std::free);
  if (n < 0)
    throw ArgumentError(std::string("[Tokenizer::encode] Unicode normalization failed: ") +
                        utf8proc_errmsg(n));
  return std::string(reinterpret_cast<const char*>(out), static_cast<std::size_t>(n));
}

namespace {

struct ByteLevelAlphabet {
  std::array<std::string, 256> chars;
  std::array<int, 324> bytes;  // indexed by code point; every stand-in is below 324
  ByteLevelAlphabet() {
    bytes.fill(-1);
    int extra = 0;
    for (int b = 0; b < 256; ++b) {
      // Printable bytes stand for themselves; the rest take code points from 256 up, in order.
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      const char32_t c = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + extra++);
      append_utf8(chars[static_cast<std::size_t>(b)], c);
      bytes[c] = b;
    }
  }
};

const ByteLevelAlphabet& alphabet() {
  static const ByteLevelAlphabet a;
  return a;
}

}  // namespace

const std::string& byte_char(unsigned char b) { return alphabet().chars[b]; }

int char_byte(char32_t c) { return c < 324 ? alphabet().bytes[c] : -1; }

}  // namespace recur::text
