// UTF-8 and Unicode helpers for the tokenizer: validation, the library's lossy decoding,
// character classes, and normalization (utf8proc, Debian's libutf8proc).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace recur::text {

/// Byte offset of the first byte that does not start a well-formed UTF-8 sequence, or npos.
std::size_t invalid_utf8_at(std::string_view s);
/// `s` with each maximal ill-formed subsequence replaced by U+FFFD (Rust's from_utf8_lossy, and
/// Unicode's recommended practice).
std::string utf8_lossy(std::string_view s);
/// Bytes in, well-formed UTF-8 out, by utf8_lossy's rule (each maximal ill-formed subsequence
/// becomes one U+FFFD), for text that arrives in pieces: a sequence cut short at the end of a
/// piece waits for its next bytes. The concatenation of every put() and the finish() equals
/// utf8_lossy of the concatenated input, however it was split.
class Utf8Stream {
 public:
  /// How an ill-formed subsequence is written: U+FFFD, or each of its bytes as \xNN (for a
  /// terminal, where the bytes are worth seeing).
  enum class Invalid { kReplace, kEscape };
  explicit Utf8Stream(Invalid invalid = Invalid::kReplace) : invalid_(invalid) {}
  /// The text `bytes` complete, without a trailing sequence that may still be completed.
  std::string put(std::string_view bytes);
  /// The rest: a sequence left incomplete is ill-formed.
  std::string finish();
  /// Bytes held back (at most 3).
  std::size_t pending() const { return pending_.size(); }

 private:
  void bad(std::string& out, std::string_view bytes) const;
  Invalid invalid_;
  std::string pending_;
};

/// Length of the character that starts at s[i] in well-formed UTF-8.
inline std::size_t char_len(unsigned char lead) {
  return lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
}
/// The code point at s[i] of well-formed UTF-8.
char32_t code_point(std::string_view s, std::size_t i);
/// Appends the UTF-8 of `c`.
void append_utf8(std::string& out, char32_t c);

/// Unicode White_Space (Rust's char::is_whitespace).
bool is_whitespace(char32_t c);
/// General category N* (Rust's char::is_numeric).
bool is_numeric(char32_t c);
/// Letters or numbers (Rust's char::is_alphanumeric).
bool is_alphanumeric(char32_t c);

enum class NormalForm { kNFC, kNFD, kNFKC, kNFKD };
/// `s` (well-formed UTF-8) in the normal form.
std::string normalize(std::string_view s, NormalForm form);

/// GPT-2's byte-level alphabet: each byte's stand-in character as UTF-8, and back.
const std::string& byte_char(unsigned char b);
/// The byte a stand-in character (given as a code point) stands for, or -1.
int char_byte(char32_t c);

}  // namespace recur::text
