#include "util/json.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <system_error>
#include <string_view>
#include <unordered_set>

#include "recur/error.h"

namespace recur::json {

const Value* Value::find(std::string_view key) const {
  for (const auto& [k, v] : object_)
    if (k == key) return &v;
  return nullptr;
}

const char* Value::kind_name(Kind kind) {
  switch (kind) {
    case Kind::kNull: return "null";
    case Kind::kBool: return "a boolean";
    case Kind::kNumber: return "a number";
    case Kind::kString: return "a string";
    case Kind::kArray: return "an array";
    case Kind::kObject: return "an object";
  }
  return "?";
}

class Parser {
 public:
  Parser(std::string_view text, const std::string& what, const ParseOptions& options)
      : s_(text), what_(what), options_(options) {}

  Value document() {
    Value v = value(0);
    skip_space();
    if (pos_ != s_.size()) fail("unexpected text after the end of the document");
    return v;
  }

 private:
  static constexpr int kMaxDepth = 64;

  // Keys are checked once the object is read: a hash set of views for large objects (a
  // tokenizer's vocabulary has 100,000s), pairwise for small ones.
  void check_unique(const std::vector<std::pair<std::string, Value>>& members) const {
    const auto duplicate = [&](const std::string& key) {
      fail(fmt::format("duplicate key {} in the object that ends", quote(key)));
    };
    if (members.size() <= 16) {
      for (std::size_t i = 0; i < members.size(); ++i)
        for (std::size_t j = 0; j < i; ++j)
          if (members[i].first == members[j].first) duplicate(members[i].first);
      return;
    }
    std::unordered_set<std::string_view> seen;
    seen.reserve(members.size());
    for (const auto& m : members)
      if (!seen.insert(m.first).second) duplicate(m.first);
  }

  [[noreturn]] void fail(const std::string& problem) const {
    throw FormatError(fmt::format("[{}] invalid JSON: {} at byte {}", what_, problem, pos_));
  }
  void skip_space() {
    while (pos_ < s_.size() &&
           (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r'))
      ++pos_;
  }
  char peek() const { return pos_ < s_.size() ? s_[pos_] : '\0'; }
  void expect(char c) {
    if (peek() != c) fail(fmt::format("expected '{}'", c));
    ++pos_;
  }
  bool literal(std::string_view word) {
    if (s_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }

  Value value(int depth) {
    if (depth > kMaxDepth) fail("nesting deeper than 64 levels");
    skip_space();
    Value v;
    const char c = peek();
    if (c == '{') {
      v.kind_ = Value::Kind::kObject;
      ++pos_;
      skip_space();
      if (peek() == '}') {
        ++pos_;
        return v;
      }
      for (;;) {
        skip_space();
        if (peek() != '"') fail("expected a string key");
        std::string key = string();
        skip_space();
        expect(':');
        v.object_.emplace_back(std::move(key), value(depth + 1));
        skip_space();
        if (peek() == ',') {
          ++pos_;
          continue;
        }
        expect('}');
        check_unique(v.object_);
        return v;
      }
    }
    if (c == '[') {
      v.kind_ = Value::Kind::kArray;
      ++pos_;
      skip_space();
      if (peek() == ']') {
        ++pos_;
        return v;
      }
      for (;;) {
        v.array_.push_back(value(depth + 1));
        skip_space();
        if (peek() == ',') {
          ++pos_;
          continue;
        }
        expect(']');
        return v;
      }
    }
    if (c == '"') {
      v.kind_ = Value::Kind::kString;
      v.string_ = string();
      return v;
    }
    if (literal("null")) return v;
    if (literal("true")) {
      v.kind_ = Value::Kind::kBool;
      v.bool_ = true;
      return v;
    }
    if (literal("false")) {
      v.kind_ = Value::Kind::kBool;
      return v;
    }
    if (options_.python_infinity) {
      const bool positive = literal("Infinity"), negative = !positive && literal("-Infinity");
      if (positive || negative) {
        v.kind_ = Value::Kind::kNumber;
        v.number_ = negative ? -HUGE_VAL : HUGE_VAL;
        return v;
      }
    }
    if (c == '-' || (c >= '0' && c <= '9')) return number();
    if (pos_ >= s_.size()) fail("unexpected end of text");
    fail(fmt::format("unexpected character '{}'", c));
  }

  Value number() {
    const std::size_t start = pos_;
    bool integral = true;
    if (peek() == '-') ++pos_;
    if (peek() == '0') {
      ++pos_;
    } else if (peek() >= '1' && peek() <= '9') {
      while (peek() >= '0' && peek() <= '9') ++pos_;
    } else {
      fail("malformed number");
    }
    if (peek() == '.') {
      integral = false;
      ++pos_;
      if (!(peek() >= '0' && peek() <= '9')) fail("malformed number");
      while (peek() >= '0' && peek() <= '9') ++pos_;
    }
    if (peek() == 'e' || peek() == 'E') {
      integral = false;
      ++pos_;
      if (peek() == '+' || peek() == '-') ++pos_;
      if (!(peek() >= '0' && peek() <= '9')) fail("malformed number");
      while (peek() >= '0' && peek() <= '9') ++pos_;
    }
    // std::from_chars reads the C format whatever the process's locale, and says where it
    // stopped: the whole token must be the number.
    const char* first = s_.data() + start;
    const char* last = s_.data() + pos_;
    Value v;
    v.kind_ = Value::Kind::kNumber;
    const auto real = std::from_chars(first, last, v.number_);
    if (real.ec == std::errc::result_out_of_range || !std::isfinite(v.number_))
      fail("number out of range");
    if (real.ec != std::errc() || real.ptr != last) fail("malformed number");
    if (integral) {
      std::int64_t n = 0;
      const auto whole = std::from_chars(first, last, n);
      if (whole.ec == std::errc() && whole.ptr == last) {
        v.integral_ = true;
        v.integer_ = n;
      }
    }
    return v;
  }

  unsigned hex4() {
    unsigned code = 0;
    for (int i = 0; i < 4; ++i) {
      const char h = peek();
      unsigned d;
      if (h >= '0' && h <= '9') d = unsigned(h - '0');
      else if (h >= 'a' && h <= 'f') d = unsigned(h - 'a' + 10);
      else if (h >= 'A' && h <= 'F') d = unsigned(h - 'A' + 10);
      else fail("malformed \\u escape");
      code = code * 16 + d;
      ++pos_;
    }
    return code;
  }

  static void append_utf8(std::string& out, unsigned cp) {
    if (cp < 0x80) {
      out += char(cp);
    } else if (cp < 0x800) {
      out += char(0xC0 | (cp >> 6));
      out += char(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += char(0xE0 | (cp >> 12));
      out += char(0x80 | ((cp >> 6) & 0x3F));
      out += char(0x80 | (cp & 0x3F));
    } else {
      out += char(0xF0 | (cp >> 18));
      out += char(0x80 | ((cp >> 12) & 0x3F));
      out += char(0x80 | ((cp >> 6) & 0x3F));
      out += char(0x80 | (cp & 0x3F));
    }
  }

  std::string string() {
    expect('"');
    std::string out;
    for (;;) {
      if (pos_ >= s_.size()) fail("unterminated string");
      const char c = s_[pos_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) {
        --pos_;
        fail("control character in a string");
      }
      if (c != '\\') {
        out += c;
        continue;
      }
      const char e = peek();
      ++pos_;
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          unsigned cp = hex4();
          if (cp >= 0xD800 && cp < 0xDC00) {
            if (!literal("\\u")) fail("unpaired surrogate in \\u escape");
            const unsigned lo = hex4();
            if (lo < 0xDC00 || lo >= 0xE000) fail("unpaired surrogate in \\u escape");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          } else if (cp >= 0xDC00 && cp < 0xE000) {
            fail("unpaired surrogate in \\u escape");
          }
          append_utf8(out, cp);
          break;
        }
        default:
          --pos_;
          fail("unknown escape in a string");
      }
    }
  }

  std::string_view s_;
  const std::string& what_;
  ParseOptions options_;
  std::size_t pos_ = 0;
};

Value parse(std::string_view text, const std::string& what, const ParseOptions& options) {
  return Parser(text, what, options).document();
}

std::string quote(std::string_view s) {
  std::string out = "\"";
  for (const char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20)
          out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
        else
          out += c;
    }
  }
  return out + "\"";
}

void write(const Value& v, std::string& out) {
  if (v.is_null()) {
    out += "null";
  } else if (v.is_bool()) {
    out += v.boolean() ? "true" : "false";
  } else if (v.is_integer()) {
    out += std::to_string(v.integer());
  } else if (v.is_number()) {
    out += fmt::format("{}", v.number());
  } else if (v.is_string()) {
    out += quote(v.string());
  } else if (v.is_array()) {
    out += '[';
    for (std::size_t i = 0; i < v.array().size(); ++i) {
      if (i) out += ',';
      write(v.array()[i], out);
    }
    out += ']';
  } else {
    out += '{';
    bool first = true;
    for (const auto& [key, value] : v.object()) {
      if (!first) out += ',';
      first = false;
      out += quote(key);
      out += ':';
      write(value, out);
    }
    out += '}';
  }
}

}  // namespace recur::json
