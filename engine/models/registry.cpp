// The registry of model families. A new family is its folder under engine/models/ and one line in
// families.def (docs/adding-a-model.md).
#include "models/registry.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "recur/error.h"

namespace recur::model {
namespace {

// The families built in, then any registered at run time (register_family).
std::vector<const Family*>& families_list() {
#define RECUR_FAMILY(f) &models::f##_family(),
  static std::vector<const Family*> list = {
#include "models/families.def"
  };
#undef RECUR_FAMILY
  return list;
}

// The model_type each value of the deprecated Architecture enum stands for: configurations
// built in code that set `architecture` and leave `type` empty. A new family has no value here.
const char* deprecated_type(Architecture a) {
  switch (a) {
    case Architecture::kLinearAttn: return "linear_attn";
    case Architecture::kTransformersAreRnns: return "transformers_are_rnns";
    case Architecture::kBased: return "based";
    case Architecture::kGla: return "gla";
    case Architecture::kRetNet: return "retnet";
    case Architecture::kHgrn2: return "hgrn2";
    case Architecture::kRwkv7: return "rwkv7";
    case Architecture::kQwen35: return "qwen3_5";
    case Architecture::kGatedDeltaNet: return "gated_deltanet";
  }
  return "";
}

}  // namespace

bool Family::reads(const std::string& type, const json::Value& root) const {
  (void)root;
  for (const auto& t : model_types())
    if (t == type) return true;
  return false;
}

std::string type_of(const ModelConfig& c) {
  return c.type.empty() ? deprecated_type(c.architecture) : c.type;
}

const Family* family_named(const std::string& type) {
  for (const Family* f : families_list())
    for (const auto& t : f->model_types())
      if (t == type) return f;
  return nullptr;
}

const Family& family_of(const ModelConfig& c) {
  const std::string type = type_of(c);
  if (const Family* f = family_named(type)) return *f;
  throw ArgumentError(fmt::format("[ModelConfig] type is '{}'; recur reads {}", type,
                                  known_model_types()));
}

const Family* family_reading(const std::string& type, const json::Value& root) {
  for (const Family* f : families_list())
    if (f->reads(type, root)) return f;
  return nullptr;
}

std::vector<const Family*> families() { return families_list(); }

void register_family(const Family& family) {
  for (const auto& type : family.model_types())
    if (const Family* other = family_named(type))
      throw std::logic_error(fmt::format("[register_family] model_type '{}' of {} is {}'s already",
                                         type, family.name(), other->name()));
  families_list().push_back(&family);
}

const Family* family_for_arch(const std::string& arch) {
  for (const Family* f : families_list())
    for (const auto& a : f->make_model_archs())
      if (a == arch) return f;
  return nullptr;
}

ModelConfig config_from_weights(const WeightSource& weights, const std::string& source) {
  for (const Family* f : families_list())
    if (auto c = f->config_from_weights(weights, source)) return *c;
  throw FormatError("[Model] " + source + ": no config.json, and the tensors are no bare "
                    "checkpoint recur reads (BlinkDL's RWKV-7 .pth: emb.weight, blocks.0.att.r_k, ...)");
}

std::string known_model_types() {
  std::vector<std::string> types, also;
  for (const Family* f : families_list()) {
    for (const auto& t : f->model_types()) types.push_back(t);
    if (*f->also_reads()) also.push_back(f->also_reads());
  }
  for (const auto& a : also) types.push_back(a);
  if (types.size() > 1) types.back() = "and " + types.back();
  return fmt::format("{}", fmt::join(types, ", "));
}

}  // namespace recur::model
