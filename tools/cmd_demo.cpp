// recur demo: a long random stream through one multi-head linear-attention state.
#include <fmt/format.h>

#include <random>

#include "cli.h"
#include "commands.h"
#include "recur/linear_attention.h"

namespace recur::cli {

int run_demo(int argc, char** argv) {
  Args args("demo",
            "Streams a random sequence through one linear-attention state: a prefill of --prompt\n"
            "tokens, then --tokens calls of step(). Prints the rates and the state's size, which\n"
            "does not change however long the stream.");
  args.option("tokens", "256K", "tokens to stream through step() (K, M, G: powers of 1024)", 'n')
      .option("prompt", "8K", "tokens to prefill first")
      .option("heads", "8", "attention heads")
      .option("d-key", "64", "key size per head")
      .option("d-value", "64", "value size per head")
      .option("feature-map", "elu", "elu, relu or identity")
      .option("chunk", "64", "prefill chunk size")
      .option("threads", "0", "prefill threads (0: all cores)")
      .option("seed", "1", "random seed");
  if (!args.parse(argc, argv, 2)) return 0;
  LinearAttentionConfig config;
  config.n_heads = static_cast<int>(args.integer("heads", 1, 4096));
  config.d_key = static_cast<int>(args.integer("d-key", 1, 4096));
  config.d_value = static_cast<int>(args.integer("d-value", 1, 4096));
  const auto phi = make_feature_map(args.str("feature-map"));
  const LinearAttention layer(config, phi);
  PrefillOptions options;
  options.chunk = static_cast<int>(args.integer("chunk", 1, 1 << 20));
  options.threads = threads_option(args);
  const auto n_prompt = args.integer("prompt", 0, 1LL << 30);
  // The two-level state holds 16 bytes per element of S (feature maps here keep d_key), and
  // the prompt's Q, K, V and O are held whole.
  check_memory(16.0 * config.n_heads * double(config.d_key + 8) * double(config.d_value + 16),
               fmt::format("a state of {} heads x {} x {}", config.n_heads, config.d_key, config.d_value));
  check_memory(4.0 * double(n_prompt) * double(config.n_heads) * 2.0 * (config.d_key + config.d_value),
               fmt::format("a prompt of {} tokens", n_prompt));
  const auto n_tokens = args.integer("tokens", 0, 1LL << 40);

  auto state = layer.make_state();
  const std::size_t bytes_at_start = state.bytes();
  fmt::print("layer: {} heads, d_key {}, d_value {}, feature map {}, d_feature {}\n",
             config.n_heads, config.d_key, config.d_value, phi->name(), layer.d_feature());
  fmt::print("state: {} bytes ({})\n", bytes_at_start, human_bytes(double(bytes_at_start)));

  std::mt19937 rng(static_cast<std::uint32_t>(args.integer("seed", 0, 1LL << 32)));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const Eigen::Index wk = Eigen::Index(config.n_heads) * config.d_key;
  const Eigen::Index wv = Eigen::Index(config.n_heads) * config.d_value;
  const auto fill = [&](RowMatrix& m) {
    for (Eigen::Index i = 0; i < m.size(); ++i) m.data()[i] = normal(rng);
  };

  if (n_prompt > 0) {
    RowMatrix Q(n_prompt, wk), K(n_prompt, wk), V(n_prompt, wv);
    fill(Q);
    fill(K);
    fill(V);
    const double t0 = now_seconds();
    const RowMatrix O = layer.prefill(state, Q, K, V, options);
    const double dt = now_seconds() - t0;
    fmt::print("prefill: {} tokens in {:.3f} s, {:.0f} tokens/s\n", n_prompt, dt,
               double(n_prompt) / dt);
  }

  // Inputs for the stream are drawn ahead, 4096 at a time, so that drawing them is not timed.
  constexpr Eigen::Index kBlock = 4096;
  RowMatrix Q(kBlock, wk), K(kBlock, wk), V(kBlock, wv);
  fill(Q);
  fill(K);
  fill(V);
  Eigen::VectorXf o(wv);
  Progress progress("step", n_tokens);
  const std::int64_t rss_start = resident_bytes();
  double stepping = 0;
  for (std::int64_t t = 0; t < n_tokens;) {
    const std::int64_t n = std::min<std::int64_t>(kBlock, n_tokens - t);
    const double t0 = now_seconds();
    for (Eigen::Index i = 0; i < n; ++i)
      layer.step(state, Q.row(i).transpose(), K.row(i).transpose(), V.row(i).transpose(), o);
    stepping += now_seconds() - t0;
    t += n;
    progress.update(t);
  }
  progress.finish();
  if (n_tokens > 0)
    fmt::print("step: {} tokens in {:.3f} s, {:.0f} tokens/s, {:.2f} us/token\n", n_tokens,
               stepping, double(n_tokens) / stepping, 1e6 * stepping / double(n_tokens));
  fmt::print("state after {} tokens: {} bytes (unchanged: {}); resident memory grew by {} "
             "while stepping\n",
             state.n_tokens(), state.bytes(), state.bytes() == bytes_at_start ? "yes" : "NO",
             human_bytes(double(resident_bytes() - rss_start)));
  flush_stdout();
  return state.bytes() == bytes_at_start ? 0 : 1;
}

}  // namespace recur::cli
