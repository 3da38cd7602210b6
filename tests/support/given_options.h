// make-model's options as the tool hands them to a family, for tests that call a family's
// make_model_config() or a schema's make_fields() without the command line.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "model/family.h"
#include "recur/error.h"

namespace recur::testing {

/// The values given (a flag is given with any value); otherwise the tool's defaults for its
/// common options (tools/cmd_write.cpp) and each declared family option's own default.
class GivenOptions final : public model::MakeOptions {
 public:
  using Values = std::vector<std::pair<std::string, std::string>>;  // {name, value}
  explicit GivenOptions(Values given, const std::vector<model::MakeOption>& declared = {})
      : given_(std::move(given)) {
    for (const auto& o : declared)
      if (o.fallback) defaults_.emplace_back(o.name, o.fallback);
  }
  bool given(const char* name) const override { return find(given_, name) != nullptr; }
  bool flag(const char* name) const override { return given(name); }
  /// ArgumentError naming the option when its value is out of [min, max], as the tool's.
  std::int64_t integer(const char* name, std::int64_t min, std::int64_t max) const override {
    const std::int64_t v = std::stoll(text(name));
    if (v < min || v > max)
      throw ArgumentError("--" + std::string(name) + " is " + std::to_string(v) + ", out of range");
    return v;
  }
  double real(const char* name, double, double) const override { return std::stod(text(name)); }
  std::string str(const char* name) const override { return text(name); }

 private:
  static const std::string* find(const Values& values, const std::string& name) {
    for (const auto& [n, v] : values)
      if (n == name) return &v;
    return nullptr;
  }
  std::string text(const std::string& name) const {
    static const Values kCommon = {
        {"vocab", "256"}, {"hidden", "64"}, {"layers", "2"}, {"heads", "4"}, {"intermediate", "0"}};
    for (const Values* values : {&given_, &kCommon, &defaults_})
      if (const std::string* v = find(*values, name)) return *v;
    return "";
  }
  Values given_, defaults_;
};

}  // namespace recur::testing
