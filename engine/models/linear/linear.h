// The linear-attention family: flash-linear-attention's linear_attn (pre-norm RMSNorm blocks, a
// feature map after the head split, grouped kv heads, a per-head output norm, a SwiGLU MLP) and
// the paper's model, transformers_are_rnns (post-norm LayerNorm blocks, projections with bias, a
// ReLU or GELU MLP). docs/models.md.
#pragma once

#include <string>

#include "model/config_schema.h"
#include "model/family.h"

namespace recur::models::linear {

/// Feature maps linear_attn's config.json may name.
enum class ModelFeatureMap { kElu, kRelu, kIdentity, kHedgehog, kT2R, kDpfp, kElementwiseProduct };

/// What linear_attn and the paper's model add to ModelConfig's common fields.
struct LinearConfig final : FamilyConfig {
  bool fla_layout = true;  // linear_attn (pre-norm, SwiGLU); false: transformers_are_rnns (resolved)
  double expand_k = 1.0;  // key width hidden_size * expand_k
  double expand_v = 1.0;  // value width hidden_size * expand_v
  std::string hidden_act = "swish";
  ModelFeatureMap feature_map = ModelFeatureMap::kElementwiseProduct;
  bool tie_feature_map_qk = false;
  bool norm_q = false;
  bool norm_k = false;
  bool norm_feature_map = false;   // the normalized form
  bool elementwise_affine = true;  // the per-head output norm has a weight
  double attn_eps = 1e-10;         // added to the denominator in the normalized form
  double hidden_ratio = 4;         // the MLP's width when intermediate_size is not given
  int max_position_embeddings = 2048;  // read and range-checked; no positional encoding uses it
  // Derived (resolve()).
  int key_dim = 0, value_dim = 0;      // q and o widths: hidden_size * expand_k / expand_v
  int head_k_dim = 0, head_v_dim = 0;  // per head
  int kv_groups = 1;                   // num_heads / num_kv_heads
  int d_feature = 0;                   // per head, after the feature map
  float attn_scale = 1.0f;             // multiplies phi(q)
};

/// The family's fields of a configuration; logic_error when it holds another family's.
const LinearConfig& config_of(const ModelConfig& c);
/// The family's fields of `c` to change (for configurations built in code, such as the tests').
inline LinearConfig& edit(ModelConfig& c) { return model::edit_family<LinearConfig>(c); }
/// A feature map's name as config.json spells it.
const char* feature_map_name(ModelFeatureMap map);

// linear_config.cpp
/// config.json's fields of each layout, declared once (reading, writing, make-model).
const model::Schema<LinearConfig>& linear_attn_schema();
const model::Schema<LinearConfig>& transformers_are_rnns_schema();
void read_config(const std::string& type, model::Fields& f, ModelConfig& c);
void resolve(ModelConfig& c, const std::string& source);
std::string config_fields(const ModelConfig& c);

}  // namespace recur::models::linear
