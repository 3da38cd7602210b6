// Grouped-query softmax attention, the one attention layer families compose (engine/layers/):
// q_proj, k_proj, v_proj and o_proj Linears around a CausalAttention (full or windowed, rotary or
// no positions; its KV cache or ring in the layer's state), with q and k normed per head or not
// and an output gate or not. Granite 4.0-H's, Nemotron-H's, Falcon-H1's, LFM2's, Qwen3.5's and
// fla's hybrid attention layers; the three stages a family's layer stack runs, as
// ssd_mixer.h's.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "layers/dense.h"
#include "model/network.h"
#include "recur/causal_attention.h"

namespace recur::model {

class Loader;

/// One attention layer as loaded: H query heads over Hkv kv heads of d.
struct GqaLayer {
  int H = 0, Hkv = 0, d = 0;
  /// q and k normed per head by q_norm and k_norm (LFM2, Qwen3.5).
  bool qk_norm = false;
  /// Qwen3.5's gate: q_proj's rows hold, per head, d floats of query then d of gate, and the
  /// attention's output is multiplied by sigmoid(gate) before o_proj.
  bool output_gate = false;
  Dense q, k, v;  // (H d, or 2 H d with the gate; hidden), (Hkv d, hidden), (Hkv d, hidden)
  Dense o;        // (hidden, H d)
  Norm q_norm, k_norm;  // over d, when qk_norm
  std::unique_ptr<CausalAttention> attention;
};

/// Takes q_proj, k_proj, v_proj and o_proj under `prefix` ("model.layers.3.self_attn.") with
/// biases when `bias`, for the attention `ac` describes (its heads, kv heads and head size).
GqaLayer load_gqa(Loader& L, const std::string& prefix, int hidden, bool bias,
                  const CausalAttentionConfig& ac);

/// A new sequence's state for the layer: its KV cache.
std::unique_ptr<LayerState> make_gqa_state(const GqaLayer& a);

/// A Scratch's buffers for the attention layers, sized for the widest (grow()).
struct GqaRows {
  std::vector<float> q, o;     // (cap, H d)
  std::vector<float> k, v;     // (cap, Hkv d)
  std::vector<float> qg, gate;  // with the output gate: q_proj's rows (cap, 2 H d), the gate
                                // (cap, H d)
  void grow(int rows, const GqaLayer& a);
  std::size_t bytes() const { return buffer_bytes({&q, &k, &v, &o, &qg, &gate}); }
};

/// The row stage before the sequence: q, k, v (and the gate) of n rows of h (stride hidden), q
/// and k normed.
void gqa_project(const GqaLayer& a, const float* h, int n, int hidden, GqaRows& b, int threads);
/// The sequence stage over rows [first, first + count) of one sequence, into b.o.
void gqa_sequence(const GqaLayer& a, LayerState& state, GqaRows& b, int first, int count,
                  int threads);
/// The row stage after it: o (gated) through o_proj, n rows into out (stride hidden).
void gqa_output(const GqaLayer& a, GqaRows& b, int n, float* out, int hidden, int threads);
/// Zeroes what gqa_sequence writes for those rows (a sequence that failed in a batch).
void gqa_clear(const GqaLayer& a, GqaRows& b, int first, int count);

std::size_t gqa_weight_bytes(const GqaLayer& a);

}  // namespace recur::model
