// RWKV-7's layer stack as loaded (rwkv7.cpp fills it, rwkv7_network.cpp runs it).
#pragma once

#include <memory>
#include <vector>

#include "layers/dense.h"
#include "model/network.h"
#include "models/rwkv7/rwkv7.h"

namespace recur::models::rwkv7 {

/// One block: the time mix (token shift, projections, LoRAs, the delta-rule recurrence, group
/// norm, bonus, gate, output) and the channel mix (its own token shift, squared ReLU).
struct Layer {
  model::Norm ln1, ln2;           // LayerNorms over C
  std::vector<float> mix;         // (6, C): x_r, x_w, x_k, x_v, x_a, x_g
  model::Dense r, k, v, o;        // (C, C) each
  // The LoRAs as two Linears each: first (rank, C), second (C, rank) with the bias w0 / a0 / v0
  // (none for g).
  model::Dense w1, w2, a1, a2, v1, v2, g1, g2;
  bool value_residual = false;    // layers > 0: v mixes with layer 0's v (v1, v2 loaded)
  std::vector<float> k_k, k_a;    // (C) each
  std::vector<float> r_k;         // (H, N), flattened to (C)
  std::vector<float> lnx_w, lnx_b;  // (C) each: the group norm's affine
  std::vector<float> ffn_x_k;     // (C)
  model::Dense ffn_key, ffn_value;  // (F, C), (C, F)
};

/// The loaded stack and the configuration's numeric rules.
struct Stack {
  int C = 0, H = 0, N = 0, F = 0, max_rank = 0;
  double lnx_eps = 64e-5;
  bool fla_l2 = false;
  bool ln0 = false;
  model::Norm ln0_norm;           // on the embeddings, when ln0
  std::vector<Layer> layers;
};

std::unique_ptr<model::Network> make_network(Stack stack);

}  // namespace recur::models::rwkv7
