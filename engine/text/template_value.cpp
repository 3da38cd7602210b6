// Python's semantics for the template's values: str(), repr(), ==, < and json.dumps.
#include "text/template_value.h"

#include <utf8proc.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "text/unicode.h"
#include "util/json.h"

namespace recur::detail {

TValue TValue::boolean(bool b) {
  TValue v(Kind::kBool);
  v.b_ = b;
  v.i_ = b ? 1 : 0;
  return v;
}

TValue TValue::integer(std::int64_t i) {
  TValue v(Kind::kInt);
  v.i_ = i;
  return v;
}

TValue TValue::real(double d) {
  TValue v(Kind::kFloat);
  v.d_ = d;
  return v;
}

TValue TValue::string(std::string s) {
  TValue v(Kind::kString);
  v.s_ = std::make_shared<const std::string>(std::move(s));
  return v;
}

TValue TValue::markup(std::string s) {
  TValue v = string(std::move(s));
  v.markup_ = true;
  return v;
}

TValue TValue::list(TList items, Flavor flavor) {
  TValue v(Kind::kList);
  v.flavor_ = flavor;
  v.list_ = std::make_shared<TList>(std::move(items));
  return v;
}

TValue TValue::dict(TDict items) {
  TValue v(Kind::kDict);
  v.dict_ = std::make_shared<TDict>(std::move(items));
  return v;
}

TValue TValue::make_namespace(TDict items) {
  TValue v(Kind::kNamespace);
  v.dict_ = std::make_shared<TDict>(std::move(items));
  return v;
}

TValue TValue::macro(const MacroNode* node) {
  TValue v(Kind::kMacro);
  v.macro_ = node;
  return v;
}

TValue TValue::function(std::string name) {
  TValue v(Kind::kFunction);
  v.s_ = std::make_shared<const std::string>(std::move(name));
  return v;
}

TValue TValue::from_json(const json::Value& j) {
  switch (j.kind()) {
    case json::Value::Kind::kNull: return none();
    case json::Value::Kind::kBool: return boolean(j.boolean());
    case json::Value::Kind::kNumber: return j.is_integer() ? integer(j.integer()) : real(j.number());
    case json::Value::Kind::kString: return string(j.string());
    case json::Value::Kind::kArray: {
      TList items;
      items.reserve(j.array().size());
      for (const auto& e : j.array()) items.push_back(from_json(e));
      return list(std::move(items));
    }
    case json::Value::Kind::kObject: {
      TDict items;
      items.reserve(j.object().size());
      for (const auto& [k, e] : j.object()) items.emplace_back(encode_key(k), from_json(e));
      return dict(std::move(items));
    }
  }
  return TValue();
}

double TValue::as_double() const { return kind_ == Kind::kFloat ? d_ : static_cast<double>(i_); }

TValue TValue::get(std::string_view key) const {
  if (!is_mapping()) return TValue();
  if (!key.empty() && key[0] == '\x01') return get_key(TValue::string(std::string(key)));
  for (const auto& [k, v] : *dict_)  // a string key is stored as itself: no copy to look it up
    if (k == key) return v;
  return TValue();
}

TValue TValue::get_key(const TValue& key) const {
  bool ok = true;
  const std::string stored = encode_key(key, ok);
  if (!ok || !is_mapping()) return TValue();
  for (const auto& [k, v] : *dict_)
    if (k == stored) return v;
  return TValue();
}

std::string encode_key(std::string_view key) {
  if (!key.empty() && key[0] == '\x01') return "\x01s" + std::string(key);
  return std::string(key);
}

std::string encode_key(const TValue& key, bool& ok) {
  ok = true;
  if (key.is_string()) return encode_key(key.str());
  if (key.kind() == TValue::Kind::kInt || key.kind() == TValue::Kind::kBool) return "\x01i" + std::to_string(key.as_int());
  ok = false;
  return {};
}

TValue decode_key(const std::string& key) {
  if (key.size() >= 2 && key[0] == '\x01') {
    if (key[1] == 'i') return TValue::integer(std::stoll(key.substr(2)));
    return TValue::string(key.substr(2));
  }
  return TValue::string(key);
}

bool TValue::truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone: return false;
    case Kind::kBool:
    case Kind::kInt: return i_ != 0;
    case Kind::kFloat: return d_ != 0.0;
    case Kind::kString: return !s_->empty();
    case Kind::kList: return flavor_ == Flavor::kIterator || !list_->empty();
    case Kind::kDict: return !dict_->empty();
    case Kind::kNamespace:
    case Kind::kMacro:
    case Kind::kFunction: return true;
  }
  return false;
}

const char* TValue::type_name() const {
  switch (kind_) {
    case Kind::kUndefined: return "undefined";
    case Kind::kNone: return "none";
    case Kind::kBool: return "boolean";
    case Kind::kInt: return "integer";
    case Kind::kFloat: return "float";
    case Kind::kString: return "string";
    case Kind::kList: {
      static const char* const kNames[] = {"list", "tuple", "generator", "dict_items", "dict_keys", "dict_values"};
      return kNames[static_cast<int>(flavor_)];
    }
    case Kind::kDict: return "dict";
    case Kind::kNamespace: return "namespace";
    case Kind::kMacro: return "macro";
    case Kind::kFunction: return "function";
  }
  return "?";
}

std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  // The shortest %.Ne that reads back exactly, then laid out as Python's repr does: positional
  // for exponents in [-4, 16), scientific outside, ".0" on whole numbers.
  char buf[40];
  int precision = 1;
  for (; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*e", precision - 1, d);
    if (std::strtod(buf, nullptr) == d) break;
  }
  std::string text = buf;
  const std::size_t e = text.find('e');
  const int exponent = std::atoi(text.c_str() + e + 1);
  std::string digits;
  const bool negative = text[0] == '-';
  for (std::size_t i = negative ? 1 : 0; i < e; ++i)
    if (text[i] != '.') digits += text[i];
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  std::string out = negative ? "-" : "";
  const int n = static_cast<int>(digits.size());
  if (exponent >= -4 && exponent < 16) {
    if (exponent < 0) {
      out += "0." + std::string(static_cast<std::size_t>(-exponent - 1), '0') + digits;
    } else if (exponent + 1 >= n) {
      out += digits + std::string(static_cast<std::size_t>(exponent + 1 - n), '0') + ".0";
    } else {
      out += digits.substr(0, static_cast<std::size_t>(exponent + 1)) + "." +
             digits.substr(static_cast<std::size_t>(exponent + 1));
    }
  } else {
    out += digits.substr(0, 1);
    if (n > 1) out += "." + digits.substr(1);
    char exp[16];
    std::snprintf(exp, sizeof exp, "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
    out += exp;
  }
  return out;
}

namespace {

// Python's str.isprintable() for one code point: not in Cc, Cf, Cs, Co, Cn, Zl, Zp, Zs (but the
// space itself is printable).
bool printable_code_point(char32_t c) {
  if (c == U' ') return true;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(c))) {
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_CN:
    case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP:
    case UTF8PROC_CATEGORY_ZS: return false;
    default: return true;
  }
}

std::string string_repr(const std::string& s) {
  const bool dq = s.find('\'') != std::string::npos && s.find('"') == std::string::npos;
  const char quote = dq ? '"' : '\'';
  std::string out(1, quote);
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t len = text::char_len(static_cast<unsigned char>(s[i]));
    const char32_t c = text::code_point(s, i);
    char buf[16];
    if (c == U'\\' || c == static_cast<char32_t>(quote)) {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == U'\n') {
      out += "\\n";
    } else if (c == U'\r') {
      out += "\\r";
    } else if (c == U'\t') {
      out += "\\t";
    } else if (!printable_code_point(c)) {
      const unsigned code = static_cast<unsigned>(c);
      std::snprintf(buf, sizeof buf, code < 0x100 ? "\\x%02x" : code < 0x10000 ? "\\u%04x" : "\\U%08x",
                    code);
      out += buf;
    } else {
      out.append(s, i, len);
    }
    i += len;
  }
  out += quote;
  return out;
}

}  // namespace

std::string TValue::to_str() const {
  switch (kind_) {
    case Kind::kUndefined: return "";
    case Kind::kNone: return "None";
    case Kind::kBool: return b_ ? "True" : "False";
    case Kind::kInt: return std::to_string(i_);
    case Kind::kFloat: return float_repr(d_);
    case Kind::kString: return *s_;
    case Kind::kNamespace: return "<Namespace>";
    case Kind::kMacro: return "<Macro>";
    case Kind::kFunction: return "<function " + *s_ + ">";
    default: return repr();
  }
}

std::string TValue::repr() const {
  switch (kind_) {
    case Kind::kString: return markup_ ? "Markup(" + string_repr(*s_) + ")" : string_repr(*s_);
    case Kind::kList: {
      if (flavor_ == Flavor::kIterator) return "<generator object>";
      const bool tuple = flavor_ == Flavor::kTuple;
      std::string out = tuple ? "(" : "[";
      for (std::size_t i = 0; i < list_->size(); ++i) out += (i ? ", " : "") + (*list_)[i].repr();
      out += tuple ? (list_->size() == 1 ? ",)" : ")") : "]";
      if (flavor_ == Flavor::kItems) return "dict_items(" + out + ")";
      if (flavor_ == Flavor::kKeys) return "dict_keys(" + out + ")";
      if (flavor_ == Flavor::kValues) return "dict_values(" + out + ")";
      return out;
    }
    case Kind::kDict: {
      std::string out = "{";
      for (std::size_t i = 0; i < dict_->size(); ++i)
        out += (i ? ", " : "") + decode_key((*dict_)[i].first).repr() + ": " + (*dict_)[i].second.repr();
      return out + "}";
    }
    case Kind::kUndefined: return "Undefined";
    default: return to_str();
  }
}

bool equal(const TValue& a, const TValue& b) {
  using K = TValue::Kind;
  if (a.is_number() && b.is_number()) {
    if (a.kind() == K::kFloat || b.kind() == K::kFloat) return a.as_double() == b.as_double();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case K::kUndefined:
    case K::kNone: return true;
    case K::kString: return a.str() == b.str();
    case K::kList: {
      if (a.flavor() != b.flavor()) return false;
      // Python compares iterators and dict_values by identity.
      if (a.is_iterator() || a.flavor() == TValue::Flavor::kValues) return &a.items() == &b.items();
      if (a.items().size() != b.items().size()) return false;
      for (std::size_t i = 0; i < a.items().size(); ++i)
        if (!equal(a.items()[i], b.items()[i])) return false;
      return true;
    }
    case K::kDict: {
      if (a.members().size() != b.members().size()) return false;
      for (const auto& [k, v] : a.members()) {
        const auto it = std::find_if(b.members().begin(), b.members().end(),
                                     [&k = k](const auto& m) { return m.first == k; });
        if (it == b.members().end() || !equal(v, it->second)) return false;
      }
      return true;
    }
    case K::kNamespace: return &a.members() == &b.members();
    case K::kMacro: return a.macro_node() == b.macro_node();
    case K::kFunction: return a.str() == b.str();
    default: return false;
  }
}

bool less(const TValue& a, const TValue& b, bool& ok) {
  ok = true;
  if (a.is_number() && b.is_number()) {
    if (a.kind() == TValue::Kind::kFloat || b.kind() == TValue::Kind::kFloat)
      return a.as_double() < b.as_double();
    return a.as_int() < b.as_int();
  }
  // UTF-8's byte order is code point order, Python's order for str.
  if (a.is_string() && b.is_string()) return a.str() < b.str();
  if (a.is_sequence() && b.is_sequence() && a.flavor() == b.flavor()) {
    const auto& x = a.items();
    const auto& y = b.items();
    for (std::size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (equal(x[i], y[i])) continue;
      return less(x[i], y[i], ok);
    }
    return x.size() < y.size();
  }
  ok = false;
  return false;
}

namespace {

void json_string(const std::string& s, bool ensure_ascii, std::string& out) {
  out += '"';
  for (std::size_t i = 0; i < s.size();) {
    const unsigned char byte = static_cast<unsigned char>(s[i]);
    char buf[16];
    if (byte < 0x80) {
      switch (byte) {
        case '"': out += "\\\""; break;
        case '\\': out += "\\\\"; break;
        case '\n': out += "\\n"; break;
        case '\r': out += "\\r"; break;
        case '\t': out += "\\t"; break;
        case '\b': out += "\\b"; break;
        case '\f': out += "\\f"; break;
        default:
          if (byte < 0x20) {
            std::snprintf(buf, sizeof buf, "\\u%04x", byte);
            out += buf;
          } else {
            out += static_cast<char>(byte);
          }
      }
      ++i;
      continue;
    }
    const std::size_t len = text::char_len(byte);
    if (!ensure_ascii) {
      out.append(s, i, len);
    } else {
      const unsigned c = static_cast<unsigned>(text::code_point(s, i));
      if (c >= 0x10000) {
        const unsigned v = c - 0x10000;
        std::snprintf(buf, sizeof buf, "\\u%04x\\u%04x", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
      } else {
        std::snprintf(buf, sizeof buf, "\\u%04x", c);
      }
      out += buf;
    }
    i += len;
  }
  out += '"';
}

bool json_value(const TValue& v, const JsonStyle& style, int depth, std::string& out,
                std::string& error) {
  using K = TValue::Kind;
  const std::string item_sep =
      !style.item_separator.empty() ? style.item_separator : style.indent >= 0 ? "," : ", ";
  const auto newline = [&](int level) {
    if (style.indent < 0) return;
    out += '\n';
    out.append(static_cast<std::size_t>(style.indent) * static_cast<std::size_t>(level), ' ');
  };
  switch (v.kind()) {
    case K::kNone: out += "null"; return true;
    case K::kBool: out += v.as_bool() ? "true" : "false"; return true;
    case K::kInt: out += std::to_string(v.as_int()); return true;
    case K::kFloat: {
      const double d = v.as_double();
      out += std::isnan(d) ? "NaN" : std::isinf(d) ? (d > 0 ? "Infinity" : "-Infinity") : float_repr(d);
      return true;
    }
    case K::kString: json_string(v.str(), style.ensure_ascii, out); return true;
    case K::kList: {
      if (!v.is_sequence()) {
        error = std::string("Object of type ") + v.type_name() + " is not JSON serializable";
        return false;
      }
      if (v.items().empty()) {
        out += "[]";
        return true;
      }
      out += '[';
      for (std::size_t i = 0; i < v.items().size(); ++i) {
        if (i) out += item_sep;
        newline(depth + 1);
        if (!json_value(v.items()[i], style, depth + 1, out, error)) return false;
      }
      newline(depth);
      out += ']';
      return true;
    }
    case K::kDict: {
      if (v.members().empty()) {
        out += "{}";
        return true;
      }
      std::vector<const std::pair<std::string, TValue>*> members;
      for (const auto& m : v.members()) members.push_back(&m);
      if (style.sort_keys) {
        // json.dumps sorts the keys themselves: integers by value, strings by code point, and
        // refuses a mix.
        bool ok = true;
        std::stable_sort(members.begin(), members.end(), [&](const auto* x, const auto* y) {
          return less(decode_key(x->first), decode_key(y->first), ok);
        });
        if (!ok) {
          error = "json.dumps(sort_keys=True) cannot order integer and string keys";
          return false;
        }
      }
      out += '{';
      for (std::size_t i = 0; i < members.size(); ++i) {
        if (i) out += item_sep;
        newline(depth + 1);
        json_string(decode_key(members[i]->first).to_str(), style.ensure_ascii, out);  // an int key as its digits
        out += style.key_separator;
        if (!json_value(members[i]->second, style, depth + 1, out, error)) return false;
      }
      newline(depth);
      out += '}';
      return true;
    }
    default:
      error = std::string("Object of type ") + v.type_name() + " is not JSON serializable";
      return false;
  }
}

}  // namespace

bool to_json(const TValue& v, const JsonStyle& style, std::string& out, std::string& error) {
  return json_value(v, style, 0, out, error);
}

}  // namespace recur::detail
