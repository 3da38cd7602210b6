// Based's three mixers at based-360m's shapes: Taylor-map linear attention (16 heads, d_key 16
// -> 273 features, d_value 64), the short convolution (2048 channels, kernel 3) and sliding-window
// attention (16 heads, d_head 64, window 128). tokens/s and the state's bytes per layer.
#include <benchmark/benchmark.h>

#include <random>

#include "bench_common.h"
#include "recur/isa.h"
#include "recur/linear_attention.h"
#include "recur/short_conv.h"
#include "recur/window_attention.h"

namespace {

recur::RowMatrix random_matrix(Eigen::Index rows, Eigen::Index cols, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  recur::RowMatrix m(rows, cols);
  for (Eigen::Index i = 0; i < m.size(); ++i) m.data()[i] = normal(rng);
  return m;
}

recur::LinearAttention taylor_layer() {
  recur::LinearAttentionConfig c;
  c.n_heads = 16;
  c.d_key = 16;
  c.d_value = 64;
  c.feature_map = recur::FeatureMapKind::kTaylor;
  c.eps = 1e-12f;
  return recur::LinearAttention(c);
}

recur::WindowAttention window_layer() {
  recur::WindowAttentionConfig c;
  c.n_heads = 16;
  c.d_head = 64;
  c.window = 128;
  return recur::WindowAttention(c);
}

constexpr Eigen::Index kRows = 1024;

void BM_TaylorStep(benchmark::State& state) {
  const auto layer = taylor_layer();
  auto s = layer.make_state();
  const auto Q = random_matrix(kRows, 256, 1), K = random_matrix(kRows, 256, 2),
             V = random_matrix(kRows, 1024, 3);
  Eigen::VectorXf o(1024);
  Eigen::Index t = 0;
  for (auto _ : state) {
    layer.step(s, Q.row(t).transpose(), K.row(t).transpose(), V.row(t).transpose(), o);
    benchmark::DoNotOptimize(o.data());
    t = (t + 1) % kRows;
  }
  recur::bench::report_tokens(state, double(state.iterations()), s.bytes());
}
BENCHMARK(BM_TaylorStep)->Unit(benchmark::kMicrosecond);

// range(0): threads.
void BM_TaylorPrefill(benchmark::State& state) {
  const auto layer = taylor_layer();
  auto s = layer.make_state();
  const auto Q = random_matrix(kRows, 256, 1), K = random_matrix(kRows, 256, 2),
             V = random_matrix(kRows, 1024, 3);
  recur::RowMatrix O(kRows, 1024);
  recur::PrefillOptions options;
  options.threads = static_cast<int>(state.range(0));
  for (auto _ : state) {
    layer.prefill(s, Q, K, V, O, options);
    benchmark::DoNotOptimize(O.data());
  }
  recur::bench::report_tokens(state, double(state.iterations()) * double(kRows), s.bytes());
}
BENCHMARK(BM_TaylorPrefill)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond);

void BM_ShortConvStep(benchmark::State& state) {
  const recur::ShortConvolution conv(random_matrix(2048, 3, 4));
  auto s = conv.make_state();
  const auto X = random_matrix(kRows, 2048, 5);
  Eigen::VectorXf y(2048);
  Eigen::Index t = 0;
  for (auto _ : state) {
    conv.step(s, X.row(t).transpose(), y);
    benchmark::DoNotOptimize(y.data());
    t = (t + 1) % kRows;
  }
  recur::bench::report_tokens(state, double(state.iterations()), s.bytes());
}
BENCHMARK(BM_ShortConvStep)->Unit(benchmark::kMicrosecond);

void BM_ShortConvPrefill(benchmark::State& state) {
  const recur::ShortConvolution conv(random_matrix(2048, 3, 4));
  auto s = conv.make_state();
  const auto X = random_matrix(kRows, 2048, 5);
  recur::RowMatrix Y(kRows, 2048);
  for (auto _ : state) {
    conv.prefill(s, X, Y);
    benchmark::DoNotOptimize(Y.data());
  }
  recur::bench::report_tokens(state, double(state.iterations()) * double(kRows), s.bytes());
}
BENCHMARK(BM_ShortConvPrefill)->Unit(benchmark::kMillisecond);

// After a full window: every step attends to 129 keys.
void BM_WindowStep(benchmark::State& state) {
  const auto layer = window_layer();
  auto s = layer.make_state();
  const auto Q = random_matrix(kRows, 1024, 6), K = random_matrix(kRows, 1024, 7),
             V = random_matrix(kRows, 1024, 8);
  layer.prefill(s, Q.topRows(200), K.topRows(200), V.topRows(200));
  Eigen::VectorXf o(1024);
  Eigen::Index t = 0;
  for (auto _ : state) {
    layer.step(s, Q.row(t).transpose(), K.row(t).transpose(), V.row(t).transpose(), o);
    benchmark::DoNotOptimize(o.data());
    t = (t + 1) % kRows;
  }
  recur::bench::report_tokens(state, double(state.iterations()), s.bytes());
}
BENCHMARK(BM_WindowStep)->Unit(benchmark::kMicrosecond);

// range(0): threads.
void BM_WindowPrefill(benchmark::State& state) {
  const auto layer = window_layer();
  auto s = layer.make_state();
  const auto Q = random_matrix(kRows, 1024, 6), K = random_matrix(kRows, 1024, 7),
             V = random_matrix(kRows, 1024, 8);
  recur::RowMatrix O(kRows, 1024);
  recur::PrefillOptions options;
  options.threads = static_cast<int>(state.range(0));
  for (auto _ : state) {
    layer.prefill(s, Q, K, V, O, options);
    benchmark::DoNotOptimize(O.data());
  }
  recur::bench::report_tokens(state, double(state.iterations()) * double(kRows), s.bytes());
}
BENCHMARK(BM_WindowPrefill)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond);

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::AddCustomContext("isa", recur::isa());
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
