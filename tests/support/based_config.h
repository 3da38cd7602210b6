// A small Based configuration with every mixer, shared by the model and batch tests: BaseConv at
// 0 and 3, Taylor linear attention at 1 and 4, a window of 8 tokens at 2 and 5 (window_size 16),
// a vocabulary of 301 ids padded to 304 rows.
#pragma once

#include "recur/model.h"

namespace recur::testing {

inline ModelConfig small_based() {
  ModelConfig c;
  c.architecture = Architecture::kBased;
  c.vocab_size = 301;
  c.hidden_size = 32;
  c.num_hidden_layers = 6;
  c.window_heads = 4;
  c.la_heads = 4;
  c.la_feature_dim = 8;
  c.window_size = 16;
  c.linear_layers = {1, 4};
  c.window_layers = {2, 5};
  c.intermediate_size = 64;
  c.norm_eps = 1e-5;
  return c;
}

}  // namespace recur::testing
