// The Gated DeltaNet models' layer stack as loaded (gdn.cpp fills it, gdn_network.cpp runs it):
// the Gated DeltaNet mixer, Qwen3.5's gated full attention, the SwiGLU MLP.
#pragma once

#include <memory>
#include <vector>

#include "layers/delta_rule.h"
#include "layers/gqa.h"
#include "layers/dense.h"
#include "model/network.h"
#include "recur/causal_attention.h"
#include "recur/short_conv.h"

namespace recur::models::gdn {

/// One Gated DeltaNet mixer (docs/qwen35.md, "The mixer"). q, k and v come out of the
/// projections side by side in one row of conv_width = 2 K + V floats (K = Hk d_k, V = Hv d_v):
/// Qwen's in_proj_qkv writes all three, fla's q_proj, k_proj, v_proj each its block.
struct GdnMixer {
  int Hk = 0, Hv = 0, d_k = 0, d_v = 0;
  int d_kp = 0;  // d_k rounded up to 16, the delta kernel's chains: the padding stays zero
  std::vector<model::Dense> in_proj;  // Qwen: in_proj_qkv (2K + V, hidden); fla: q, k, v
  std::vector<int> in_col;            // the first column each writes in the (2K + V) row
  model::Dense z, b, a, out;          // z: (V, hidden), none without the gate; b, a: (Hv,
                                      // hidden); out: (hidden, V)
  // Depthwise causal convolutions with SiLU over columns [conv_col, conv_col + width) of the
  // row: Qwen's one over all 2K + V, fla's three (q, k, v); none: SiLU alone (fla without
  // short convolutions).
  std::vector<std::unique_ptr<ShortConvolution>> convs;
  std::vector<int> conv_col;
  std::vector<bool> conv_silu;  // per convolution: SiLU after it (delta_net: v's alone unless
                                // qk_activation is silu)
  std::vector<float> neg_A;    // (Hv): -exp(A_log), in double then rounded once
  std::vector<float> dt_bias;  // (Hv)
  model::Norm out_norm;        // RMSNorm over d_v, per value head, with its weight
  bool gate = true;            // out_norm(o) * silu(z)
  bool neg_eigval = false;     // beta = 2 sigmoid(b)
  bool decay = true;           // false (delta_net): alpha = 1, no a, A_log, dt_bias
  bool use_beta = true;        // false (delta_net): beta = 1, no b
  // delta_net: q and k after the convolution: 0 silu (done with it), 1 relu, 2 elu + 1,
  // 3 identity; then x / sum(x) instead of the l2 norm.
  int qk_activation = 0;
  bool sum_norm = false;
  int conv_width() const { return 2 * Hk * d_k + Hv * d_v; }
  /// The recurrence: a value head's S (d_v, d_kp), its key head's q and k, one decay a token.
  model::DeltaRuleMixer delta() const { return {Hv, d_kp, d_v, Hv / Hk, true}; }
};

struct Layer {
  bool attention = false;
  model::Norm mixer_norm, mlp_norm;  // over hidden (Qwen: weights 1 + w)
  GdnMixer gdn;
  // Qwen3.5's full attention: q and k normed per head (weights stored as 1 + w), partial rotary,
  // the output gate. fla's: neither, rotary on the whole head, perhaps a window.
  model::GqaLayer attn;
  model::Dense gate, up, down;       // the SwiGLU MLP
};

struct Stack {
  int hidden = 0, intermediate = 0;
  std::vector<Layer> layers;
};

std::unique_ptr<model::Network> make_network(Stack stack);

}  // namespace recur::models::gdn
