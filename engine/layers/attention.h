// Softmax attention as the families compose it, a block of engine/layers/: the attention layer
// (its projections, q and k normed per head or not, an output gate or not, and a CausalAttention:
// full or windowed, rotary or no positions, grouped kv heads) with the rows it works in and its
// stages, which LFM2, Granite, the Gated DeltaNet family and fla's hybrids share; and an fla
// config's `attn` block (which layers, heads, kv heads, qkv bias, window, rotary base), its reader
// and writer and its tensors, which the fla family (GLA, RetNet, HGRN2) and fla's gated_deltanet
// read.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/config_fields.h"
#include "model/family.h"
#include "model/network.h"
#include "layers/dense.h"
#include "recur/causal_attention.h"
#include "util/json.h"

namespace recur::model {

class Loader;

/// One entry of the `attn` block: softmax attention at some layers.
struct HybridAttentionSpec {
  std::vector<int> layers;
  int num_heads = 0;
  int num_kv_heads = 0;  // 0: num_heads
  bool qkv_bias = false;
  int window_size = 0;   // 0: full attention; else a token sees window_size - 1 before it
  double rope_theta = 10000;
};

/// The `attn` block: a dict is one spec, a list several (is_list remembers which, so that
/// config.json is written back as it was read).
struct HybridAttention {
  std::vector<HybridAttentionSpec> specs;
  bool present = false;  // config.json has the block (perhaps an empty list)
  bool is_list = false;
  // Derived (resolve_hybrid_attention).
  std::vector<int> spec_of;  // per layer, its entry of specs, or -1

  /// The spec of layer `layer`, which resolve_hybrid_attention made an attention layer.
  const HybridAttentionSpec& at(int layer) const {
    return specs[std::size_t(spec_of[std::size_t(layer)])];
  }
};

/// Reads the block `v` of a model of `n_layers` layers: a FormatError naming `source` and the
/// field ("attn[1].num_heads") for anything fla's Attention layer would not build.
HybridAttention read_hybrid_attention(const json::Value& v, const std::string& source,
                                      int n_layers);

/// Checks the specs against the model's sizes (a configuration built in code is checked here
/// too) and fills spec_of.
void resolve_hybrid_attention(HybridAttention& a, int hidden_size, int n_layers,
                              const std::string& source);

/// Writes the block as config.json's field "attn" (a dict or a list, as read).
void write_hybrid_attention(FieldWriter& w, const HybridAttention& a);

/// Bytes the full-attention layers' KV caches grow by every token: a key and a value per kv
/// head (a windowed layer's ring stays the same size).
std::size_t hybrid_attention_growth(const HybridAttention& a, int hidden_size);

/// How describe() ends its state line: " at any length" for `growth` 0, else what a full
/// softmax layer's KV cache adds each token.
std::string state_growth_note(std::size_t growth);

/// One softmax attention layer as loaded: H query heads and Hkv kv heads of d floats.
struct AttentionLayer {
  int H = 0, Hkv = 0, d = 0;
  /// q and k normed per head by q_norm and k_norm (LFM2, Qwen3.5).
  bool qk_norm = false;
  /// Qwen3.5's gate: q_proj's rows hold, per head, d floats of query then d of gate, and the
  /// attention's output is multiplied by sigmoid(gate) before o_proj.
  bool output_gate = false;
  Dense q, k, v, o;  // q: (H d, or 2 H d with the gate; hidden); k, v: (Hkv d, hidden);
                     // o: (hidden, H d)
  Norm q_norm, k_norm;  // over d
  std::unique_ptr<CausalAttention> attention;

  /// A new sequence's state: the attention's KV cache or ring (MixerKind::kAttention).
  std::unique_ptr<LayerState> make_state() const;
};

/// The rows attention layers work in, in a family's scratch: q, gate and o (rows, H d), k and v
/// (rows, Hkv d), qg (rows, 2 H d): q_proj's output with the gate.
struct AttentionRows {
  std::vector<float> qg, q, gate, k, v, o;
  /// Grows the buffers to hold `rows` rows of layer `a`.
  void fit(const AttentionLayer& a, int rows);
  std::size_t bytes() const;
};

/// Before the sequence's stage, a function of each row: q, k, v (and the gate) of n normed rows
/// h (n, hidden), q and k normed.
void attention_inputs(const AttentionLayer& a, const float* h, int n, int hidden,
                      AttentionRows& r, int threads);
/// The sequence's stage: its rows [first, first + count) through its state (layers/sequence.h).
void attention_sequence(const AttentionLayer& a, LayerState& state, AttentionRows& r, int first,
                        int count, int threads);
/// Zeroes what the sequence's stage writes for those rows (Network::clear_sequence).
void attention_clear(const AttentionLayer& a, AttentionRows& r, int first, int count);
/// After the sequence's stage, a function of each row: o (gated) through o_proj into out
/// (n, hidden).
void attention_output(const AttentionLayer& a, AttentionRows& r, int n, float* out, int hidden,
                      int threads);

/// The layer of an fla `attn` entry: its tensors under `prefix` from the loader, rotary on the
/// whole head of hidden_size / num_heads, perhaps a window, no norms, no gate.
AttentionLayer load_hybrid_attention(Loader& L, const std::string& prefix, int hidden_size,
                                     const HybridAttentionSpec& s);

}  // namespace recur::model
