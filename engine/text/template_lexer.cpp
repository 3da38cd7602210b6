// The chat template's lexer: text and tags, with the whitespace control Hugging Face renders
// with (Jinja2's trim_blocks and lstrip_blocks, and the `-` and `+` markers), then the tokens
// inside each tag.
#include <fmt/format.h>

#include <cstdlib>
#include <cstring>

#include "recur/error.h"
#include "text/template_ast.h"
#include "text/unicode.h"

namespace recur::detail {

std::string where(const std::string& name, Pos pos) {
  return fmt::format("[ChatTemplate] {}:{}:{}: ", name, pos.line, pos.column);
}

namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }

class Lexer {
 public:
  Lexer(std::string source, const std::string& name) : src_(std::move(source)), name_(name) {
    line_starts_.push_back(0);
    for (std::size_t i = 0; i < src_.size(); ++i)
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
  }

  std::vector<Token> run() {
    std::size_t pos = 0;
    bool line_starting = true;  // the text before the next tag starts a line
    bool strip_next = false;    // the last tag ended with `-`
    while (pos <= src_.size()) {
      std::size_t tag = src_.find('{', pos);
      while (tag != std::string::npos && tag + 1 < src_.size() && std::strchr("{%#", src_[tag + 1]) == nullptr)
        tag = src_.find('{', tag + 1);
      if (tag != std::string::npos && tag + 1 >= src_.size()) tag = std::string::npos;
      std::string text = src_.substr(pos, tag == std::string::npos ? std::string::npos : tag - pos);
      const std::size_t text_at = pos;
      std::size_t text_skip = 0;
      if (strip_next) {
        while (text_skip < text.size() && is_space(text[text_skip])) ++text_skip;
      }
      if (tag == std::string::npos) {
        emit_text(text.substr(text_skip), text_at + text_skip);
        break;
      }
      const char type = src_[tag + 1];
      const char sign = tag + 2 < src_.size() ? src_[tag + 2] : '\0';
      if (sign == '-') {
        while (text.size() > text_skip && is_space(text.back())) text.pop_back();
      } else if (sign != '+' && type != '{') {
        // lstrip_blocks: blanks between the line's start and a block or comment tag go.
        const std::size_t nl = text.rfind('\n');
        const std::size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
        if (l_pos > 0 || line_starting) {
          bool blank = true;
          for (std::size_t i = l_pos; i < text.size(); ++i) blank = blank && is_space(text[i]);
          if (blank) text.resize(std::max(l_pos, text_skip));
        }
      }
      if (text.size() > text_skip) emit_text(text.substr(text_skip), text_at + text_skip);
      std::size_t inner = tag + 2 + ((sign == '-' || sign == '+') ? 1 : 0);
      char end_sign = '\0';
      std::size_t after = 0;
      if (type == '#') {
        const std::size_t close = src_.find("#}", inner);
        if (close == std::string::npos) fail(tag, "a comment is not closed ('#}' missing)");
        end_sign = close > inner && (src_[close - 1] == '-' || src_[close - 1] == '+') ? src_[close - 1] : '\0';
        after = close + 2;
      } else {
        const bool block = type == '%';
        if (block) refuse_raw(inner);
        push(block ? Token::Kind::kBlockBegin : Token::Kind::kVarBegin, tag, "");
        after = lex_tag(inner, block, end_sign);
      }
      line_starting = false;
      strip_next = end_sign == '-';
      if (type != '{' && end_sign != '-' && end_sign != '+' && after < src_.size() && src_[after] == '\n') {
        ++after;  // trim_blocks: the newline after a block or comment tag goes
        line_starting = true;
      }
      if (strip_next) {
        std::size_t p = after;
        while (p < src_.size() && is_space(src_[p])) ++p;
        line_starting = p > after && src_[p - 1] == '\n';
      }
      pos = after;
    }
    push(Token::Kind::kEnd, src_.size(), "");
    return std::move(tokens_);
  }

 private:
  Pos pos_of(std::size_t offset) const {
    std::size_t lo = 0, hi = line_starts_.size();
    while (hi - lo > 1) {
      const std::size_t mid = (lo + hi) / 2;
      (line_starts_[mid] <= offset ? lo : hi) = mid;
    }
    // Columns count characters, not bytes.
    int column = 1;
    for (std::size_t i = line_starts_[lo]; i < offset && i < src_.size(); ++i)
      if ((static_cast<unsigned char>(src_[i]) & 0xC0) != 0x80) ++column;
    return Pos{static_cast<int>(lo) + 1, column};
  }

  [[noreturn]] void fail(std::size_t offset, const std::string& what) const {
    throw FormatError(where(name_, pos_of(offset)) + what);
  }

  void push(Token::Kind kind, std::size_t offset, std::string text) {
    Token t{kind, pos_of(offset), std::move(text)};
    tokens_.push_back(std::move(t));
  }

  void emit_text(std::string text, std::size_t offset) {
    if (!text.empty()) push(Token::Kind::kText, offset, std::move(text));
  }

  void refuse_raw(std::size_t p) const {
    while (p < src_.size() && is_space(src_[p])) ++p;
    if (src_.compare(p, 3, "raw") == 0 && (p + 3 >= src_.size() || !is_name_char(src_[p + 3])))
      fail(p, "unsupported tag 'raw'");
  }

  // Tokens up to the tag's end ('%}' or '}}', seen only outside brackets, as Jinja2 does).
  // Returns the offset after the end; `end_sign` gets its '-' or '+'.
  std::size_t lex_tag(std::size_t p, bool block, char& end_sign) {
    const char* end = block ? "%}" : "}}";
    int depth = 0;
    const std::size_t begin = p;
    for (;;) {
      while (p < src_.size() && is_space(src_[p])) ++p;
      if (p >= src_.size()) fail(begin, block ? "a block tag is not closed ('%}' missing)"
                                              : "an expression tag is not closed ('}}' missing)");
      if (depth == 0) {
        const bool signed_end = (src_[p] == '-' || (block && src_[p] == '+')) && src_.compare(p + 1, 2, end) == 0;
        if (signed_end || src_.compare(p, 2, end) == 0) {
          end_sign = signed_end ? src_[p] : '\0';
          push(block ? Token::Kind::kBlockEnd : Token::Kind::kVarEnd, p, "");
          return p + (signed_end ? 3 : 2);
        }
      }
      const char c = src_[p];
      if (is_name_start(c)) {
        std::size_t q = p;
        while (q < src_.size() && is_name_char(src_[q])) ++q;
        push(Token::Kind::kName, p, src_.substr(p, q - p));
        p = q;
      } else if (is_digit(c)) {
        p = lex_number(p);
      } else if (c == '\'' || c == '"') {
        p = lex_string(p);
      } else {
        static const char* const kOps[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "/", "*",
                                           "%", "~", "[", "]", "(", ")", "{", "}", "<", ">", "=",
                                           ".", ":", "|", ",", ";"};
        const char* op = nullptr;
        for (const char* o : kOps)
          if (src_.compare(p, std::strlen(o), o) == 0) {
            op = o;
            break;
          }
        if (op == nullptr) fail(p, fmt::format("unexpected character '{}'", src_.substr(p, text::char_len(static_cast<unsigned char>(c)))));
        if (*op == '(' || *op == '[' || *op == '{') ++depth;
        if ((*op == ')' || *op == ']' || *op == '}') && depth > 0) --depth;
        push(Token::Kind::kOp, p, op);
        p += std::strlen(op);
      }
    }
  }

  std::size_t lex_number(std::size_t p) {
    const std::size_t begin = p;
    std::string digits;
    const auto run = [&] {
      while (p < src_.size() && (is_digit(src_[p]) || (src_[p] == '_' && p + 1 < src_.size() && is_digit(src_[p + 1])))) {
        if (src_[p] != '_') digits += src_[p];
        ++p;
      }
    };
    run();
    bool is_float = false;
    if (p + 1 < src_.size() && src_[p] == '.' && is_digit(src_[p + 1])) {
      is_float = true;
      digits += src_[p++];
      run();
    }
    if (p < src_.size() && (src_[p] == 'e' || src_[p] == 'E')) {
      std::size_t q = p + 1;
      if (q < src_.size() && (src_[q] == '+' || src_[q] == '-')) ++q;
      if (q < src_.size() && is_digit(src_[q])) {
        is_float = true;
        digits += 'e';
        digits.append(src_, p + 1, q - p - 1);
        p = q;
        run();
      }
    }
    Token t{is_float ? Token::Kind::kFloat : Token::Kind::kInt, pos_of(begin), digits};
    if (is_float) {
      t.float_value = std::strtod(digits.c_str(), nullptr);
    } else {
      errno = 0;
      t.int_value = std::strtoll(digits.c_str(), nullptr, 10);
      if (errno == ERANGE) fail(begin, "integer literal " + digits + " does not fit 64 bits");
    }
    tokens_.push_back(std::move(t));
    return p;
  }

  // Python's string escapes (Jinja2 decodes literals with unicode-escape); an unknown escape
  // keeps its backslash.
  std::size_t lex_string(std::size_t p) {
    const std::size_t begin = p;
    const char quote = src_[p++];
    std::string value;
    for (;;) {
      if (p >= src_.size()) fail(begin, "a string literal is not closed");
      const char c = src_[p];
      if (c == quote) break;
      if (c != '\\') {
        value += c;
        ++p;
        continue;
      }
      if (p + 1 >= src_.size()) fail(begin, "a string literal is not closed");
      const char e = src_[p + 1];
      p += 2;
      switch (e) {
        case 'n': value += '\n'; break;
        case 't': value += '\t'; break;
        case 'r': value += '\r'; break;
        case '\\': value += '\\'; break;
        case '\'': value += '\''; break;
        case '"': value += '"'; break;
        case 'a': value += '\a'; break;
        case 'b': value += '\b'; break;
        case 'f': value += '\f'; break;
        case 'v': value += '\v'; break;
        case '\n': break;
        case 'x':
        case 'u':
        case 'U': {
          const std::size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          unsigned long code = 0;
          for (std::size_t i = 0; i < n; ++i) {
            const char h = p + i < src_.size() ? src_[p + i] : '\0';
            if (!std::isxdigit(static_cast<unsigned char>(h)))
              fail(p - 2, fmt::format("a '\\{}' escape needs {} hex digits", e, n));
            code = code * 16 + static_cast<unsigned long>(is_digit(h) ? h - '0' : (h | 0x20) - 'a' + 10);
          }
          if (code > 0x10FFFF || (code >= 0xD800 && code < 0xE000))
            fail(p - 2, "a string escape names no Unicode scalar value");
          text::append_utf8(value, static_cast<char32_t>(code));
          p += n;
          break;
        }
        default:
          if (e >= '0' && e <= '7') {
            unsigned code = static_cast<unsigned>(e - '0');
            for (int i = 0; i < 2 && p < src_.size() && src_[p] >= '0' && src_[p] <= '7'; ++i)
              code = code * 8 + static_cast<unsigned>(src_[p++] - '0');
            text::append_utf8(value, static_cast<char32_t>(code));
          } else if (e == 'N') {
            fail(p - 2, "unsupported string escape '\\N{...}'");
          } else {
            value += '\\';
            p -= 1;  // the character after the backslash is read as itself
          }
      }
    }
    push(Token::Kind::kString, begin, std::move(value));
    return p + 1;
  }

  std::string src_;
  const std::string& name_;
  std::vector<std::size_t> line_starts_;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> lex_template(std::string_view source, const std::string& name) {
  // Jinja2 reads "\r\n" and "\r" as "\n" and drops one newline at the very end.
  std::string normalized;
  normalized.reserve(source.size());
  for (std::size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      normalized += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      normalized += source[i];
    }
  }
  if (!normalized.empty() && normalized.back() == '\n') normalized.pop_back();
  if (const std::size_t bad = text::invalid_utf8_at(normalized); bad != std::string_view::npos)
    throw FormatError(fmt::format("[ChatTemplate] {}: the source is not UTF-8 (byte {})", name, bad));
  return Lexer(std::move(normalized), name).run();
}

}  // namespace recur::detail
