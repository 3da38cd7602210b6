// The loaded form of a model: packed matrices, norms and feature maps, layer by layer.
#pragma once

#include <memory>
#include <vector>

#include "model/layers.h"
#include "recur/linear_attention.h"
#include "recur/model.h"

namespace recur {

struct Model::Impl {
  struct Layer {
    model::Norm attn_norm;  // pre-norm: before attention; post-norm: after the attention residual
    model::Norm mlp_norm;
    model::Dense q, k, v, o;
    model::QKFeatureMap phi_q, phi_k;
    bool has_head_norm = false;
    model::Norm head_norm;  // per head, over head_v_dim
    model::Dense gate, up, down;  // SwiGLU (linear_attn)
    model::Dense fc1, fc2;        // ReLU / GELU MLP (transformers_are_rnns)
    std::unique_ptr<LinearAttention> attention;
  };
  std::vector<float> embeddings;  // (vocab, hidden)
  std::vector<Layer> layers;
  bool has_final_norm = false;
  model::Norm final_norm;
  model::Dense lm_head;
};

}  // namespace recur
