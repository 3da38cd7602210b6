// NVIDIA's Nemotron-H and Nemotron Nano 2 (config.json model_type "nemotron_h"), dense: a stack
// of pre-norm residual blocks, x += mixer(rmsnorm(x)), each block one letter of
// hybrid_override_pattern: M a Mamba-2 mixer (layers/ssd_mixer.h, its gated norm per group),
// * softmax attention (grouped kv heads, head_dim of its own, no positions), - a squared-ReLU
// MLP (down(relu(up(h))^2), no state). Experts (E) are refused by name. docs/nemotron_h.md.
#pragma once

#include <cmath>
#include <string>

#include "layers/ssd_mixer.h"
#include "model/family.h"

namespace recur::models::nemotron_h {

struct NemotronHConfig final : FamilyConfig {
  std::string pattern = "M-M-M-M*-";  // hybrid_override_pattern: a letter per layer
  // The attention layers.
  int n_heads = 32, n_kv_heads = 8, head_dim = 128;
  bool attention_bias = false;
  // The MLP layers (their width is ModelConfig::intermediate_size).
  bool mlp_bias = false;
  // The Mamba-2 layers: inner width m_heads * m_head_dim (not expand * hidden_size: Nemotron
  // Nano 2 9B's 128 heads of 80 are 10240 wide at hidden_size 4480).
  int m_heads = 128, m_head_dim = 64, m_state = 128, m_groups = 8, m_conv = 4;
  bool m_conv_bias = true;
  bool use_bias = false;  // the mixers' in_proj and out_proj biases
  double dt_min = 0, dt_max = HUGE_VAL;
  bool has_dt_limit = false;  // config.json gave time_step_limit (written back only then)

  model::SsdSpec ssd(const ModelConfig& c) const;
};

const NemotronHConfig& config_of(const ModelConfig& c);

/// What each letter of hybrid_override_pattern builds.
enum class Block { kMamba, kAttention, kMlp };
Block block_of(char letter);

// nemotron_h_config.cpp
void read_config(const json::Value& root, model::Fields& f, ModelConfig& c);
void resolve(ModelConfig& c, const std::string& source);
std::string config_fields(const ModelConfig& c);
std::vector<model::MakeOption> make_model_options();
std::string make_model_config(const model::MakeOptions& o);

}  // namespace recur::models::nemotron_h
