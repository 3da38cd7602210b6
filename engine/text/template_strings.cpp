// Python's str methods and the string helpers of the filters, with Python's semantics: code
// point indexes, str.split's two modes, Unicode whitespace and case mapping (utf8proc).
#include "text/template_strings.h"

#include <fmt/format.h>
#include <utf8proc.h>

#include <algorithm>
#include <initializer_list>

#include "text/unicode.h"

namespace recur::detail {

// Python's str.isspace().
bool py_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

[[noreturn]] void refuse(const std::string& what) { throw BuiltinError(what); }

const std::string& want_string(const TValue& v, const char* what) {
  if (!v.is_string()) refuse(fmt::format("{} needs a string, got {}", what, v.type_name()));
  return v.str();
}

std::int64_t want_int(const TValue& v, const char* what) {
  if (v.kind() != TValue::Kind::kInt && v.kind() != TValue::Kind::kBool)
    refuse(fmt::format("{} needs an integer, got {}", what, v.type_name()));
  return v.as_int();
}

// Argument `index` or keyword `key`, else `fallback`.
TValue arg(const CallArgs& args, std::size_t index, std::string_view key, TValue fallback) {
  for (const auto& [k, v] : args.keyword)
    if (k == key) return v;
  return index < args.positional.size() ? args.positional[index] : fallback;
}

void check_arity(const CallArgs& args, std::size_t max, const std::string& what,
                 std::initializer_list<std::string_view> keys) {
  if (args.positional.size() > max)
    refuse(fmt::format("{} takes at most {} arguments, got {}", what, max, args.positional.size()));
  for (const auto& [k, v] : args.keyword)
    if (std::find(keys.begin(), keys.end(), k) == keys.end())
      refuse(fmt::format("{} has no argument named '{}'", what, k));
}

TValue make_string(std::string s, Budget& budget) {
  budget.allocate(s.size());
  return TValue::string(std::move(s));
}

TValue make_list(TList items, Budget& budget, TValue::Flavor flavor) {
  budget.allocate(items.size() * sizeof(TValue));
  return TValue::list(std::move(items), flavor);
}

// The items a filter walks: a list's, a dict's keys, a string's characters.
TList iterate(const TValue& v, const char* what) {
  if (v.is_list()) return v.items();
  TList out;
  if (v.is_undefined()) return out;  // Jinja2's Undefined walks as nothing
  if (v.is_mapping()) {
    for (const auto& [k, x] : v.members()) out.push_back(decode_key(k));
  } else if (v.is_string()) {
    for (const char32_t c : decode_utf8(v.str())) out.push_back(TValue::string(encode_utf8(std::u32string(1, c))));
  } else {
    refuse(fmt::format("{} needs something iterable, got {}", what, v.type_name()));
  }
  return out;
}

std::u32string strip_set(const TValue& chars) {
  if (chars.is_undefined() || chars.is_none()) return {};
  return decode_utf8(want_string(chars, "strip's characters"));
}

std::string py_strip(const std::string& s, const TValue& chars, bool left, bool right) {
  const std::u32string u = decode_utf8(s);
  const std::u32string set = strip_set(chars);
  const bool ws = chars.is_undefined() || chars.is_none();
  const auto drop = [&](char32_t c) { return ws ? py_space(c) : set.find(c) != std::u32string::npos; };
  std::size_t b = 0, e = u.size();
  if (left)
    while (b < e && drop(u[b])) ++b;
  if (right)
    while (e > b && drop(u[e - 1])) --e;
  return encode_utf8(u.substr(b, e - b));
}

TValue py_split(const std::string& s, const TValue& sep_value, std::int64_t maxsplit, bool from_right,
                Budget& budget) {
  TList parts;
  if (sep_value.is_undefined() || sep_value.is_none()) {
    // Runs of whitespace separate; leading and trailing whitespace gives no empty parts.
    std::u32string u = decode_utf8(s);
    if (from_right) std::reverse(u.begin(), u.end());
    std::size_t i = 0;
    std::int64_t splits = 0;
    while (i < u.size()) {
      while (i < u.size() && py_space(u[i])) ++i;
      if (i >= u.size()) break;
      std::size_t j = i;
      if (maxsplit >= 0 && splits >= maxsplit) {
        j = u.size();
        while (j > i && py_space(u[j - 1])) --j;
      } else {
        while (j < u.size() && !py_space(u[j])) ++j;
      }
      std::u32string part = u.substr(i, j - i);
      if (from_right) std::reverse(part.begin(), part.end());
      parts.push_back(TValue::string(encode_utf8(part)));
      ++splits;
      i = j;
      if (maxsplit >= 0 && splits > maxsplit) break;
    }
    if (from_right) std::reverse(parts.begin(), parts.end());
  } else {
    const std::string& sep = want_string(sep_value, "split's separator");
    if (sep.empty()) refuse("split's separator is empty");
    std::vector<std::string> pieces;
    if (!from_right) {
      std::size_t at = 0;
      std::int64_t splits = 0;
      for (std::size_t found; (maxsplit < 0 || splits < maxsplit) && (found = s.find(sep, at)) != std::string::npos; ++splits) {
        pieces.push_back(s.substr(at, found - at));
        at = found + sep.size();
      }
      pieces.push_back(s.substr(at));
    } else {
      std::size_t end = s.size();
      std::int64_t splits = 0;
      for (; maxsplit < 0 || splits < maxsplit; ++splits) {
        if (end < sep.size()) break;
        const std::size_t found = s.rfind(sep, end - sep.size());
        if (found == std::string::npos) break;
        pieces.push_back(s.substr(found + sep.size(), end - found - sep.size()));
        end = found;
      }
      pieces.push_back(s.substr(0, end));
      std::reverse(pieces.begin(), pieces.end());
    }
    for (auto& p : pieces) parts.push_back(TValue::string(std::move(p)));
  }
  budget.allocate(s.size());
  return make_list(std::move(parts), budget);
}

std::string py_replace(const std::string& s, const std::string& old, const std::string& with,
                       std::int64_t count, Budget& budget) {
  std::string out;
  if (old.empty()) {
    // Python puts `with` before every character and at the end.
    const std::u32string u = decode_utf8(s);
    std::int64_t done = 0;
    for (const char32_t c : u) {
      if (count < 0 || done < count) {
        out += with;
        ++done;
      }
      out += encode_utf8(std::u32string(1, c));
    }
    if (count < 0 || done < count) out += with;
  } else {
    std::size_t at = 0;
    std::int64_t done = 0;
    for (std::size_t found; (count < 0 || done < count) && (found = s.find(old, at)) != std::string::npos; ++done) {
      out.append(s, at, found - at);
      out += with;
      at = found + old.size();
      budget.allocate(with.size());
    }
    out.append(s, at);
  }
  budget.allocate(out.size());
  return out;
}

char32_t map_case(char32_t c, int how) {
  const auto code = static_cast<utf8proc_int32_t>(c);
  return static_cast<char32_t>(how == 0 ? utf8proc_tolower(code) : how == 1 ? utf8proc_toupper(code) : utf8proc_totitle(code));
}

bool cased(char32_t c) {
  const auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LL || cat == UTF8PROC_CATEGORY_LT;
}

// how: 0 lower, 1 upper, 2 Python's title(), 3 capitalize()
std::string change_case(const std::string& s, int how) {
  std::u32string u = decode_utf8(s);
  bool previous_cased = false;
  for (std::size_t i = 0; i < u.size(); ++i) {
    const char32_t c = u[i];
    if (how <= 1) {
      u[i] = map_case(c, how);
    } else if (how == 2) {
      u[i] = map_case(c, previous_cased ? 0 : 2);
      previous_cased = cased(c);
    } else {
      u[i] = map_case(c, i == 0 ? 2 : 0);
    }
  }
  return encode_utf8(u);
}

// Jinja2's title filter: words start after whitespace, '-', '(', '{', '[' or '<'.
std::string jinja_title(const std::string& s) {
  std::u32string u = decode_utf8(s);
  bool word_start = true;
  for (auto& c : u) {
    const bool boundary = py_space(c) || c == U'-' || c == U'(' || c == U'{' || c == U'[' || c == U'<';
    c = boundary ? c : map_case(c, word_start ? 1 : 0);
    word_start = boundary;
  }
  return encode_utf8(u);
}

std::u32string decode_utf8(const std::string& s) {
  std::u32string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size(); i += text::char_len(static_cast<unsigned char>(s[i])))
    out.push_back(text::code_point(s, i));
  return out;
}

std::string encode_utf8(const std::u32string& s) {
  std::string out;
  out.reserve(s.size());
  for (const char32_t c : s) text::append_utf8(out, c);
  return out;
}


// startswith and endswith accept a string or a tuple (or list) of strings.
namespace {

bool affix_match(const std::string& s, const TValue& affix, bool prefix) {
  TList options = affix.is_list() ? affix.items() : TList{affix};
  for (const auto& o : options) {
    const std::string& a = want_string(o, prefix ? "startswith" : "endswith");
    if (a.size() <= s.size() && (prefix ? s.compare(0, a.size(), a) : s.compare(s.size() - a.size(), a.size(), a)) == 0)
      return true;
  }
  return false;
}

}  // namespace

TValue string_method(const std::string& name, const std::string& s, const CallArgs& args, Budget& budget) {
  if (name == "startswith" || name == "endswith") {
    check_arity(args, 1, name);
    if (args.positional.empty()) refuse(name + " needs an argument");
    return TValue::boolean(affix_match(s, args.positional[0], name == "startswith"));
  }
  if (name == "split" || name == "rsplit") {
    check_arity(args, 2, name, {"sep", "maxsplit"});
    const TValue maxsplit = arg(args, 1, "maxsplit", TValue::integer(-1));
    return py_split(s, arg(args, 0, "sep"), want_int(maxsplit, "maxsplit"), name == "rsplit", budget);
  }
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    check_arity(args, 1, name);
    return make_string(py_strip(s, arg(args, 0, "chars"), name != "rstrip", name != "lstrip"), budget);
  }
  if (name == "replace") {
    check_arity(args, 3, name);
    if (args.positional.size() < 2) refuse("replace needs the old and the new string");
    const TValue count = arg(args, 2, "count", TValue::integer(-1));
    return make_string(py_replace(s, want_string(args.positional[0], "replace"), want_string(args.positional[1], "replace"),
                                  want_int(count, "replace's count"), budget),
                       budget);
  }
  if (name == "upper" || name == "lower" || name == "title" || name == "capitalize") {
    check_arity(args, 0, name);
    return make_string(change_case(s, name == "lower" ? 0 : name == "upper" ? 1 : name == "title" ? 2 : 3), budget);
  }
  if (name == "find" || name == "count") {
    check_arity(args, 1, name);
    if (args.positional.empty()) refuse(name + " needs an argument");
    const std::string& sub = want_string(args.positional[0], name.c_str());
    if (name == "find") {
      const std::size_t at = s.find(sub);
      return TValue::integer(at == std::string::npos ? -1 : static_cast<std::int64_t>(decode_utf8(s.substr(0, at)).size()));
    }
    if (sub.empty()) return TValue::integer(static_cast<std::int64_t>(decode_utf8(s).size()) + 1);
    std::int64_t n = 0;
    for (std::size_t at = s.find(sub); at != std::string::npos; at = s.find(sub, at + sub.size())) ++n;
    return TValue::integer(n);
  }
  if (name == "join") {
    check_arity(args, 1, name);
    if (args.positional.empty()) refuse("join needs an argument");
    std::string out;
    bool first = true;
    for (const auto& item : iterate(args.positional[0], "join")) {
      budget.allocate(want_string(item, "str.join's items").size() + s.size());
      if (!first) out += s;
      out += item.str();
      first = false;
      if (out.size() > budget.limits().max_bytes) budget.allocate(out.size());
    }
    return make_string(std::move(out), budget);
  }
  refuse(fmt::format("a string has no method '{}'", name));
}


}  // namespace recur::detail
