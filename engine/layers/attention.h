// Softmax attention as flash-linear-attention's hybrids place it (fla/layers/attn.py), a block of
// engine/layers/: an fla config's `attn` block (which layers, heads, kv heads, qkv bias, window,
// rotary base) and the table of its fields, its tensors, loaded into the attention layer every
// family shares (layers/gqa.h). The fla family (GLA, RetNet, HGRN2) and fla's gated_deltanet in
// the Gated DeltaNet family read it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/config_schema.h"
#include "model/family.h"
#include "layers/dense.h"
#include "layers/gqa.h"
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
struct HybridAttention : ObjectBlock<HybridAttentionSpec> {
  // Derived (resolve_hybrid_attention).
  std::vector<int> spec_of;  // per layer, its entry of specs, or -1

  /// The spec of layer `layer`, which resolve_hybrid_attention made an attention layer.
  const HybridAttentionSpec& at(int layer) const {
    return specs[std::size_t(spec_of[std::size_t(layer)])];
  }
};

/// The fields of one entry of the `attn` block, as fla's Attention layer takes them.
const Schema<HybridAttentionSpec>& hybrid_attention_schema();
/// Why the block refuses another field: its message's end.
extern const char* const kHybridAttentionFields;

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

/// Bytes `layers` full-attention layers' KV caches grow by every token: a key and a value per
/// kv head, of head_dim floats each.
std::size_t kv_cache_growth(std::size_t layers, int n_kv_heads, int head_dim);

/// Bytes the full-attention layers' KV caches grow by every token: a key and a value per kv
/// head (a windowed layer's ring stays the same size).
std::size_t hybrid_attention_growth(const HybridAttention& a, int hidden_size);

/// How describe() ends its state line: " at any length" for `growth` 0, else what a full
/// softmax layer's KV cache adds each token.
std::string state_growth_note(std::size_t growth);

/// The layer of an fla `attn` entry: its tensors under `prefix` from the loader, rotary on the
/// whole head of hidden_size / num_heads, perhaps a window, no norms, no gate.
GqaLayer load_hybrid_attention(Loader& L, const std::string& prefix, int hidden_size,
                                     const HybridAttentionSpec& s);

}  // namespace recur::model
