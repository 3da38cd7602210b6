// The builtins published templates use beyond the first subset: Jinja2's dictsort, sort and indent
// filters, markupsafe's escaping (the safe and escape filters' Markup), str.format, and the list
// and dict methods as Jinja2's immutable sandbox (transformers' environment) allows or refuses
// them.
#include <fmt/format.h>

#include <algorithm>

#include "text/template_more.h"
#include "text/template_strings.h"

namespace recur::detail {

namespace {

// The key Jinja2's case-insensitive sorts compare by: a string lowered, anything else itself.
TValue fold(const TValue& v, bool case_sensitive) {
  return !case_sensitive && v.is_string() ? TValue::string(change_case(v.str(), 0)) : v;
}

// Python's sorted(items, key=..., reverse=...): stable both ways, a TypeError where two keys do
// not order.
void stable_sort_by(std::vector<std::pair<TValue, TValue>>& keyed, bool reverse, const char* what) {
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
    bool ok = true;
    const bool r = reverse ? less(y.first, x.first, ok) : less(x.first, y.first, ok);
    if (!ok) refuse(fmt::format("{} cannot order a {} and a {}", what, x.first.type_name(), y.first.type_name()));
    return r;
  });
}

// Python's str.splitlines() line breaks.
bool line_break(char32_t c) {
  return c == U'\n' || c == U'\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D || c == 0x1E ||
         c == 0x85 || c == 0x2028 || c == 0x2029;
}

std::vector<std::u32string> split_lines(const std::u32string& s) {
  std::vector<std::u32string> lines;
  std::size_t start = 0;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (!line_break(s[i])) continue;
    lines.push_back(s.substr(start, i - start));
    if (s[i] == U'\r' && i + 1 < s.size() && s[i + 1] == U'\n') ++i;
    start = i + 1;
  }
  if (start < s.size()) lines.push_back(s.substr(start));
  return lines;
}

// The value of one replacement field's name in str.format: "0", "name", "0.attr", "x[key]".
TValue format_field(const std::string& field, const CallArgs& args, std::size_t& auto_index, int& numbering) {
  std::size_t end = field.find_first_of(".[");
  const std::string head = field.substr(0, end);
  TValue v;
  if (head.empty() || std::all_of(head.begin(), head.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    const int mode = head.empty() ? 1 : 2;
    if (numbering != 0 && numbering != mode)
      refuse("str.format: cannot switch between automatic and manual field numbering");
    numbering = mode;
    const std::size_t i = head.empty() ? auto_index++ : std::stoul(head.size() > 9 ? "999999999" : head);
    if (i >= args.positional.size())
      refuse(fmt::format("str.format: replacement index {} out of range for {} positional arguments", i,
                         args.positional.size()));
    v = args.positional[i];
  } else {
    bool found = false;
    for (const auto& [k, x] : args.keyword)
      if (k == head) {
        v = x;
        found = true;
      }
    if (!found) refuse(fmt::format("str.format: no argument named '{}'", head));
  }
  while (end < field.size()) {
    if (field[end] == '.') {
      const std::size_t next = std::min(field.find_first_of(".[", end + 1), field.size());
      const std::string attr = field.substr(end + 1, next - end - 1);
      if (attr.empty()) refuse("str.format: an empty attribute in a field name");
      if (!v.is_mapping()) refuse(fmt::format("str.format: a {} has no attribute '{}'", v.type_name(), attr));
      v = v.get(attr);  // Jinja2's sandbox reads a dict's attribute as its item
      end = next;
    } else {
      const std::size_t close = field.find(']', end);
      if (close == std::string::npos) refuse("str.format: a '[' without its ']' in a field name");
      const std::string key = field.substr(end + 1, close - end - 1);
      const bool digits =
          !key.empty() && std::all_of(key.begin(), key.end(), [](char c) { return c >= '0' && c <= '9'; });
      if (digits && v.is_sequence()) {
        const std::size_t i = key.size() > 9 ? v.items().size() : std::stoul(key);
        if (i >= v.items().size()) refuse("str.format: list index out of range");
        v = v.items()[i];
      } else if (!digits && v.kind() == TValue::Kind::kDict) {
        const TValue x = v.get(key);
        if (x.is_undefined()) refuse(fmt::format("str.format: no key '{}'", key));
        v = x;
      } else {
        refuse(fmt::format("str.format: a {} cannot be indexed by [{}]", v.type_name(), key));
      }
      end = close + 1;
      if (end < field.size() && field[end] != '.' && field[end] != '[')
        refuse("str.format: only '.' or '[' may follow ']' in a field name");
    }
  }
  return v;
}

// format(value, spec) for the specs templates write: [[fill]align][width] on strings and
// integers; anything else is refused by name rather than rendered differently.
std::string apply_spec(const TValue& v, const std::string& text, const std::string& spec) {
  if (spec.empty()) return text;
  const std::u32string u = decode_utf8(spec);
  std::size_t at = 0;
  char32_t fill = U' ';
  char32_t align = 0;
  if (u.size() >= 2 && (u[1] == U'<' || u[1] == U'>' || u[1] == U'^')) {
    fill = u[0];
    align = u[1];
    at = 2;
  } else if (!u.empty() && (u[0] == U'<' || u[0] == U'>' || u[0] == U'^')) {
    align = u[0];
    at = 1;
  }
  std::size_t width = 0;
  while (at < u.size() && u[at] >= U'0' && u[at] <= U'9' && width < 100000) width = width * 10 + (u[at++] - U'0');
  const bool is_int = v.kind() == TValue::Kind::kInt;
  if (at < u.size() && !(u[at] == U's' && v.is_string() && at + 1 == u.size()) &&
      !(u[at] == U'd' && is_int && at + 1 == u.size()))
    refuse(fmt::format("str.format: unsupported format spec '{}' for a {}", spec, v.type_name()));
  if (!v.is_string() && !is_int)
    refuse(fmt::format("str.format: unsupported format spec '{}' for a {}", spec, v.type_name()));
  const std::u32string t = decode_utf8(text);
  if (t.size() >= width) return text;
  const std::size_t pad = width - t.size();
  if (align == 0) align = is_int ? U'>' : U'<';
  const std::size_t left = align == U'<' ? 0 : align == U'>' ? pad : pad / 2;
  return encode_utf8(std::u32string(left, fill) + t + std::u32string(pad - left, fill));
}

}  // namespace

std::string html_escape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (const char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

TValue escape_value(const TValue& v, Budget& budget) {
  if (v.is_markup()) return v;
  const std::string text = to_str(v, budget);
  budget.allocate(text.size() * 5);
  return TValue::markup(html_escape(text));
}

TValue dictsort(const TValue& input, const CallArgs& args, Budget& budget) {
  check_arity(args, 3, "dictsort", {"case_sensitive", "by", "reverse"});
  const bool case_sensitive = arg(args, 0, "case_sensitive", TValue::boolean(false)).truthy();
  const std::string by = want_string(arg(args, 1, "by", TValue::string("key")), "dictsort's by");
  if (by != "key" && by != "value") refuse("dictsort: you can only sort by either \"key\" or \"value\"");
  const bool reverse = arg(args, 2, "reverse", TValue::boolean(false)).truthy();
  if (input.kind() != TValue::Kind::kDict) refuse(fmt::format("dictsort needs a dict, got {}", input.type_name()));
  std::vector<std::pair<TValue, TValue>> keyed;
  for (const auto& [k, v] : input.members())
    keyed.emplace_back(fold(by == "key" ? decode_key(k) : v, case_sensitive), TValue::tuple({decode_key(k), v}));
  stable_sort_by(keyed, reverse, "dictsort");
  TList out;
  for (auto& [key, item] : keyed) out.push_back(std::move(item));
  return make_list(std::move(out), budget);
}

TValue sort(const TValue& input, const CallArgs& args, Budget& budget) {
  check_arity(args, 3, "sort", {"reverse", "case_sensitive", "attribute"});
  const bool reverse = arg(args, 0, "reverse", TValue::boolean(false)).truthy();
  const bool case_sensitive = arg(args, 1, "case_sensitive", TValue::boolean(false)).truthy();
  const TValue attribute = arg(args, 2, "attribute", TValue::none());
  // attribute="a,b" sorts by a, then b (Jinja2's multi-attribute getter); each may be a path.
  std::vector<std::string> paths;
  if (!attribute.is_none() && !attribute.is_undefined()) {
    const std::string& spec = want_string(attribute, "sort's attribute");
    for (std::size_t at = 0; at <= spec.size();) {
      const std::size_t comma = std::min(spec.find(',', at), spec.size());
      paths.push_back(spec.substr(at, comma - at));
      at = comma + 1;
    }
  }
  std::vector<std::pair<TValue, TValue>> keyed;
  for (const auto& item : iterate(input, "sort")) {
    if (paths.empty()) {
      keyed.emplace_back(fold(item, case_sensitive), item);
      continue;
    }
    TList parts;
    for (const auto& p : paths) parts.push_back(fold(attribute_path(item, p), case_sensitive));
    // Always a list, as Jinja2's multi-attribute getter makes it: lists compare item by item,
    // equal items (Undefined equals Undefined) skipped, so missing attributes only fail where
    // they are ordered against a value.
    keyed.emplace_back(TValue::list(std::move(parts)), item);
  }
  stable_sort_by(keyed, reverse, "sort");
  TList out;
  for (auto& [key, item] : keyed) out.push_back(std::move(item));
  return make_list(std::move(out), budget);
}

TValue indent(const TValue& input, const CallArgs& args, Budget& budget) {
  check_arity(args, 3, "indent", {"width", "first", "blank"});
  const TValue width = arg(args, 0, "width", TValue::integer(4));
  std::string indention;
  if (width.is_string()) {
    indention = width.str();
  } else {
    const std::int64_t n = want_int(width, "indent's width");
    if (n > 0) {
      budget.allocate(static_cast<std::uint64_t>(n));
      indention.assign(static_cast<std::size_t>(n), ' ');
    }
  }
  const bool first = arg(args, 1, "first", TValue::boolean(false)).truthy();
  const bool blank = arg(args, 2, "blank", TValue::boolean(false)).truthy();
  // Jinja2 adds "\n" to its input first, so anything but a string is a TypeError there.
  if (!input.is_string()) refuse(fmt::format("indent needs a string, got {}", input.type_name()));
  const std::vector<std::u32string> lines = split_lines(decode_utf8(input.str() + "\n"));
  budget.allocate(input.str().size() + (lines.size() + 1) * (indention.size() + 1));
  const std::u32string pad = decode_utf8(indention);
  std::u32string rv;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    if (i > 0) rv += U'\n';
    if ((i > 0 || first) && (blank || !lines[i].empty() || i == 0)) rv += pad;
    rv += lines[i];
  }
  std::string out = encode_utf8(rv);
  return input.is_markup() ? TValue::markup(std::move(out)) : make_string(std::move(out), budget);
}

TValue str_format(const std::string& s, bool markup, const CallArgs& args, Budget& budget) {
  std::string out;
  std::size_t auto_index = 0;
  int numbering = 0;  // 0 none yet, 1 automatic, 2 manual
  for (std::size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '}') {
      if (i + 1 < s.size() && s[i + 1] == '}') {
        out += '}';
        ++i;
        continue;
      }
      refuse("str.format: a single '}' in the format string");
    }
    if (c != '{') {
      out += c;
      continue;
    }
    if (i + 1 < s.size() && s[i + 1] == '{') {
      out += '{';
      ++i;
      continue;
    }
    const std::size_t close = s.find('}', i);
    if (close == std::string::npos) refuse("str.format: a single '{' in the format string");
    std::string field = s.substr(i + 1, close - i - 1);
    if (field.find('{') != std::string::npos) refuse("str.format: unsupported construct: a field inside a format spec");
    std::string spec, conversion;
    if (const std::size_t colon = field.find(':'); colon != std::string::npos) {
      spec = field.substr(colon + 1);
      field.resize(colon);
    }
    if (const std::size_t bang = field.find('!'); bang != std::string::npos) {
      conversion = field.substr(bang + 1);
      field.resize(bang);
      if (conversion != "r" && conversion != "s")
        refuse(fmt::format("str.format: unsupported conversion '!{}'", conversion));
    }
    const TValue v = format_field(field, args, auto_index, numbering);
    std::string text;
    if (conversion == "r") {
      text = v.repr();
    } else {
      if (v.is_list() && !v.is_sequence() && v.flavor() == TValue::Flavor::kIterator)
        refuse("str.format of a generator: Jinja2 prints its address; add | list");
      text = to_str(v, budget);
    }
    if (markup && !v.is_markup()) text = html_escape(text);  // Markup.format escapes what it inserts
    const std::string field_text = apply_spec(conversion.empty() ? v : TValue::string(text), text, spec);
    budget.allocate(field_text.size());
    out += field_text;
    i = close;
  }
  return markup ? TValue::markup(std::move(out)) : make_string(std::move(out), budget);
}

bool container_method(const std::string& name, const TValue& self, const CallArgs& args, Budget& budget,
                      TValue& result) {
  // What ImmutableSandboxedEnvironment refuses (its _mutable_spec): a template cannot change a
  // list or dict in place. list.pop and list.clear are not in its list, so they work.
  static const std::vector<std::string> kListRefused = {"append", "extend", "insert", "remove", "reverse", "sort"};
  static const std::vector<std::string> kDictRefused = {"update", "pop", "popitem", "setdefault", "clear"};
  const bool list = self.kind() == TValue::Kind::kList && self.flavor() == TValue::Flavor::kList;
  const bool dict = self.kind() == TValue::Kind::kDict;
  const auto& refused = list ? kListRefused : kDictRefused;
  if ((list || dict) && std::find(refused.begin(), refused.end(), name) != refused.end())
    refuse(fmt::format("{}.{}() is refused: Jinja2's immutable sandbox, where transformers renders templates, "
                       "forbids changing a {} in place (access to attribute '{}' of '{}' object is unsafe)",
                       list ? "list" : "dict", name, list ? "list" : "dict", name, list ? "list" : "dict"));
  if ((list || dict) && name == "copy") {
    check_arity(args, 0, name);
    budget.allocate((list ? self.items().size() : self.members().size()) * sizeof(TValue));
    result = list ? TValue::list(self.items()) : TValue::dict(self.members());
    return true;
  }
  if (list && name == "clear") {
    check_arity(args, 0, name);
    self.mutable_items().clear();
    result = TValue::none();
    return true;
  }
  if (list && name == "pop") {
    check_arity(args, 1, name);
    TList& items = self.mutable_items();
    if (items.empty()) refuse("pop from empty list");
    const auto n = static_cast<std::int64_t>(items.size());
    std::int64_t i = want_int(arg(args, 0, "index", TValue::integer(-1)), "list.pop's index");
    if (i < 0) i += n;
    if (i < 0 || i >= n) refuse("pop index out of range");
    result = items[static_cast<std::size_t>(i)];
    items.erase(items.begin() + static_cast<std::ptrdiff_t>(i));
    return true;
  }
  return false;
}

TValue markup_method(const std::string& name, const TValue& self, const CallArgs& args, Budget& budget) {
  // markupsafe escapes the string arguments of the methods it wraps, and marks their result.
  CallArgs escaped = args;
  for (auto& a : escaped.positional)
    if (a.is_string() && !a.is_markup()) a = TValue::string(html_escape(a.str()));
  if (name == "format") return str_format(self.str(), true, args, budget);
  if (name == "join") {
    check_arity(args, 1, name);
    if (args.positional.empty()) refuse("join needs an argument");
    TList items;
    for (const auto& x : iterate(args.positional[0], "join"))
      items.push_back(escape_value(x, budget));
    CallArgs list_args;
    list_args.positional.push_back(TValue::list(std::move(items)));
    return TValue::markup(string_method("join", self.str(), list_args, budget).str());
  }
  static const std::vector<std::string> kMarked = {"strip", "lstrip", "rstrip", "replace", "upper",
                                                   "lower", "title", "capitalize"};
  const bool marked = std::find(kMarked.begin(), kMarked.end(), name) != kMarked.end();
  const TValue r = string_method(name, self.str(), marked ? escaped : args, budget);
  if (r.is_string() && marked) return TValue::markup(r.str());
  if ((name == "split" || name == "rsplit") && r.is_list()) {
    TList items;
    for (const auto& x : r.items()) items.push_back(TValue::markup(x.str()));
    return TValue::list(std::move(items));
  }
  return r;
}

}  // namespace recur::detail
