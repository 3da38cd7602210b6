#include "model/config_fields.h"

#include <stdexcept>

namespace recur::model {

std::string describe_json(const json::Value& v) {
  if (v.is_string()) return json::quote(v.string());
  if (v.is_number()) return fmt::format("{}", v.number());
  if (v.is_bool()) return v.boolean() ? "true" : "false";
  // A short list of scalars shows its values ("[3, 7]"), so that a refusal says what it saw.
  if (v.is_array() && !v.array().empty() && v.array().size() <= 8) {
    std::string s = "[";
    for (const auto& e : v.array()) {
      if (e.is_array() || e.is_object()) return v.kind_name();
      s += (s.size() > 1 ? ", " : "") + describe_json(e);
    }
    return s + "]";
  }
  return v.kind_name();
}

int checked_dim(const std::string& source, const char* what, double value) {
  if (!(value >= 1.0 && value <= double(kMaxDim)))
    config_fail(source, "{} is {}, expected 1 to {}", what, value, kMaxDim);
  return static_cast<int>(value);
}

const json::Value* Fields::get(const char* field) {
  used_.insert(field);
  const json::Value* v = object_.find(field);
  return v && !v->is_null() ? v : nullptr;
}

int Fields::integer(const char* field, int fallback, int min, int max) {
  const json::Value* v = get(field);
  if (!v) return fallback;
  if (!v->is_integer() || v->integer() < min || v->integer() > max)
    config_fail(source_, "{} is {}, expected an integer in {} to {}", name(field), describe_json(*v),
                min, max);
  return static_cast<int>(v->integer());
}

double Fields::number(const char* field, double fallback, double min, double max) {
  const json::Value* v = get(field);
  if (!v) return fallback;
  if (!v->is_number() || !(v->number() >= min && v->number() <= max))
    config_fail(source_, "{} is {}, expected a number in {} to {}", name(field), describe_json(*v),
                min, max);
  return v->number();
}

bool Fields::boolean(const char* field, bool fallback) {
  const json::Value* v = get(field);
  if (!v) return fallback;
  if (!v->is_bool())
    config_fail(source_, "{} is {}, expected true or false", name(field), describe_json(*v));
  return v->boolean();
}

std::string Fields::string(const char* field, const std::string& fallback) {
  const json::Value* v = get(field);
  if (!v) return fallback;
  if (!v->is_string())
    config_fail(source_, "{} is {}, expected a string", name(field), describe_json(*v));
  return v->string();
}

void Fields::accept(const char* key, const char* reason) {
  // A reason is what makes a field safe to accept: an entry without one is a bug in recur.
  if (!reason || !*reason)
    throw std::logic_error(fmt::format("[Fields::accept] {}: accepted without a reason", name(key)));
  used_.insert(key);
}

void Fields::accept(const std::vector<Accepted>& table) {
  for (const Accepted& a : table) accept(a.key, a.reason);
}

void Fields::accept_when(const char* key,
                         const std::function<bool(const json::Value&)>& changes_nothing,
                         const char* reason, const char* refusal) {
  accept(key, reason);
  const json::Value* v = object_.find(key);
  if (v && !v->is_null() && !changes_nothing(*v))
    config_fail(source_, "{} is {}: {}", name(key), describe_json(*v), refusal);
}

void Fields::reject_unknown(const char* why) const {
  for (const auto& [key, value] : object_.object()) {
    (void)value;
    if (!used_.count(key))
      config_fail(source_, "unknown field '{}': {}", name(key.c_str()), why);
  }
}

}  // namespace recur::model
