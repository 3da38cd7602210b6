// HazyResearch's Based (Arora et al., 2024), as its checkpoints are published: pre-norm RMSNorm
// blocks whose mixer is, layer by layer, a gated short convolution (BaseConv), Taylor-map linear
// attention or sliding-window softmax attention with rotary embeddings; a SwiGLU MLP; tied,
// padded embeddings. docs/based.md.
#pragma once

#include <string>
#include <vector>

#include "model/config_schema.h"
#include "model/family.h"

namespace recur::models::based {

/// What Based adds to ModelConfig's common fields (hidden_size, num_hidden_layers,
/// intermediate_size, vocab_size and norm_eps come from n_embd, n_layer, n_inner, vocab_size and
/// layer_norm_epsilon; ModelConfig::mixers holds the schedule below, layer by layer).
struct BasedConfig final : FamilyConfig {
  std::vector<int> linear_layers;  // alt_mixer_layers: Taylor linear attention
  std::vector<int> window_layers;  // alt_mixer_2_layers: sliding-window attention
  int la_heads = 16;               // alt_mixer.num_heads
  int la_feature_dim = 16;         // alt_mixer.feature_dim (q, k per head, before the map)
  int window_size = 256;           // alt_mixer_2.window_size: a token sees window_size / 2 before it
  int window_heads = 16;           // n_head
  double rope_theta = 10000;       // rotary_emb_base
  int conv_kernel = 0;             // mixer.kernel_size (0: kernel_sizes); resolved: the kernel
  int conv_kernel_sizes = 3;       // mixer.kernel_sizes, the training configs' name
  int conv_expand = 4;             // mixer.expand_proj: in_proj is hidden -> expand * hidden
  bool conv_bias = true;           // mixer.use_bias: in_proj and out_proj have biases
  int pad_vocab_multiple = 8;      // the embedding has vocab_size rounded up to this many rows
  // Sizes config.json may give twice, checked against the one above (0: not given; resolved:
  // that one).
  int la_kv_heads = 0;             // alt_mixer.num_key_value_heads: la_heads
  int taylor_input_dim = 0;        // alt_mixer.feature_map.input_dim: la_feature_dim
  int window_spec_heads = 0;       // alt_mixer_2.num_heads: window_heads
  // Derived (resolve()).
  int embedding_rows = 0;          // vocab_size rounded up (the logits are vocab_size)
  int key_dim = 0;                 // a Taylor layer's q and k width: la_heads * la_feature_dim
};

/// Based's fields of a configuration (its family's part); logic_error when it holds another's.
const BasedConfig& config_of(const ModelConfig& c);

// based_config.cpp
/// Based's config.json fields, each once: the GPT-2 config's with its mixer specs (reading,
/// writing, make-model's options).
const model::Schema<BasedConfig>& gpt2_schema();
void read_config(model::Fields& f, ModelConfig& c);
void resolve(ModelConfig& c, const std::string& source);
std::string config_fields(const ModelConfig& c);

}  // namespace recur::models::based
