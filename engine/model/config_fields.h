// Reading config.json field by field: every family's reader and the common fields go through
// Fields, which remembers what was read so that an unknown field is refused by name instead of
// silently ignored, and says which object a field belongs to ("attn[1].num_heads").
#pragma once

#include <fmt/format.h>

#include <functional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "recur/error.h"
#include "util/json.h"

namespace recur::model {

/// Widths of the model's matrices, and an attention layer's per-head limit.
constexpr int kMaxDim = 1 << 20;
constexpr int kMaxHeadDim = 1 << 16;

/// A FormatError "[ModelConfig] SOURCE: message".
template <class... Args>
[[noreturn]] void config_fail(const std::string& source, fmt::format_string<Args...> f,
                              Args&&... args) {
  throw FormatError(
      fmt::format("[ModelConfig] {}: {}", source, fmt::format(f, std::forward<Args>(args)...)));
}

/// A JSON value as a message shows it: "\"x\"", 3, true, "an array".
std::string describe_json(const json::Value& v);

/// A size computed from config values in double: an int in [1, kMaxDim], or a FormatError.
int checked_dim(const std::string& source, const char* what, double value);

/// A number as config.json's writers print it: fmt's shortest form that reads back exactly
/// ("32000", "0.5", "1e-06").
inline std::string config_number(double x) { return fmt::format("{}", x); }
inline std::string config_bool(bool b) { return b ? "true" : "false"; }

/// Writes a family's part of config.json (Family::config_fields), a line per field:
/// "  \"key\": value,\n", in the order written; or an object nested in it, on one line.
class FieldWriter {
 public:
  /// A field whose value is already JSON text (a list, an object, a quoted literal, null).
  void add(const char* key, const std::string& value) { items_.emplace_back(key, value); }
  void number(const char* key, double x) { add(key, config_number(x)); }
  void boolean(const char* key, bool b) { add(key, config_bool(b)); }
  void string(const char* key, const std::string& s) { add(key, json::quote(s)); }
  /// The fields as config.json's top level holds them, a line each.
  std::string text() const {
    std::string out;
    for (const auto& [key, value] : items_) out += fmt::format("  \"{}\": {},\n", key, value);
    return out;
  }
  /// The fields on one line, "\"key\": value" joined by ", " (without braces).
  std::string items() const {
    std::string out;
    for (const auto& [key, value] : items_)
      out += fmt::format("{}\"{}\": {}", out.empty() ? "" : ", ", key, value);
    return out;
  }
  /// The fields as one object on one line: {"key": value, ...}.
  std::string object() const { return "{" + items() + "}"; }
  bool empty() const { return items_.empty(); }

 private:
  std::vector<std::pair<std::string, std::string>> items_;
};

/// A field that config.json may carry and recur accepts without reading it, with the reason it
/// changes nothing recur computes: training-only, bookkeeping, or a value that selects what recur
/// does anyway (docs/models.md, "Which fields are accepted"). Every family lists its accepted
/// fields this way, so that the reason for each stands beside its name.
struct Accepted {
  const char* key;
  const char* reason;
};

class Fields {
 public:
  /// The fields of `object`; `owner` prefixes names in messages ("" at the top level).
  Fields(const json::Value& object, const std::string& source, std::string owner = "")
      : object_(object), source_(source), owner_(std::move(owner)) {}

  /// The field, or null when absent or null; marks it read.
  const json::Value* get(const char* name);
  /// Whether the field is there and not null (without marking it read).
  bool has(const char* name) const {
    const json::Value* v = object_.find(name);
    return v && !v->is_null();
  }
  /// Whether the object holds the field as null (which for some fields means other than its
  /// absence).
  bool is_null(const char* name) const {
    const json::Value* v = object_.find(name);
    return v && v->is_null();
  }
  int integer(const char* name, int fallback, int min, int max);
  double number(const char* name, double fallback, double min, double max);
  bool boolean(const char* name, bool fallback);
  std::string string(const char* name, const std::string& fallback);
  /// Accepts a field without reading it; `reason` says why it changes nothing at inference.
  void accept(const char* key, const char* reason);
  void accept(const std::vector<Accepted>& table);
  /// Accepts a field whose value `changes_nothing` approves (absent and null too) for `reason`;
  /// any other value is refused by name, `refusal` ending the message.
  void accept_when(const char* key, const std::function<bool(const json::Value&)>& changes_nothing,
                   const char* reason, const char* refusal);
  /// Refuses the first field neither read nor accepted, naming it; `why` ends the message.
  void reject_unknown(const char* why) const;
  /// The name as messages print it: "owner.name".
  std::string name(const char* field) const {
    return owner_.empty() ? std::string(field) : owner_ + "." + field;
  }
  const std::string& source() const { return source_; }

 private:
  const json::Value& object_;
  const std::string& source_;
  std::string owner_;
  std::set<std::string> used_;
};

}  // namespace recur::model
