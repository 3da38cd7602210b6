// Based's three mixers at based-360m's shapes: Taylor-map linear attention (16 heads, d_key 16
// -> 273 features, d_value 64), the short convolution (2048 channels, kernel 3) and sliding-window
// attention (16 heads, d_head 64, window 128). tokens/s and the state's bytes per layer.
#include <benchmark/benchmark.h>

#include <random>

#include "bench_common.h"
#include "recur/linear_attention.h"
#include "model/random_weights.h"
#include "models/based/based.h"
#include "recur/model.h"
#include "recur/short_conv.h"
#include "recur/window_attention.h"
#include "whole_model.h"

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

// A whole Based model of based-360m's exact shape (27 layers, d 1024: BaseConv, Taylor linear
// attention at 1, 6, 11, 16, 21, windows of 129 tokens at 2, 7, 12, 17, 22; vocab 50257 padded
// to 50264) with random float32 weights. "x_read_time" is decode's time per token over the time
// to read every weight once at the bandwidth measured with as many threads and four streams each.
const recur::ModelConfig& based_360m() {
  static const recur::ModelConfig c = [] {
    recur::ModelConfig m;
    m.architecture = recur::Architecture::kBased;
    m.vocab_size = 50257;
    m.hidden_size = 1024;
    m.num_hidden_layers = 27;
    m.intermediate_size = 2048;
    m.norm_eps = 1e-5;
    auto b = std::make_shared<recur::models::based::BasedConfig>();
    b->pad_vocab_multiple = 8;
    b->window_heads = 16;
    b->la_heads = 16;
    b->la_feature_dim = 16;
    b->window_size = 256;
    b->linear_layers = {1, 6, 11, 16, 21};
    b->window_layers = {2, 7, 12, 17, 22};
    m.family = b;
    m.resolve("based-360m");
    return m;
  }();
  return c;
}

std::shared_ptr<const recur::Model> based_model() {
  static const auto model = recur::Model::from_weights(based_360m(), recur::RandomWeights(based_360m(), 1));
  return model;
}

void BM_Based360mDecode(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  const auto model = based_model();
  recur::Decoder dec(model, {64, threads});
  dec.prefill(recur::bench::prompt_ids(512, 50257));
  recur::bench::time_decode(state, dec, *model, threads, 50257, 1);
  state.counters["state_MiB"] = static_cast<double>(dec.state_bytes()) / (1 << 20);
  state.counters["conv_MiB"] = static_cast<double>(dec.state_bytes(recur::MixerKind::kShortConv)) / (1 << 20);
  state.counters["linear_MiB"] = static_cast<double>(dec.state_bytes(recur::MixerKind::kLinearAttention)) / (1 << 20);
  state.counters["window_MiB"] = static_cast<double>(dec.state_bytes(recur::MixerKind::kWindowAttention)) / (1 << 20);
}
BENCHMARK(BM_Based360mDecode)->ArgName("threads")->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();

// T prompt tokens from an empty state in chunks of 64, the head on the last token only.
void BM_Based360mPrefill(benchmark::State& state) {
  const int T = static_cast<int>(state.range(0));
  const int threads = static_cast<int>(state.range(1));
  const auto model = based_model();
  recur::Decoder dec(model, {64, threads});
  recur::bench::time_prefill(state, dec, recur::bench::prompt_ids(T, 50257));
}
BENCHMARK(BM_Based360mPrefill)->ArgNames({"T", "threads"})->Args({512, 1})->Args({512, 2})
    ->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

int main(int argc, char** argv) { return recur::bench::run_benchmarks(argc, argv); }
