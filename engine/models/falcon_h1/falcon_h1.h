// TII's Falcon-H1 (transformers' falcon_h1): in every layer a Mamba-2 mixer and a softmax
// attention run side by side on the same normed input, and both add to the residual; then a
// SwiGLU MLP. Its muP multipliers scale the embeddings, the logits, each branch's input and
// output, the keys, the MLP's gate and output, and in_proj's five parts (z, x, B, C, dt: the
// mup_vector). docs/mamba2.md, "Falcon-H1".
#pragma once

#include <array>
#include <cmath>
#include <string>
#include <vector>

#include "layers/ssd_mixer.h"
#include "model/config_fields.h"
#include "model/family.h"
#include "recur/model.h"
#include "util/json.h"

namespace recur::models::falcon_h1 {

struct FalconH1Config final : FamilyConfig {
  // Attention.
  int n_heads = 8, n_kv_heads = 2, head_dim = 0;  // head_dim 0: hidden_size / n_heads
  bool attention_bias = false, mlp_bias = false;
  double rope_theta = 1e11;
  bool rope_parameters = false;  // written as transformers 5 does (rope_parameters), else rope_theta
  int max_position_embeddings = 8192;
  // The Mamba-2 mixers.
  int m_heads = 128, m_head_dim = 0, m_state = 256, m_groups = 1, m_conv = 4;
  int d_ssm = 0;  // mamba_d_ssm; 0: null, mamba_expand * hidden_size
  double expand = 2;
  bool m_conv_bias = true, m_proj_bias = false, projectors_bias = false;
  bool rms_norm = false, norm_before_gate = true;
  double dt_min = 0, dt_max = HUGE_VAL;
  // The multipliers.
  double embedding_multiplier = 1, lm_head_multiplier = 1, key_multiplier = 1;
  double attention_in_multiplier = 1, attention_out_multiplier = 1;
  double ssm_in_multiplier = 1, ssm_out_multiplier = 1;
  std::array<double, 2> mlp_multipliers{1, 1};           // gate, down
  std::array<double, 5> ssm_multipliers{1, 1, 1, 1, 1};  // z, x, B, C, dt

  int attn_head_dim(const ModelConfig& c) const { return head_dim ? head_dim : c.hidden_size / n_heads; }
  int inner(const ModelConfig& c) const {
    return d_ssm ? d_ssm : int(std::floor(expand * double(c.hidden_size)));
  }
  model::SsdSpec ssd(const ModelConfig& c) const;
};

const FalconH1Config& config_of(const ModelConfig& c);

void read_config(const json::Value& root, model::Fields& f, ModelConfig& c);
void resolve(ModelConfig& c, const std::string& source);
std::string config_fields(const ModelConfig& c);
/// make-model's options and configuration.
std::vector<model::MakeOption> make_model_options();
std::string make_model_config(const model::MakeOptions& o);

}  // namespace recur::models::falcon_h1
