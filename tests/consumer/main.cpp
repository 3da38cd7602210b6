// Steps one linear-attention layer through three tokens and prints the last output's sum; and
// sets a model family's own fields the public way, through config.json text (a family's fields
// live in the engine, opaque to users), and reads them back from to_json().
#include <cstdio>
#include <string>

#include "recur/linear_attention.h"
#include "recur/model.h"

int main() {
  const recur::ModelConfig gla = recur::ModelConfig::from_json(
      R"({"model_type": "gla", "vocab_size": 64, "hidden_size": 32, "num_hidden_layers": 2,
          "num_heads": 2, "use_short_conv": true, "conv_size": 3})",
      "consumer");
  const std::string written = gla.to_json();
  if (written.find("\"use_short_conv\": true") == std::string::npos ||
      written.find("\"conv_size\": 3") == std::string::npos) {
    std::fprintf(stderr, "the GLA fields did not come back:\n%s", written.c_str());
    return 1;
  }

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
