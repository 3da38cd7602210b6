// A small JSON reader and writer for the files recur reads: config.json, the safetensors header
// and its index. Strict (RFC 8259): no comments, no trailing commas, bounded nesting, and every
// error names the byte offset where parsing stopped.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace recur::json {

class Value {
 public:
  enum class Kind { kNull, kBool, kNumber, kString, kArray, kObject };

  Kind kind() const { return kind_; }
  bool is_null() const { return kind_ == Kind::kNull; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_number() const { return kind_ == Kind::kNumber; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_array() const { return kind_ == Kind::kArray; }
  bool is_object() const { return kind_ == Kind::kObject; }
  /// Whether the number was written as an integer (no fraction, no exponent) that fits int64.
  bool is_integer() const { return kind_ == Kind::kNumber && integral_; }

  bool boolean() const { return bool_; }
  double number() const { return number_; }
  std::int64_t integer() const { return integer_; }
  const std::string& string() const { return string_; }
  const std::vector<Value>& array() const { return array_; }
  /// Members in the order they appear in the text.
  const std::vector<std::pair<std::string, Value>>& object() const { return object_; }
  /// Moves the members out (objects only), leaving the object empty: for large objects whose
  /// strings the caller keeps.
  std::vector<std::pair<std::string, Value>> take_object() { return std::move(object_); }
  /// The member named `key`, or null when there is none (objects only).
  const Value* find(std::string_view key) const;

  /// "null", "a boolean", "a number", ... for error messages.
  static const char* kind_name(Kind kind);
  const char* kind_name() const { return kind_name(kind_); }

 private:
  friend class Parser;
  Kind kind_ = Kind::kNull;
  bool bool_ = false;
  bool integral_ = false;
  double number_ = 0.0;
  std::int64_t integer_ = 0;
  std::string string_;
  std::vector<Value> array_;
  std::vector<std::pair<std::string, Value>> object_;
};

/// What a parse accepts beyond RFC 8259.
struct ParseOptions {
  /// Python's json writes a float infinity as a bare `Infinity` (`-Infinity`), which config.json
  /// files written by transformers carry (Mamba-2's `time_step_limit` is `[0.0, Infinity]`):
  /// read them as numbers. NaN stays refused: no config value means it.
  bool python_infinity = false;
};

/// Parses a whole document. Throws FormatError("[what] ...: <problem> at byte N") on any error;
/// duplicate keys in one object are an error too.
Value parse(std::string_view text, const std::string& what, const ParseOptions& options = {});

/// `s` as a JSON string literal, quotes included.
std::string quote(std::string_view s);

/// Appends `v` to `out` as compact JSON text (no spaces; members in their order; a number as
/// fmt's shortest form that reads back exactly).
void write(const Value& v, std::string& out);

}  // namespace recur::json
