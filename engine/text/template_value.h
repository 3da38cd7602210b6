// The values a chat template computes with: Jinja's (that is, Python's) None, bools, ints,
// floats, strings, lists and dicts, plus Undefined, namespaces, macros and the loop object.
// Printing, comparing and tojson follow Python so that a rendering equals Jinja2's byte for byte.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace recur::json {
class Value;
}

namespace recur::detail {

struct MacroNode;
class TValue;
using TList = std::vector<TValue>;
// Python dicts keep insertion order, and tojson and items() show it; templates' dicts are small,
// so a vector searched in order is enough.
using TDict = std::vector<std::pair<std::string, TValue>>;

class TValue {
 public:
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kNamespace, kMacro, kFunction };

  TValue() = default;  // Undefined
  static TValue none() { return TValue(Kind::kNone); }
  static TValue boolean(bool b);
  static TValue integer(std::int64_t i);
  static TValue real(double d);
  static TValue string(std::string s);
  /// markupsafe's Markup, which Jinja2's `safe` and `escape` filters return even with autoescape
  /// off (transformers' setup): text taken as already escaped. It prints as it is, but `+` with a
  /// plain string escapes that string (& < > " ' as &amp; &lt; &gt; &#34; &#39;), and its string
  /// methods keep the mark; `~`, join and tojson give plain strings.
  static TValue markup(std::string s);
  /// What a sequence is in Python, which decides how it prints, compares and what it allows:
  /// a list, a tuple ((a, b)), an iterator (what map, select, reject, unique, items and reverse
  /// return: always true, no length, no index, never printed), or a dict's items(), keys() or
  /// values() view (printed as dict_items([...]), no index, not JSON).
  enum class Flavor : std::uint8_t { kList, kTuple, kIterator, kItems, kKeys, kValues };
  static TValue list(TList items, Flavor flavor = Flavor::kList);
  static TValue tuple(TList items) { return list(std::move(items), Flavor::kTuple); }
  static TValue dict(TDict items);
  static TValue make_namespace(TDict items);
  static TValue macro(const MacroNode* node);
  /// A global function (raise_exception, strftime_now, range, ...) named as a value: templates
  /// ask `strftime_now is defined`.
  static TValue function(std::string name);
  /// A JSON document's value: integers stay ints, other numbers floats, as Python's json does.
  static TValue from_json(const json::Value& v);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_markup() const { return kind_ == Kind::kString && markup_; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_tuple() const { return kind_ == Kind::kList && flavor_ == Flavor::kTuple; }
  Flavor flavor() const { return flavor_; }
  /// A list or a tuple: a sequence with a length and indexes.
  bool is_sequence() const { return kind_ == Kind::kList && (flavor_ == Flavor::kList || flavor_ == Flavor::kTuple); }
  bool is_iterator() const { return kind_ == Kind::kList && flavor_ == Flavor::kIterator; }
  /// Dicts and namespaces both map names to values.
  bool is_mapping() const { return kind_ == Kind::kDict || kind_ == Kind::kNamespace; }
  bool is_number() const { return kind_ == Kind::kInt || kind_ == Kind::kFloat || kind_ == Kind::kBool; }

  bool as_bool() const { return b_; }
  std::int64_t as_int() const { return i_; }
  /// ints, bools and floats as a double.
  double as_double() const;
  const std::string& str() const { return *s_; }
  const TList& items() const { return *list_; }
  /// The list itself, for list.pop() (allowed in Jinja2's immutable sandbox, as list.clear() is):
  /// every value that shares it sees the change, as in Python. Lists are built per rendering
  /// (from its JSON and by the template), never shared between renderings.
  TList& mutable_items() const { return *list_; }
  const TDict& members() const { return *dict_; }
  /// A namespace's members, which `set ns.x = ...` changes.
  TDict& mutable_members() const { return *dict_; }
  const MacroNode* macro_node() const { return macro_; }

  /// The member `key` of a dict or namespace, Undefined when absent.
  TValue get(std::string_view key) const;
  /// d[key] for a key of any type (an int key included), Undefined when absent.
  TValue get_key(const TValue& key) const;
  /// Python's truth: Undefined, None, False, 0, 0.0, "", [] and {} are false.
  bool truthy() const;
  /// Python's str(): what {{ x }} prints (Undefined prints nothing, None "None").
  std::string to_str() const;
  /// Python's repr(), used for the items of printed lists and dicts.
  std::string repr() const;
  /// "undefined", "none", "string", ... for error messages.
  const char* type_name() const;

 private:
  explicit TValue(Kind k) : kind_(k) {}
  Kind kind_ = Kind::kUndefined;
  bool b_ = false;
  bool markup_ = false;
  Flavor flavor_ = Flavor::kList;
  std::int64_t i_ = 0;
  double d_ = 0.0;
  std::shared_ptr<const std::string> s_;
  std::shared_ptr<TList> list_;
  std::shared_ptr<TDict> dict_;
  const MacroNode* macro_ = nullptr;
};

/// Dict keys. Templates' dicts may have integer keys (Seed-OSS's `{0: 0, 512: 128, ...}`); a
/// TDict keeps every key as text: a string as it is, an integer (or a bool, which Python hashes
/// as one) as "\x01i" and its digits, and a string that itself begins with "\x01" as "\x01s"
/// and the string. `ok` is false for a key of another type.
std::string encode_key(const TValue& key, bool& ok);
/// A string key as stored (the common case: itself).
std::string encode_key(std::string_view key);
TValue decode_key(const std::string& key);

/// Python's ==: 1 == 1.0 == True, lists and dicts by content, Undefined equal only to Undefined.
bool equal(const TValue& a, const TValue& b);
/// Python's <, for numbers, strings (by code point) and lists; `ok` false when the types do not
/// order.
bool less(const TValue& a, const TValue& b, bool& ok);

/// Python's repr of a float: the shortest text that reads back to the same double.
std::string float_repr(double d);

/// How transformers' tojson calls json.dumps.
struct JsonStyle {
  int indent = -1;  // -1: none (one line)
  bool ensure_ascii = false;
  bool sort_keys = false;
  std::string item_separator;  // "" means the default: ", " one-line, "," indented
  std::string key_separator = ": ";
};
/// json.dumps(v, ...). Returns false (and names the offending type in `error`) for values
/// JSON cannot hold (Undefined, a macro, a namespace).
bool to_json(const TValue& v, const JsonStyle& style, std::string& out, std::string& error);

}  // namespace recur::detail
