// The chat template's filters, tests, string and dict methods and global functions, with the
// budget every rendering spends. Names outside these lists are refused by the parser.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "recur/chat_template.h"
#include "text/template_value.h"

namespace recur::detail {

bool known_filter(std::string_view name);
bool known_test(std::string_view name);
bool known_method(std::string_view name);
bool known_function(std::string_view name);
/// Whether Jinja2 3.1 has a filter or a test of this name (recur may not).
bool jinja2_filter(std::string_view name);
bool jinja2_test(std::string_view name);

/// A failure inside a builtin; the evaluator adds the template's name and position.
class BuiltinError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
/// raise_exception(message) in the template: the template refuses its input.
class RaisedError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// What one rendering has spent of its limits.
class Budget {
 public:
  explicit Budget(const ChatTemplateLimits& limits) : limits_(limits) {}
  /// One statement or expression node. Returns false when the step budget is spent.
  bool step() { return ++steps_ <= limits_.max_steps; }
  /// A string or list of `bytes` about to be built: refused past max_bytes for one value, or
  /// past max_allocated_bytes for the whole rendering.
  void allocate(std::uint64_t bytes);
  const ChatTemplateLimits& limits() const { return limits_; }

 private:
  const ChatTemplateLimits& limits_;
  std::uint64_t steps_ = 0;
  std::uint64_t allocated_ = 0;
};

struct CallArgs {
  std::vector<TValue> positional;
  std::vector<std::pair<std::string, TValue>> keyword;
};

TValue apply_filter(const std::string& name, const TValue& input, const CallArgs& args, Budget& budget);
bool apply_test(const std::string& name, const TValue& input, const CallArgs& args);
TValue call_method(const std::string& name, const TValue& self, const CallArgs& args, Budget& budget);
/// range, namespace, dict, raise_exception, strftime_now.
TValue call_function(const std::string& name, const CallArgs& args, Budget& budget);

/// Python's str(value) built under the budget.
std::string to_str(const TValue& value, Budget& budget);

/// Code points of UTF-8 text, and back: Python indexes and slices strings by code point.
std::u32string decode_utf8(const std::string& s);
std::string encode_utf8(const std::u32string& s);

}  // namespace recur::detail
