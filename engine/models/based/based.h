// HazyResearch's Based (Arora et al., 2024), as its checkpoints are published: pre-norm RMSNorm
// blocks whose mixer is, layer by layer, a gated short convolution (BaseConv), Taylor-map linear
// attention or sliding-window softmax attention with rotary embeddings; a SwiGLU MLP; tied,
// padded embeddings. docs/based.md.
#pragma once

#include <string>

#include "model/family.h"

namespace recur::models::based {

// based_config.cpp
void read_config(const json::Value& root, model::Fields& f, ModelConfig& c);
void resolve(ModelConfig& c, const std::string& source);
std::string config_fields(const ModelConfig& c);

}  // namespace recur::models::based
