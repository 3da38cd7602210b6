// flash-linear-attention's gated models inside recur: what the loader (gla.cpp) and the layer
// stack (gla_network.cpp) share: a layer's weights, the tensors' names and widths.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "layers/dense.h"
#include "model/network.h"
#include "models/gla/gla.h"
#include "recur/causal_attention.h"
#include "recur/gla_recurrence.h"
#include "recur/model.h"
#include "recur/short_conv.h"

namespace recur::models::gla {

using model::Dense;
using model::Norm;

struct Layer {
  MixerKind mixer = MixerKind::kDecayedRecurrence;
  Norm attn_norm, mlp_norm;
  // q, k, v, o (HGRN2: q, f, i, o); the output gate g_proj, GLA's low-rank gate gk_proj (gk0 then
  // gk1, with a bias); short convolutions on q, k, v (or none); the recurrence; the output norm
  // (per head; HGRN2's over the whole width).
  Dense q, k, v, o, g_proj, gk0, gk1;
  std::unique_ptr<ShortConvolution> conv_q, conv_k, conv_v;
  std::unique_ptr<GlaRecurrence> gated;
  Norm head_norm;
  std::vector<float> lower_bound;    // HGRN2: (hidden), the forget gate's floor; empty for none
  std::vector<float> rope_inv_freq;  // RetNet: (head_k_dim / 2), rotary on q and k
  std::unique_ptr<CausalAttention> causal;  // the hybrid `attn` layers
  Dense gate, up, down;  // GatedMLP
};

// Widths of the rows a layer's sequence part reads (a: q, b: k, c: v, d: GLA's decay), may use
// as scratch, and writes (out).

/// "model.layers.<i>.".
std::string prefix(int i);
/// The output norm's name: FusedRMSNormGated when fla fuses it with the swish gate, else RMSNorm.
std::string out_norm_name(const ModelConfig& c);

struct Widths {
  int q, k, v;  // the projections' widths (k and v per kv group)
};
Widths gated_widths(const ModelConfig& c);

/// The layer stack of `layers` (gla_network.cpp).
std::unique_ptr<model::Network> make_network(const ModelConfig& c, std::vector<Layer> layers);

}  // namespace recur::models::gla
