// Gated DeltaNet models: Qwen3.5's text model (three Gated DeltaNet layers to one gated
// full-attention layer, read from the multimodal Qwen3_5ForConditionalGeneration checkpoint or a
// text-only one) and flash-linear-attention's gated_deltanet. One mixer (gdn_mixer.h), two
// layouts of names and config.json. docs/qwen35.md has the tables and the formulas.
#pragma once

#include <string>
#include <vector>

#include "model/family.h"
#include "layers/attention.h"

namespace recur::models::gdn {

/// What the Gated DeltaNet models add to ModelConfig's common fields (hidden_size,
/// num_hidden_layers, intermediate_size, vocab_size, norm_eps: every RMSNorm's eps,
/// tie_word_embeddings; mixers: kDeltaRule or kAttention per layer).
struct GdnConfig final : FamilyConfig {
  enum class Layout {
    kQwen35,      // model_type "qwen3_5": text_config inside, names under model.language_model.
    kQwen35Text,  // model_type "qwen3_5_text": the text model alone, names under model.
    kFla,         // model_type "gated_deltanet": model.layers.i.attn.*, model.embeddings
    kFlaDelta,    // model_type "delta_net": fla's names, no decay (a_proj, A_log, dt_bias)
  };
  /// fla delta_net's activation of q and k (gated_deltanet's is silu).
  enum class QkActivation { kSilu, kRelu, kElu, kIdentity };
  Layout layout = Layout::kQwen35;
  // The Gated DeltaNet layers: key heads (q and k), value heads (a multiple of them: value head
  // h reads key head h / (n_v_heads / n_k_heads)), their widths, the convolution.
  int n_k_heads = 16, n_v_heads = 32, d_k = 128, d_v = 128;
  int conv_size = 4;
  int full_attention_interval = 4;  // Qwen: layer_types' default, every N-th layer full attention
  bool use_conv = true;         // fla: use_short_conv (Qwen: always)
  bool conv_bias = false;       // fla: conv_bias
  bool use_gate = true;         // fla: use_gate, the SiLU(z)-gated output norm (Qwen: always)
  bool allow_neg_eigval = false;  // fla: beta = 2 sigmoid(b)
  // delta_net: q and k through qk_activation, then the l2 norm or (qk_norm "sum") x / sum(x);
  // beta = sigmoid(b) (use_beta) or 1.
  QkActivation qk_activation = QkActivation::kSilu;
  bool qk_sum_norm = false;
  bool use_beta = true;
  double expand_k = 1;      // delta_net: d_k = hidden_size * expand_k / num_heads
  // The full-attention layers (Qwen3.5): heads, kv heads, head size, the rotary part of it.
  int n_heads = 16, n_kv_heads = 4, head_dim = 256;
  double partial_rotary_factor = 0.25;
  double rope_theta = 10000000;
  // Fields that change nothing recur computes, kept so that config.json round-trips.
  int max_position_embeddings = 32768;
  double expand_v = 2;      // fla: d_v = head_dim * expand_v
  double hidden_ratio = 4;  // fla: the MLP width when intermediate_size is null
  // fla's hybrid softmax-attention layers (`attn`: an object, or a list of them).
  model::HybridAttention attn;

  int rotary_dim() const { return int(double(head_dim) * partial_rotary_factor); }
  bool qwen() const { return layout == Layout::kQwen35 || layout == Layout::kQwen35Text; }
  bool decay() const { return layout != Layout::kFlaDelta; }
};

const GdnConfig& config_of(const ModelConfig& c);

/// The tensor names of a layout: prefix + "layers.i." + ...
struct Names {
  std::string emb, final_norm, head;
  std::string layer(int i) const;
  std::string body;  // "model.language_model.", "model."
  bool qwen = true;
};
Names names_of(const GdnConfig& g);

// gdn_config.cpp: config.json through each layout's schema, and make-model's options from it.
void read_config(const std::string& type, const json::Value& root, model::Fields& f,
                 ModelConfig& c);
void resolve(ModelConfig& c, const std::string& source);
std::string config_fields(const ModelConfig& c);
std::vector<model::MakeOption> make_model_options();
std::string make_model_config(const std::string& arch, const model::MakeOptions& o);

}  // namespace recur::models::gdn
