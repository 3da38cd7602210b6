// Jinja2's filters and tests, and Python's str and dict methods, as chat templates use them,
// with Python's semantics (code point indexes, str.split's two modes, Unicode whitespace).
#include "text/template_builtins.h"

#include <fmt/format.h>
#include <utf8proc.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <set>

#include "text/template_more.h"
#include "text/template_strings.h"
#include "text/unicode.h"

namespace recur::detail {

namespace {

const std::set<std::string_view> kFilters = {
    "abs",    "capitalize", "count",  "d",         "default", "dictsort",   "e",      "escape",
    "first",  "float",      "indent", "int",       "items",   "join",       "last",   "length",
    "list",   "lower",      "map",    "max",       "min",     "reject",     "rejectattr", "replace",
    "reverse", "safe",      "select", "selectattr", "sort",   "string",     "sum",    "title",
    "tojson", "trim",       "unique", "upper"};
// Every filter and test Jinja2 3.1 has (with transformers' tojson): a name outside these is one
// Jinja2 itself does not know, which it refuses when it compiles the template, or, inside an
// `if` or a conditional expression, only when that code runs.
const std::set<std::string_view> kJinja2Filters = {
    "abs", "attr", "batch", "capitalize", "center", "count", "d", "default", "dictsort", "e",
    "escape", "filesizeformat", "first", "float", "forceescape", "format", "groupby", "indent",
    "int", "items", "join", "last", "length", "list", "lower", "map", "max", "min", "pprint",
    "random", "reject", "rejectattr", "replace", "reverse", "round", "safe", "select",
    "selectattr", "slice", "sort", "string", "striptags", "sum", "title", "tojson", "trim",
    "truncate", "unique", "upper", "urlencode", "urlize", "wordcount", "wordwrap", "xmlattr"};
const std::set<std::string_view> kJinja2Tests = {
    "!=", "<", "<=", "==", ">", ">=", "boolean", "callable", "defined", "divisibleby", "eq",
    "equalto", "escaped", "even", "false", "filter", "float", "ge", "greaterthan", "gt", "in",
    "integer", "iterable", "le", "lessthan", "lower", "lt", "mapping", "ne", "none", "number",
    "odd", "sameas", "sequence", "string", "test", "true", "undefined", "upper"};
const std::set<std::string_view> kTests = {
    "boolean", "callable", "defined", "divisibleby", "eq", "equalto", "even", "false", "float",
    "ge", "gt", "in", "integer", "iterable", "le", "lower", "lt", "mapping", "ne", "none",
    "number", "odd", "sameas", "sequence", "string", "true", "undefined", "upper",
    "==", "!=", "<", "<=", ">", ">="};
const std::set<std::string_view> kMethods = {
    "startswith", "endswith", "split", "rsplit", "strip", "lstrip", "rstrip", "replace", "upper",
    "lower", "title", "capitalize", "find", "count", "join", "items", "keys", "values", "get", "index",
    "format", "pop", "clear", "copy",
    // refused when they run, as Jinja2's immutable sandbox refuses them (template_more.cpp)
    "append", "extend", "insert", "remove", "sort", "reverse", "update", "popitem", "setdefault"};
const std::set<std::string_view> kFunctions = {"range", "namespace", "dict", "raise_exception",
                                               "strftime_now"};


std::int64_t py_len(const TValue& v) {
  if (v.is_undefined()) return 0;
  if (v.is_string()) return static_cast<std::int64_t>(decode_utf8(v.str()).size());
  if (v.is_iterator()) refuse("object of type 'generator' has no len()");
  if (v.is_list()) return static_cast<std::int64_t>(v.items().size());
  if (v.is_mapping() && v.kind() == TValue::Kind::kDict) return static_cast<std::int64_t>(v.members().size());
  refuse(fmt::format("length of {} is not defined", v.type_name()));
}

TValue attribute_of(const TValue& v, const std::string& path) {
  TValue cur = v;
  std::size_t at = 0;
  while (at <= path.size()) {
    const std::size_t dot = std::min(path.find('.', at), path.size());
    const std::string part = path.substr(at, dot - at);
    if (cur.is_undefined()) refuse(fmt::format("attribute '{}' of an undefined value", part));
    if (cur.is_sequence() && !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      const auto i = std::strtoull(part.c_str(), nullptr, 10);
      cur = i < cur.items().size() ? cur.items()[i] : TValue();
    } else {
      cur = cur.get(part);
    }
    at = dot + 1;
  }
  return cur;
}

// select/reject/selectattr/rejectattr: keep the items whose test (truth without one) is `keep`.
TValue select_items(const TValue& input, const CallArgs& args, bool by_attr, bool keep, Budget& budget) {
  TList out;
  // Jinja2 walks only a true input: none, false, 0 and Undefined give nothing.
  if (!input.truthy()) return make_list(std::move(out), budget, TValue::Flavor::kIterator);
  const std::size_t first = by_attr ? 1 : 0;
  std::string attr;
  if (by_attr) {
    if (args.positional.empty()) refuse("selectattr and rejectattr need an attribute name");
    attr = want_string(args.positional[0], "the attribute");
  }
  std::string test;
  CallArgs test_args;
  if (args.positional.size() > first) {
    test = want_string(args.positional[first], "the test");
    if (!known_test(test)) refuse(fmt::format("unsupported test '{}'", test));
    test_args.positional.assign(args.positional.begin() + static_cast<std::ptrdiff_t>(first) + 1, args.positional.end());
  }
  for (const auto& item : iterate(input, "select")) {
    const TValue v = by_attr ? attribute_of(item, attr) : item;
    const bool pass = test.empty() ? v.truthy() : apply_test(test, v, test_args);
    if (pass == keep) out.push_back(item);
  }
  return make_list(std::move(out), budget, TValue::Flavor::kIterator);
}

TValue map_items(const TValue& input, const CallArgs& args, Budget& budget) {
  TList out;
  if (!input.truthy()) return make_list(std::move(out), budget, TValue::Flavor::kIterator);  // as select
  const TValue attr = arg(args, 99, "attribute");
  if (!attr.is_undefined()) {
    const TValue fallback = arg(args, 99, "default");
    for (const auto& item : iterate(input, "map")) {
      TValue v = attribute_of(item, want_string(attr, "map's attribute"));
      out.push_back(v.is_undefined() && !fallback.is_undefined() ? fallback : v);
    }
    return make_list(std::move(out), budget, TValue::Flavor::kIterator);
  }
  if (args.positional.empty()) refuse("map needs a filter name or attribute=");
  const std::string& filter = want_string(args.positional[0], "map's filter");
  if (!known_filter(filter)) refuse(fmt::format("unsupported filter '{}'", filter));
  CallArgs rest;
  rest.positional.assign(args.positional.begin() + 1, args.positional.end());
  rest.keyword = args.keyword;
  for (const auto& item : iterate(input, "map")) out.push_back(apply_filter(filter, item, rest, budget));
  return make_list(std::move(out), budget, TValue::Flavor::kIterator);
}

TValue tojson(const TValue& input, const CallArgs& args, Budget& budget) {
  check_arity(args, 1, "tojson", {"indent", "ensure_ascii", "separators", "sort_keys"});
  JsonStyle style;
  const TValue indent = arg(args, 0, "indent");
  if (!indent.is_undefined() && !indent.is_none()) {
    style.indent = static_cast<int>(std::clamp<std::int64_t>(want_int(indent, "tojson's indent"), 0, 64));
  }
  style.ensure_ascii = arg(args, 99, "ensure_ascii", TValue::boolean(false)).truthy();
  style.sort_keys = arg(args, 99, "sort_keys", TValue::boolean(false)).truthy();
  const TValue seps = arg(args, 99, "separators");
  if (!seps.is_undefined() && !seps.is_none()) {
    if (!seps.is_list() || seps.items().size() != 2) refuse("tojson's separators must be a pair of strings");
    style.item_separator = want_string(seps.items()[0], "tojson's separators");
    style.key_separator = want_string(seps.items()[1], "tojson's separators");
    if (style.item_separator.empty()) refuse("tojson's item separator is empty");
  }
  std::string out, error;
  if (!to_json(input, style, out, error)) refuse(error);
  return make_string(std::move(out), budget);
}

TValue to_number(const TValue& v, bool integral, const TValue& fallback) {
  if (v.kind() == TValue::Kind::kInt || v.kind() == TValue::Kind::kBool)
    return integral ? TValue::integer(v.as_int()) : TValue::real(static_cast<double>(v.as_int()));
  if (v.kind() == TValue::Kind::kFloat) {
    const double d = v.as_double();
    if (!integral) return v;
    if (std::isfinite(d) && std::fabs(d) < 9.2e18) return TValue::integer(static_cast<std::int64_t>(d));
    return fallback;
  }
  if (v.is_string()) {
    const std::string t = py_strip(v.str(), TValue(), true, true);
    char* end = nullptr;
    errno = 0;
    if (integral) {
      const long long i = std::strtoll(t.c_str(), &end, 10);
      if (!t.empty() && end == t.c_str() + t.size() && errno == 0) return TValue::integer(i);
    }
    const double d = std::strtod(t.c_str(), &end);
    if (!t.empty() && end == t.c_str() + t.size() && t.find_first_of("xXpP") == std::string::npos)
      return integral ? to_number(TValue::real(d), true, fallback) : TValue::real(d);
  }
  return fallback;
}

// What Python cannot hash: a list, a dict, or a tuple holding one. Null when `v` hashes.
const TValue* unhashable(const TValue& v) {
  if (v.is_tuple()) {
    for (const auto& x : v.items())
      if (const TValue* bad = unhashable(x)) return bad;
    return nullptr;
  }
  return v.is_list() || v.is_mapping() ? &v : nullptr;
}

// The key Jinja2's case-insensitive filters compare by: a string lowered, anything else itself.
TValue folded(const TValue& v) { return v.is_string() ? TValue::string(change_case(v.str(), 0)) : v; }

}  // namespace

bool known_filter(std::string_view name) { return kFilters.count(name) != 0; }
bool known_test(std::string_view name) { return kTests.count(name) != 0; }
bool known_method(std::string_view name) { return kMethods.count(name) != 0; }
bool known_function(std::string_view name) { return kFunctions.count(name) != 0; }
bool jinja2_filter(std::string_view name) { return kJinja2Filters.count(name) != 0; }
bool jinja2_test(std::string_view name) { return kJinja2Tests.count(name) != 0; }

TValue attribute_path(const TValue& v, const std::string& path) { return attribute_of(v, path); }

void Budget::allocate(std::uint64_t bytes) {
  if (bytes > limits_.max_bytes)
    refuse(fmt::format("a value of {} bytes passes the cap of {} bytes (ChatTemplateLimits::max_bytes)",
                     bytes, limits_.max_bytes));
  allocated_ += bytes;
  if (allocated_ > limits_.max_allocated_bytes)
    refuse(fmt::format("the rendering built more than {} bytes of values (ChatTemplateLimits::max_allocated_bytes)",
                     limits_.max_allocated_bytes));
}


std::string to_str(const TValue& value, Budget& budget) {
  if (value.is_string()) return value.str();
  if (value.is_list() || value.is_mapping()) budget.allocate(16 * (value.is_list() ? value.items().size() : value.members().size()));
  std::string s = value.to_str();
  budget.allocate(s.size());
  return s;
}

namespace {

// An upper bound of the bytes repr() or json.dumps() writes for `v` (each byte escaped, each
// item with its punctuation), cut short once past `cap`.
std::uint64_t text_bound(const TValue& v, std::uint64_t cap, std::uint64_t sum = 0) {
  if (sum > cap) return sum;
  if (v.is_string()) return sum + 10 * v.str().size() + 2;
  if (v.is_iterator())
    refuse("printing a generator (the lazy result of map, select, reject, unique, items or reverse): "
           "Jinja2 prints its address; add | list");
  if (v.is_list()) {
    sum += 2;
    for (const auto& x : v.items()) {
      sum = text_bound(x, cap, sum + 2);
      if (sum > cap) return sum;
    }
    return sum;
  }
  if (v.kind() == TValue::Kind::kDict) {
    sum += 2;
    for (const auto& [k, x] : v.members()) {
      sum = text_bound(x, cap, sum + 10 * k.size() + 6);
      if (sum > cap) return sum;
    }
    return sum;
  }
  return sum + 32;
}

void check_text_bound(const TValue& v, Budget& budget) {
  const std::uint64_t cap = budget.limits().max_bytes;
  if (text_bound(v, cap) > cap)
    refuse(fmt::format("the text of a {} would pass the cap of {} bytes (ChatTemplateLimits::max_bytes)",
                     v.type_name(), cap));
}

TValue string_filter(const std::string& name, const std::string& s, const CallArgs& args, Budget& budget) {
  if (name == "trim") {
    check_arity(args, 1, "trim", {"chars"});
    return make_string(py_strip(s, arg(args, 0, "chars"), true, true), budget);
  }
  if (name == "upper") return make_string(change_case(s, 1), budget);
  if (name == "lower") return make_string(change_case(s, 0), budget);
  if (name == "capitalize") return make_string(change_case(s, 3), budget);
  if (name == "title") return make_string(jinja_title(s), budget);
  if (name == "replace") {
    check_arity(args, 3, "replace", {"old", "new", "count"});
    const TValue count = arg(args, 2, "count");
    return make_string(py_replace(s, to_str(arg(args, 0, "old"), budget), to_str(arg(args, 1, "new"), budget),
                                  count.is_undefined() || count.is_none() ? -1 : want_int(count, "replace's count"), budget),
                       budget);
  }
  refuse("unreachable filter " + name);
}

// The filters that walk a sequence: items, list, first, last, reverse, join, select, reject,
// selectattr, rejectattr, map, unique, sum, min, max. `found` is false for any other name.
TValue sequence_filter(const std::string& name, const TValue& input, const CallArgs& args, Budget& budget,
                       bool& found) {
  found = true;
  if (name == "items") {
    // A generator of (key, value) tuples, nothing for Undefined.
    if (input.is_undefined()) return TValue::list({}, TValue::Flavor::kIterator);
    if (input.kind() != TValue::Kind::kDict) refuse(fmt::format("items needs a dict, got {}", input.type_name()));
    TList out;
    for (const auto& [k, v] : input.members()) out.push_back(TValue::tuple({decode_key(k), v}));
    return make_list(std::move(out), budget, TValue::Flavor::kIterator);
  }
  if (name == "list") return make_list(iterate(input, "list"), budget);
  if (name == "first" || name == "last") {
    const TList items = iterate(input, name.c_str());
    if (name == "last" && input.is_iterator()) refuse("'generator' object is not reversible");
    if (items.empty()) return TValue();
    return name == "first" ? items.front() : items.back();
  }
  if (name == "reverse") {
    if (input.is_string()) {
      std::u32string u = decode_utf8(input.str());
      std::reverse(u.begin(), u.end());
      return make_string(encode_utf8(u), budget);
    }
    // reversed() where Python has it (an iterator), else a reversed list.
    TList items = iterate(input, "reverse");
    std::reverse(items.begin(), items.end());
    return make_list(std::move(items), budget, input.is_iterator() ? TValue::Flavor::kList : TValue::Flavor::kIterator);
  }
  if (name == "join") {
    check_arity(args, 2, "join", {"d", "attribute"});
    const std::string sep = to_str(arg(args, 0, "d", TValue::string("")), budget);
    const TValue attr = arg(args, 1, "attribute");
    std::string out;
    bool first = true;
    for (const auto& item : iterate(input, "join")) {
      const TValue v = attr.is_undefined() ? item : attribute_of(item, to_str(attr, budget));
      check_text_bound(v, budget);
      const std::string piece = to_str(v, budget);
      budget.allocate(piece.size() + sep.size());
      if (!first) out += sep;
      out += piece;
      first = false;
      if (out.size() > budget.limits().max_bytes) budget.allocate(out.size());
    }
    return make_string(std::move(out), budget);
  }
  if (name == "select" || name == "reject") return select_items(input, args, false, name == "select", budget);
  if (name == "selectattr" || name == "rejectattr") return select_items(input, args, true, name == "selectattr", budget);
  if (name == "map") return map_items(input, args, budget);
  if (name == "unique") {
    // Jinja2 keeps the first of items equal ignoring case, and hashes them (no lists or dicts).
    TList out, keys;
    for (const auto& item : iterate(input, "unique")) {
      if (const TValue* bad = unhashable(item)) refuse(fmt::format("unhashable type: '{}'", bad->type_name()));
      const TValue key = folded(item);
      if (std::none_of(keys.begin(), keys.end(), [&](const TValue& x) { return equal(x, key); })) {
        keys.push_back(key);
        out.push_back(item);
      }
    }
    return make_list(std::move(out), budget, TValue::Flavor::kIterator);
  }
  if (name == "sum" || name == "min" || name == "max") {
    const TList items = iterate(input, name.c_str());
    if (name == "sum") {
      TValue total = arg(args, 1, "start", TValue::integer(0));
      for (const auto& item : items) {
        if (!item.is_number() || !total.is_number()) refuse(fmt::format("sum of a {}", item.type_name()));
        const bool real = item.kind() == TValue::Kind::kFloat || total.kind() == TValue::Kind::kFloat;
        total = real ? TValue::real(total.as_double() + item.as_double())
                     : TValue::integer(total.as_int() + item.as_int());
      }
      return total;
    }
    if (items.empty()) return TValue();
    // Strings compare ignoring case, as Jinja2's min and max do by default.
    TValue best = items[0];
    for (const auto& item : items) {
      bool ok = true;
      const bool better = name == "min" ? less(folded(item), folded(best), ok) : less(folded(best), folded(item), ok);
      if (!ok) refuse(fmt::format("{} cannot order a {} and a {}", name, item.type_name(), best.type_name()));
      if (better) best = item;
    }
    return best;
  }
  found = false;
  return TValue();
}

}  // namespace

TValue apply_filter(const std::string& name, const TValue& input, const CallArgs& args, Budget& budget) {
  if (name == "default" || name == "d") {
    check_arity(args, 2, name, {"default_value", "boolean"});
    const bool by_truth = arg(args, 1, "boolean", TValue::boolean(false)).truthy();
    const bool replace = input.is_undefined() || (by_truth && !input.truthy());
    return replace ? arg(args, 0, "default_value", TValue::string("")) : input;
  }
  if (name == "tojson") {
    if (input.is_list() && !input.is_sequence())
      refuse(fmt::format("Object of type {} is not JSON serializable", input.type_name()));
    check_text_bound(input, budget);
    return tojson(input, args, budget);
  }
  if (name == "safe") {
    check_text_bound(input, budget);
    if (input.is_markup()) return input;
    return TValue::markup(input.is_string() ? input.str() : to_str(input, budget));  // Markup(str(value))
  }
  if (name == "escape" || name == "e") {
    check_arity(args, 0, name);
    check_text_bound(input, budget);
    return escape_value(input, budget);
  }
  if (name == "dictsort") return dictsort(input, args, budget);
  if (name == "sort") return sort(input, args, budget);
  if (name == "indent") return indent(input, args, budget);
  if (name == "string") {
    check_text_bound(input, budget);
    return input.is_string() ? input : make_string(to_str(input, budget), budget);
  }
  if (name == "length" || name == "count") return TValue::integer(py_len(input));
  if (name == "trim" || name == "upper" || name == "lower" || name == "capitalize" || name == "title" ||
      name == "replace") {
    // Jinja2 turns the input into a string first (Undefined into "").
    check_text_bound(input, budget);
    TValue r = string_filter(name, input.is_string() ? input.str() : to_str(input, budget), args, budget);
    // Jinja2 calls the Markup's own trim, upper, lower and capitalize, which keep the mark; its
    // title and replace (autoescape off) build plain strings.
    if (input.is_markup() && name != "title" && name != "replace") return TValue::markup(r.str());
    return r;
  }
  if (name == "int" || name == "float") {
    check_arity(args, 2, name, {"default", "base"});
    const TValue fallback = arg(args, 0, "default", name == "int" ? TValue::integer(0) : TValue::real(0.0));
    // int(Undefined) raises in Jinja2, whatever the default.
    if (input.is_undefined()) refuse(fmt::format("{} of an undefined value", name));
    return to_number(input, name == "int", fallback);
  }
  if (name == "abs") {
    if (input.kind() == TValue::Kind::kFloat) return TValue::real(std::fabs(input.as_double()));
    const std::int64_t i = want_int(input, "abs");
    if (i == INT64_MIN) refuse("abs overflows 64 bits");
    return TValue::integer(i < 0 ? -i : i);
  }
  bool found = false;
  TValue result = sequence_filter(name, input, args, budget, found);
  if (found) return result;
  refuse(fmt::format("unsupported filter '{}'", name));
}

bool apply_test(const std::string& name, const TValue& v, const CallArgs& args) {
  using K = TValue::Kind;
  const auto other = [&]() {
    if (args.positional.empty()) refuse(fmt::format("the test '{}' needs an argument", name));
    return args.positional[0];
  };
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "boolean") return v.kind() == K::kBool;
  if (name == "true") return v.kind() == K::kBool && v.as_bool();
  if (name == "false") return v.kind() == K::kBool && !v.as_bool();
  if (name == "integer") return v.kind() == K::kInt;
  if (name == "float") return v.kind() == K::kFloat;
  if (name == "number") return v.is_number();
  if (name == "string") return v.is_string();
  if (name == "mapping") return v.kind() == K::kDict;
  // Jinja2's Undefined can be iterated (as nothing) and has a length, so these hold for it.
  if (name == "iterable") return v.is_string() || v.is_list() || v.kind() == K::kDict || v.is_undefined();
  if (name == "sequence") return v.is_string() || v.is_sequence() || v.kind() == K::kDict || v.is_undefined();
  if (name == "callable") return v.kind() == K::kMacro || v.kind() == K::kFunction || v.is_undefined();  // Undefined has __call__
  if (name == "odd" || name == "even" || name == "divisibleby") {
    // value % 2 == 1, value % 2 == 0, value % num == 0, with Python's modulo.
    const TValue d = name == "divisibleby" ? other() : TValue::integer(2);
    if (!v.is_number() || !d.is_number()) refuse(fmt::format("the test '{}' needs numbers, got {}", name, v.type_name()));
    if (d.as_double() == 0.0) refuse(fmt::format("the test '{}' divides by zero", name));
    double m = 0.0;
    if (v.kind() == K::kFloat || d.kind() == K::kFloat) {
      m = std::fmod(v.as_double(), d.as_double());
      if (m != 0.0 && ((m < 0) != (d.as_double() < 0))) m += d.as_double();
    } else {
      std::int64_t r = d.as_int() == -1 ? 0 : v.as_int() % d.as_int();
      if (r != 0 && ((r < 0) != (d.as_int() < 0))) r += d.as_int();
      m = static_cast<double>(r);
    }
    return name == "odd" ? m == 1.0 : m == 0.0;
  }
  if (name == "lower" || name == "upper") {
    // str(value).islower(): some cased character, and none of the other case.
    const std::string s = v.to_str();
    return s == change_case(s, name == "lower" ? 0 : 1) && s != change_case(s, name == "lower" ? 1 : 0);
  }
  if (name == "eq" || name == "equalto" || name == "==") return equal(v, other());
  if (name == "ne" || name == "!=") return !equal(v, other());
  if (name == "sameas") {
    const TValue o = other();
    if (v.kind() != o.kind()) return false;
    return v.is_none() || v.is_undefined() || (v.kind() == K::kBool && v.as_bool() == o.as_bool()) ||
           (v.is_mapping() && &v.members() == &o.members()) || (v.is_list() && &v.items() == &o.items());
  }
  if (name == "in") {
    const TValue o = other();
    if (o.is_string()) return v.is_string() && o.str().find(v.str()) != std::string::npos;
    for (const auto& item : iterate(o, "in"))
      if (equal(item, v)) return true;
    return false;
  }
  bool ok = true;
  bool result = false;
  if (name == "lt" || name == "<") result = less(v, other(), ok);
  else if (name == "gt" || name == ">") result = less(other(), v, ok);
  else if (name == "le" || name == "<=") result = !less(other(), v, ok);
  else if (name == "ge" || name == ">=") result = !less(v, other(), ok);
  else refuse(fmt::format("unsupported test '{}'", name));
  if (!ok) refuse(fmt::format("the test '{}' cannot order a {} and a {}", name, v.type_name(), other().type_name()));
  return result;
}


TValue call_method(const std::string& name, const TValue& self, const CallArgs& args, Budget& budget) {
  if (self.is_markup()) return markup_method(name, self, args, budget);
  if (self.is_string() && name == "format") return str_format(self.str(), false, args, budget);
  if (self.is_string()) return string_method(name, self.str(), args, budget);
  if (TValue result; container_method(name, self, args, budget, result)) return result;
  if (self.kind() == TValue::Kind::kDict) {
    if (name == "items" || name == "keys" || name == "values") {
      check_arity(args, 0, name);
      TList out;
      for (const auto& [k, v] : self.members()) {
        if (name == "items") out.push_back(TValue::tuple({decode_key(k), v}));
        else out.push_back(name == "keys" ? decode_key(k) : v);
      }
      return make_list(std::move(out), budget,
                       name == "items" ? TValue::Flavor::kItems : name == "keys" ? TValue::Flavor::kKeys : TValue::Flavor::kValues);
    }
    if (name == "get") {
      check_arity(args, 2, name);
      if (args.positional.empty()) refuse("get needs a key");
      const TValue v = self.get_key(args.positional[0]);
      return v.is_undefined() ? arg(args, 1, "default", TValue::none()) : v;
    }
  }
  if (self.is_sequence() && (name == "count" || name == "index")) {
    // list.count(x) and list.index(x).
    check_arity(args, 1, name);
    if (args.positional.empty()) refuse(name + " needs an argument");
    std::int64_t n = 0;
    for (std::size_t i = 0; i < self.items().size(); ++i) {
      if (!equal(self.items()[i], args.positional[0])) continue;
      if (name == "index") return TValue::integer(static_cast<std::int64_t>(i));
      ++n;
    }
    if (name == "index") refuse(fmt::format("{} is not in the list", args.positional[0].repr()));
    return TValue::integer(n);
  }
  if (self.is_undefined()) refuse(fmt::format("the method '{}' of an undefined value", name));
  refuse(fmt::format("a {} has no method '{}'", self.type_name(), name));
}

TValue call_function(const std::string& name, const CallArgs& args, Budget& budget) {
  if (name == "raise_exception") {
    check_arity(args, 1, name);
    throw RaisedError(args.positional.empty() ? std::string() : to_str(args.positional[0], budget));
  }
  if (name == "namespace" || name == "dict") {
    if (!args.positional.empty()) refuse(name + " takes keyword arguments only");
    TDict members;
    for (const auto& [k, v] : args.keyword) members.emplace_back(k, v);
    return name == "dict" ? TValue::dict(std::move(members)) : TValue::make_namespace(std::move(members));
  }
  if (name == "range") {
    if (args.positional.empty() || args.positional.size() > 3 || !args.keyword.empty()) refuse("range takes 1 to 3 integers");
    std::int64_t start = 0, stop = 0, step = 1;
    if (args.positional.size() == 1) {
      stop = want_int(args.positional[0], "range");
    } else {
      start = want_int(args.positional[0], "range");
      stop = want_int(args.positional[1], "range");
      if (args.positional.size() == 3) step = want_int(args.positional[2], "range");
    }
    if (step == 0) refuse("range's step is 0");
    const double count = std::max(0.0, std::ceil((static_cast<double>(stop) - static_cast<double>(start)) / static_cast<double>(step)));
    budget.allocate(static_cast<std::uint64_t>(std::min(count, 1e18)) * sizeof(TValue));
    // Counted first, in unsigned arithmetic, so that no step can overflow near the ends of the
    // 64-bit range (every value produced lies between start and stop).
    const bool up = step > 0;
    const std::uint64_t span = up ? (stop > start ? static_cast<std::uint64_t>(stop) - static_cast<std::uint64_t>(start) : 0)
                                  : (start > stop ? static_cast<std::uint64_t>(start) - static_cast<std::uint64_t>(stop) : 0);
    const std::uint64_t stride = up ? static_cast<std::uint64_t>(step) : std::uint64_t(0) - static_cast<std::uint64_t>(step);
    const std::uint64_t n = span / stride + (span % stride != 0 ? 1 : 0);
    TList out;
    out.reserve(n);
    for (std::uint64_t k = 0; k < n; ++k)
      out.push_back(TValue::integer(static_cast<std::int64_t>(static_cast<std::uint64_t>(start) + k * static_cast<std::uint64_t>(step))));
    return TValue::list(std::move(out));
  }
  if (name == "strftime_now") {
    check_arity(args, 1, name);
    if (args.positional.empty()) refuse("strftime_now needs a format");
    const std::string& format = want_string(args.positional[0], "strftime_now");
    const std::time_t now = std::time(nullptr);
    std::tm local{};
    localtime_r(&now, &local);
    std::string out(256 + 4 * format.size(), '\0');
    // The format is the template's, as Python's strftime takes it.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
    const std::size_t n = format.empty() ? 0 : std::strftime(out.data(), out.size(), format.c_str(), &local);
#pragma GCC diagnostic pop
    out.resize(n);
    return make_string(std::move(out), budget);
  }
  refuse(fmt::format("unsupported function '{}'", name));
}

}  // namespace recur::detail
