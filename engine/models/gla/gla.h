// The models whose mixer is GLA's decayed recurrence, as flash-linear-attention lays them out:
// GLA (a learned decay per key channel), RetNet (a fixed decay per head) and HGRN2 (a forget gate
// tied to the input), with the softmax attention layers of their hybrids: the config reader (gla_config.cpp), and the tensor table, the loader and the
// layer stack (gla.cpp). docs/fla-models.md.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "model/family.h"
#include "layers/attention.h"

namespace recur::models::gla {

/// What GLA, RetNet and HGRN2 add to ModelConfig's common fields (docs/fla-models.md).
struct GlaConfig final : FamilyConfig {
  enum class Kind { kGla, kRetNet, kHgrn2 };
  Kind kind = Kind::kGla;  // the layout, from the configuration's type (resolve())
  double expand_k = 1.0;  // GLA, RetNet: key width hidden_size * expand_k
  double expand_v = 1.0;  // GLA, RetNet: value width hidden_size * expand_v
  bool elementwise_affine = true;  // the per-head output norm has a weight
  bool use_short_conv = false;  // GLA, HGRN2: short convolutions on q, k, v (RetNet's block
                                // ignores the field)
  int conv_size = 4;
  bool use_output_gate = true;  // GLA, RetNet: g_proj and the swish-gated output norm
  std::string qk_activation;    // GLA, RetNet: feature_map on q and k ("", "relu" or "swish")
  std::optional<double> clamp_min;  // GLA: a bound on log decays (none: null)
  bool fuse_norm = true;        // names the output norm (g_norm_swish_gate or g_norm)
  int expand_ratio = 128;       // HGRN2: the forget gate's width per head
  bool use_lower_bound = true;  // HGRN2: the per-layer lower bounds of the forget gate
  int max_position_embeddings = 2048;
  double hidden_ratio = 4;      // the MLP's width when intermediate_size is not given
  model::HybridAttention attn;  // the `attn` block: softmax attention at some layers
  // Derived (resolve()).
  int key_dim = 0, value_dim = 0;      // q and o widths
  int head_k_dim = 0, head_v_dim = 0;  // per head
  int kv_groups = 1;                   // num_heads / num_kv_heads
  float attn_scale = 1.0f;             // multiplies q: head_k_dim^-1/2
  static constexpr int kGateLowRankDim = 16;          // GLA's gk_proj rank (fixed in the layer)
  static constexpr double kGateLogitNormalizer = 16;  // GLA's divisor of logsigmoid
};

/// The gated models' fields of a configuration; logic_error when it holds another family's.
const GlaConfig& config_of(const ModelConfig& c);

// gla_config.cpp
/// The model_type of a layout ("gla", "retnet", "hgrn2"), and the layout of one.
const char* model_type_of(GlaConfig::Kind kind);
GlaConfig::Kind kind_of(const std::string& type);
/// A layout's config.json fields, each once: reading, writing and make-model's options.
const model::Schema<GlaConfig>& schema(GlaConfig::Kind kind);
/// Reads the fields of model_type `type` ("gla", "retnet", "hgrn2") into `c`.
void read_config(const std::string& type, model::Fields& f, ModelConfig& c);
/// The derived sizes and the layer schedule; FormatError naming `source`.
void resolve(ModelConfig& c, const std::string& source);
/// config.json's fields for this configuration, each line "  \"key\": value,\n".
std::string config_fields(const ModelConfig& c);

}  // namespace recur::models::gla
