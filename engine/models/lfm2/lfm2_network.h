// LFM2's layer stack as loaded (lfm2.cpp fills it, lfm2_network.cpp runs it): the gated short
// convolution, grouped-query attention with q/k norms, the SwiGLU MLP.
#pragma once

#include <memory>
#include <vector>

#include "layers/dense.h"
#include "layers/gqa.h"
#include "model/network.h"
#include "recur/causal_attention.h"
#include "recur/short_conv.h"

namespace recur::models::lfm2 {

/// The gated short convolution: in_proj writes B, C and x side by side in a row of 3 hidden
/// floats; B * x goes through the causal depthwise convolution (its last conv_L - 1 inputs are
/// the state); C times that goes through out_proj.
struct ConvBlock {
  model::Dense in_proj, out_proj;  // in_proj: (3 hidden, hidden); out_proj: (hidden, hidden)
  std::unique_ptr<ShortConvolution> conv;  // hidden channels, conv_L taps, perhaps a bias
};

struct Layer {
  bool attention = false;
  model::Norm operator_norm, ffn_norm;  // over hidden
  ConvBlock conv;
  // Grouped-query attention: q and k normed per head (RMSNorm with its weight), rotary over the
  // whole head, a KV cache that grows with the sequence.
  model::GqaLayer attn;
  model::Dense w1, w3, w2;  // the SwiGLU MLP: gate, up, down
};

struct Stack {
  int hidden = 0, intermediate = 0;
  std::vector<Layer> layers;
};

std::unique_ptr<model::Network> make_network(Stack stack);

}  // namespace recur::models::lfm2
