// The one list of model families. A new family is its folder under engine/models/ and one line
// here (docs/adding-a-model.md).
#include "models/registry.h"

#include <stdexcept>
#include <string>
#include <vector>

#include "recur/error.h"

namespace recur::model {
namespace {

const Family* const* families_list() {
  static const Family* const list[] = {
      &models::linear_family(),
      &models::based_family(),
      &models::fla_family(),
      &models::rwkv7_family(),
      &models::gdn_family(),
      &models::lfm2_family(),
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

ModelConfig config_from_weights(const WeightSource& weights, const std::string& source) {
  for (const Family* const* f = families_list(); *f; ++f)
    if (auto c = (*f)->config_from_weights(weights, source)) return *c;
  throw FormatError("[Model] " + source + ": no config.json, and the tensors are no bare "
                    "checkpoint recur reads (BlinkDL's RWKV-7 .pth: emb.weight, blocks.0.att.r_k, ...)");
}

const char* known_model_types() {
  return "linear_attn, transformers_are_rnns, gla, retnet, hgrn2, rwkv7, qwen3_5, qwen3_5_text, "
         "gated_deltanet, delta_net, lfm2 and Based (gpt2 with alt_mixer)";
}

}  // namespace recur::model
