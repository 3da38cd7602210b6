// Small configurations of flash-linear-attention's gated models, as config.json text read by
// recur's own reader, shared by the model and batch tests: GLA with short convolutions and
// grouped kv heads, RetNet, HGRN2 with lower bounds, and GLA hybrids with a full and a windowed
// softmax attention layer.
#pragma once

#include <string>

#include "recur/model.h"

namespace recur::testing {

inline ModelConfig fla_gated(const std::string& fields) {
  return ModelConfig::from_json("{\"vocab_size\": 301, \"hidden_size\": 32, \"num_hidden_layers\": 3, "
                                "\"intermediate_size\": 64, " + fields + "}",
                                "test config");
}
inline ModelConfig small_gla() {
  return fla_gated("\"model_type\": \"gla\", \"num_heads\": 4, \"num_kv_heads\": 2, "
                   "\"use_short_conv\": true, \"clamp_min\": -2.5");
}
inline ModelConfig small_retnet() {
  return fla_gated("\"model_type\": \"retnet\", \"num_heads\": 2, \"expand_k\": 1, \"expand_v\": 2");
}
inline ModelConfig small_hgrn2() {
  return fla_gated("\"model_type\": \"hgrn2\", \"expand_ratio\": 8, \"use_short_conv\": true");
}
/// GLA with layer 1 full softmax attention (4 heads, 2 kv heads).
inline ModelConfig small_gla_full() {
  return fla_gated("\"model_type\": \"gla\", \"num_heads\": 4, \"attn\": {\"layers\": [1], "
                   "\"num_heads\": 4, \"num_kv_heads\": 2, \"qkv_bias\": true}");
}
/// GLA with layer 2 windowed softmax attention (a token sees itself and 7 before it).
inline ModelConfig small_gla_window() {
  return fla_gated("\"model_type\": \"gla\", \"num_heads\": 4, \"use_output_gate\": false, "
                   "\"attn\": [{\"layers\": [2], \"num_heads\": 2, \"window_size\": 8}]");
}

}  // namespace recur::testing
