// A small Based configuration with every mixer, shared by the model and batch tests: BaseConv at
// 0 and 3, Taylor linear attention at 1 and 4, a window of 8 tokens at 2 and 5 (window_size 16),
// a vocabulary of 301 ids padded to 304 rows.
#pragma once

#include <memory>

#include "models/based/based.h"
#include "recur/model.h"

namespace recur::testing {

inline ModelConfig small_based() {
  ModelConfig c;
  c.architecture = Architecture::kBased;
  c.vocab_size = 301;
  c.hidden_size = 32;
  c.num_hidden_layers = 6;
  c.intermediate_size = 64;
  c.norm_eps = 1e-5;
  auto b = std::make_shared<models::based::BasedConfig>();
  b->window_heads = 4;
  b->la_heads = 4;
  b->la_feature_dim = 8;
  b->window_size = 16;
  b->linear_layers = {1, 4};
  b->window_layers = {2, 5};
  c.family = b;
  return c;
}

}  // namespace recur::testing
