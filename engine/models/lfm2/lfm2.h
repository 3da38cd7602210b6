// Liquid AI's LFM2 and LFM2.5 (dense): gated short convolutions (in_proj to B, C and x; B * x
// through a causal depthwise convolution of conv_L_cache taps; times C; out_proj) and grouped-
// query attention with per-head q/k RMSNorm and rotary, each layer followed by a SwiGLU MLP whose
// width config.json derives. docs/lfm2.md has the layout, both config forms and the formulas.
#pragma once

#include <string>
#include <vector>

#include "model/family.h"

namespace recur::models::lfm2 {

/// What LFM2 adds to ModelConfig's common fields (hidden_size, num_hidden_layers, vocab_size,
/// norm_eps: every RMSNorm's eps, tie_word_embeddings; intermediate_size: the MLP's width after
/// the adjustment below; mixers: kShortConv or kAttention per layer).
struct Lfm2Config final : FamilyConfig {
  // The attention layers: query heads, kv heads, head size (0: hidden_size / num_heads, as
  // transformers takes it when config.json gives no head_dim).
  int n_heads = 32, n_kv_heads = 8, head_dim = 0;
  double rope_theta = 1000000;
  // The convolution blocks: taps, and whether in_proj, the convolution and out_proj have biases.
  int conv_L = 3;
  bool conv_bias = false;
  // The MLP width as config.json writes it (block_ff_dim or intermediate_size) and its
  // adjustment: int(2 ff / 3), then (with a multiplier) int(multiplier * that) rounded up to a
  // multiple of block_multiple_of.
  int ff_dim = 12288;
  bool auto_adjust = true;
  bool has_multiplier = true;  // block_ffn_dim_multiplier is not null
  double ffn_multiplier = 1.0;
  int multiple_of = 256;
  // Which form config.json had: the first (full_attn_idxs, block_ff_dim, top-level rope_theta)
  // or the later (layer_types, intermediate_size, rope_parameters); written back as read.
  bool first_form = false;
  int max_position_embeddings = 128000;  // changes nothing recur computes; kept to round-trip

  int head_size(int hidden) const { return head_dim > 0 ? head_dim : hidden / n_heads; }
  /// The MLP width transformers' Lfm2MLP builds from ff_dim.
  int mlp_width() const;
};

const Lfm2Config& config_of(const ModelConfig& c);

// lfm2_config.cpp
void read_config(const std::string& type, const json::Value& root, model::Fields& f,
                 ModelConfig& c);
void resolve(ModelConfig& c, const std::string& source);
/// config.json's fields; for the fingerprint, without those written only for other tools.
std::string config_fields(const ModelConfig& c, bool fingerprint = false);
/// make-model --arch lfm2: its options and the config.json they give.
std::vector<model::MakeOption> make_options();
std::string make_config(const model::MakeOptions& o);

}  // namespace recur::models::lfm2
