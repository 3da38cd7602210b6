// Steps one linear-attention layer through three tokens and prints the last output's sum.
#include <cstdio>

#include "recur/linear_attention.h"

int main() {
  recur::LinearAttentionConfig config;
  config.n_heads = 2;
  config.d_key = 8;
  config.d_value = 8;
  const recur::LinearAttention layer(config);
  auto state = layer.make_state();
  const Eigen::VectorXf q = Eigen::VectorXf::LinSpaced(16, -1.0f, 1.0f);
  const Eigen::VectorXf v = Eigen::VectorXf::LinSpaced(16, 0.5f, 2.0f);
  Eigen::VectorXf out;
  for (int t = 0; t < 3; ++t) out = layer.step(state, q, q, v);
  std::printf("%.6f\n", static_cast<double>(out.sum()));
}
