// Regular expressions for the tokenizer's Split and Replace steps: PCRE2 (Debian's libpcre2-dev)
// in UTF and Unicode-property mode, compiled with its JIT. The patterns of tokenizer.json files
// are written for Oniguruma, whose syntax PCRE2 shares for everything they use: \p{L}, \p{N},
// (?i:...), lookahead, counted repeats.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace recur::text {

class Regex {
 public:
  /// Throws FormatError naming `where` when the pattern does not compile.
  Regex(const std::string& pattern, const std::string& where);
  ~Regex();
  Regex(Regex&&) noexcept;
  Regex& operator=(Regex&&) noexcept;

  /// Calls `match(start, end)` for each match in `s` (well-formed UTF-8), left to right, without
  /// overlap. An empty match is reported and the search moves on by one character.
  void for_each_match(std::string_view s,
                      const std::function<void(std::size_t, std::size_t)>& match) const;
  const std::string& pattern() const { return pattern_; }

 private:
  std::string pattern_;
  struct Code;
  std::unique_ptr<Code> code_;
};

}  // namespace recur::text
