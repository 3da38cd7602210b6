// What makes a server safe to expose: response ids nobody can guess, API keys, and the owner
// tag that ties a conversation to the key that made it.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace recur::serve {

/// `n` bytes from the operating system's CSPRNG (getrandom(2)). Throws Error if it fails.
std::string random_bytes(std::size_t n);

/// A new response id: "cmpl-" and 32 hex digits, 128 bits from random_bytes. Nothing about it
/// follows from other ids, this server's or another's.
std::string new_response_id();

/// The owner tag of an API key: HMAC-SHA256 of the key under a fixed label, 32 bytes. Stored
/// with each conversation in place of the key, so that neither memory, the state directory nor
/// Redis holds a key. Every replica computes the same tag for the same key.
std::string owner_tag(std::string_view key);

/// Whether two strings are equal, in a time that depends on their lengths only.
bool constant_time_equal(std::string_view a, std::string_view b);

/// The keys a server accepts (--api-key, --api-key-file, RECUR_API_KEY), kept as owner tags.
class ApiKeys {
 public:
  /// Adds a key; throws ArgumentError naming `source` for an empty key or one with spaces or
  /// control characters (it could not be sent in an Authorization header).
  void add(std::string_view key, const std::string& source);
  /// Adds each non-empty line of `text` (a key file); "#" starts a comment line.
  void add_lines(std::string_view text, const std::string& source);
  bool enabled() const { return !tags_.empty(); }
  std::size_t size() const { return tags_.size(); }

  /// The owner tag of the key an Authorization header carries ("Bearer KEY"), or nullopt when
  /// the header is missing, malformed or names no key of this server. Every accepted key is
  /// compared, in constant time, whichever matches. Without keys: "" (no owner) for any header.
  std::optional<std::string> authorize(std::string_view authorization) const;

 private:
  std::vector<std::string> tags_;
};

}  // namespace recur::serve
