// The one list of model families. A new family is its folder under engine/models/ and one line
// here (docs/adding-a-model.md).
#include "models/registry.h"

#include <stdexcept>

namespace recur::model {
namespace {

const Family* const* families() {
  static const Family* const list[] = {
      &models::linear_family(),
      &models::based_family(),
      &models::fla_family(),
      nullptr,
  };
  return list;
}

}  // namespace

const Family& family_of(Architecture architecture) {
  for (const Family* const* f = families(); *f; ++f)
    if ((*f)->has(architecture)) return **f;
  throw std::logic_error("[Model] internal: no family reads this architecture");
}

const Family* family_reading(const std::string& type, const json::Value& root) {
  for (const Family* const* f = families(); *f; ++f)
    if ((*f)->reads(type, root)) return *f;
  return nullptr;
}

const char* known_model_types() {
  return "linear_attn, transformers_are_rnns, gla, retnet, hgrn2 and Based (gpt2 with alt_mixer)";
}

}  // namespace recur::model
