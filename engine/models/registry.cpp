// The one list of model families. A new family is its folder under engine/models/ and one line
// here (docs/adding-a-model.md).
#include "models/registry.h"

#include <stdexcept>
#include <string>
#include <vector>

namespace recur::model {
namespace {

const Family* const* families_list() {
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
  for (const Family* const* f = families_list(); *f; ++f)
    if ((*f)->has(architecture)) return **f;
  throw std::logic_error("[Model] internal: no family reads this architecture");
}

const Family* family_reading(const std::string& type, const json::Value& root) {
  for (const Family* const* f = families_list(); *f; ++f)
    if ((*f)->reads(type, root)) return *f;
  return nullptr;
}

std::vector<const Family*> families() {
  std::vector<const Family*> out;
  for (const Family* const* f = families_list(); *f; ++f) out.push_back(*f);
  return out;
}

const Family* family_for_arch(const std::string& arch) {
  for (const Family* const* f = families_list(); *f; ++f)
    for (const auto& a : (*f)->make_model_archs())
      if (a == arch) return *f;
  return nullptr;
}

const char* known_model_types() {
  return "linear_attn, transformers_are_rnns, gla, retnet, hgrn2 and Based (gpt2 with alt_mixer)";
}

}  // namespace recur::model
