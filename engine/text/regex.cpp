#define PCRE2_CODE_UNIT_WIDTH 8
#include "text/regex.h"

#include <fmt/format.h>
#include <pcre2.h>

#include "recur/error.h"
#include "text/unicode.h"

namespace recur::text {

struct Regex::Code {
  pcre2_code* code = nullptr;
  ~Code() { pcre2_code_free(code); }
};

namespace {

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  pcre2_get_error_message(code, buffer, sizeof buffer);
  return reinterpret_cast<const char*>(buffer);
}

// Oniguruma's \s (Unicode White_Space) includes U+0085, which PCRE2's \s in UCP mode does not:
// add it wherever the pattern says \s, inside a class or out.
std::string translate(const std::string& p) {
  std::string out;
  bool in_class = false;
  for (std::size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char n = p[i + 1];
      if (n == 's') out += in_class ? "\\s\\x{85}" : "[\\s\\x{85}]";
      else if (n == 'S' && !in_class) out += "[^\\s\\x{85}]";
      else out += p.substr(i, 2);
      ++i;
      continue;
    }
    if (c == '[' && !in_class) {
      in_class = true;
      out += c;
      // A ']' (or '^]') right after the opening bracket is a literal.
      if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
      if (i + 1 < p.size() && p[i + 1] == ']') out += p[++i];
      continue;
    }
    if (c == ']' && in_class) in_class = false;
    out += c;
  }
  return out;
}

}  // namespace

Regex::Regex(const std::string& pattern, const std::string& where)
    : pattern_(pattern), code_(std::make_unique<Code>()) {
  const std::string translated = translate(pattern);
  int error = 0;
  PCRE2_SIZE offset = 0;
  code_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                              PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
  if (!code_->code)
    throw FormatError(fmt::format("{}: the regex {} does not compile: {} at offset {}", where,
                                  pattern, pcre2_message(error), offset));
  // Without the JIT (a platform PCRE2 was built without it) matching is slower, not different.
  pcre2_jit_compile(code_->code, PCRE2_JIT_COMPLETE);
}

Regex::~Regex() = default;
Regex::Regex(Regex&&) noexcept = default;
Regex& Regex::operator=(Regex&&) noexcept = default;

void Regex::for_each_match(std::string_view s,
                           const std::function<void(std::size_t, std::size_t)>& match) const {
  std::unique_ptr<pcre2_match_data, void (*)(pcre2_match_data*)> data(
      pcre2_match_data_create_from_pattern(code_->code, nullptr), pcre2_match_data_free);
  if (!data) throw std::bad_alloc();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(s.data());
  std::size_t at = 0;
  while (at <= s.size()) {
    // The text was checked once; PCRE2 need not check it again at every call.
    const int rc = pcre2_match(code_->code, subject, s.size(), at, PCRE2_NO_UTF_CHECK, data.get(), nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) return;
    if (rc < 0)
      throw Error(fmt::format("[Tokenizer::encode] the regex {} failed: {}", pattern_, pcre2_message(rc)));
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(data.get());
    const std::size_t start = ov[0], end = ov[1];
    match(start, end);
    if (end > start) {
      at = end;
    } else {
      if (end >= s.size()) return;
      at = end + char_len(static_cast<unsigned char>(s[end]));
    }
  }
}

}  // namespace recur::text
