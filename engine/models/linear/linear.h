// The linear-attention family: flash-linear-attention's linear_attn (pre-norm RMSNorm blocks, a
// feature map after the head split, grouped kv heads, a per-head output norm, a SwiGLU MLP) and
// the paper's model, transformers_are_rnns (post-norm LayerNorm blocks, projections with bias, a
// ReLU or GELU MLP). docs/models.md.
#pragma once

#include <string>

#include "model/family.h"

namespace recur::models::linear {

// linear_config.cpp
void read_config(const std::string& type, const json::Value& root, model::Fields& f,
                 ModelConfig& c);
void resolve(ModelConfig& c, const std::string& source);
std::string config_fields(const ModelConfig& c);

}  // namespace recur::models::linear
