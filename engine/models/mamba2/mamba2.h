// Mamba-2 language models: transformers' Mamba2ForCausalLM (model_type "mamba2": Codestral
// Mamba, the converted state-spaces models) and state-spaces' own mamba_ssm layout (a
// config.json of d_model, n_layer, ssm_cfg {"layer": "Mamba2"}). Every layer is
// x += mixer(rmsnorm(x)) with Mamba-2's SSD mixer (model/ssd_mixer.h); docs/mamba2.md.
#pragma once

#include <limits>
#include <string>
#include <vector>

#include "model/family.h"
#include "layers/ssd_mixer.h"

namespace recur::models::mamba2 {

struct Mamba2Config final : FamilyConfig {
  enum class Layout {
    kTransformers,  // model_type "mamba2": backbone.embeddings, lm_head
    kMambaSsm,      // mamba_ssm's MambaLMHeadModel: backbone.embedding, ssm_cfg
  };
  Layout layout = Layout::kTransformers;
  int n_heads = 24, head_dim = 64, d_state = 128, n_groups = 1, d_conv = 4;
  double expand = 2;
  bool use_bias = false, use_conv_bias = true;
  bool norm_before_gate = false;  // mamba_ssm's ssm_cfg only: transformers never reads it
  double dt_min = 0.0, dt_max = std::numeric_limits<double>::infinity();
  bool has_dt_limit = false;      // config.json gave time_step_limit (written back only then)
  // mamba_ssm: the vocabulary is padded to a multiple of this (the tensors' rows).
  int pad_vocab_size_multiple = 1;
  int stored_vocab = 0;           // the vocab_size config.json gives (before the padding)

  model::SsdSpec ssd(const ModelConfig& c) const;
};

const Mamba2Config& config_of(const ModelConfig& c);

/// Tensor names of a layout.
struct Names {
  std::string emb, final_norm, head;
  std::string layer(int i) const { return "backbone.layers." + std::to_string(i) + "."; }
};
Names names_of(const Mamba2Config& g);

// mamba2_config.cpp
bool reads(const std::string& type, const json::Value& root);
void read_config(const std::string& type, const json::Value& root, model::Fields& f,
                 ModelConfig& c);
void resolve(ModelConfig& c, const std::string& source);
/// config.json's fields; for the fingerprint, without those written only for other tools.
std::string config_fields(const ModelConfig& c, bool fingerprint = false);
/// make-model --arch mamba2: its options (both layouts') and the config.json they give.
std::vector<model::MakeOption> make_options();
std::string make_config(const model::MakeOptions& o);

}  // namespace recur::models::mamba2
