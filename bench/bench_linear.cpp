// One linear-attention layer (n_heads 8, d_feature = d_value = d): step, a loop of steps, and
// prefill, against the FMA floor of 4 * n_heads * d * d FLOP per token.
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "bench_common.h"
#include "kernels/linear_kernels.h"
#include "recur/isa.h"
#include "recur/linear_attention.h"

namespace {

constexpr int kHeads = 8;

struct Data {
  recur::RowMatrix Q, K, V, O;
};
Data make_data(int d, Eigen::Index T) {
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Data x;
  x.Q.resize(T, kHeads * d);
  x.K.resize(T, kHeads * d);
  x.V.resize(T, kHeads * d);
  x.O.resize(T, kHeads * d);
  for (auto* m : {&x.Q, &x.K, &x.V})
    for (Eigen::Index i = 0; i < m->size(); ++i) m->data()[i] = normal(rng);
  return x;
}

double flop_per_token(int d) { return 4.0 * kHeads * d * d; }

void BM_FmaPeak(benchmark::State& state) {
  double flop = 0;
  for (auto _ : state) flop += recur::bench::fma_loop(1'000'000);
  state.counters["FLOP/s"] = benchmark::Counter(flop, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_FmaPeak)->Unit(benchmark::kMillisecond);

void BM_Step(benchmark::State& state) {
  const int d = static_cast<int>(state.range(0));
  const auto layer = recur::bench::linear_layer(kHeads, d);
  auto s = layer.make_state();
  auto x = make_data(d, 1024);
  Eigen::VectorXf o(kHeads * d);
  Eigen::Index t = 0;
  for (auto _ : state) {
    layer.step(s, x.Q.row(t).transpose(), x.K.row(t).transpose(), x.V.row(t).transpose(), o);
    benchmark::DoNotOptimize(o.data());
    t = (t + 1) % 1024;
  }
  const auto n = static_cast<double>(state.iterations());
  recur::bench::report_tokens(state, n, s.bytes());
  recur::bench::report_floor(state, flop_per_token(d), n);
}
BENCHMARK(BM_Step)->Arg(64)->Arg(128)->Unit(benchmark::kMicrosecond);

void BM_StepLoop(benchmark::State& state) {
  const int d = static_cast<int>(state.range(0));
  const Eigen::Index T = state.range(1);
  const auto layer = recur::bench::linear_layer(kHeads, d);
  auto s = layer.make_state();
  auto x = make_data(d, T);
  Eigen::VectorXf o(kHeads * d);
  for (auto _ : state) {
    s.reset();
    for (Eigen::Index t = 0; t < T; ++t) {
      layer.step(s, x.Q.row(t).transpose(), x.K.row(t).transpose(), x.V.row(t).transpose(), o);
      x.O.row(t) = o.transpose();
    }
    benchmark::DoNotOptimize(x.O.data());
  }
  const auto n = static_cast<double>(state.iterations()) * static_cast<double>(T);
  recur::bench::report_tokens(state, n, s.bytes());
  recur::bench::report_floor(state, flop_per_token(d), n);
}
BENCHMARK(BM_StepLoop)->Args({64, 8192})->Args({128, 8192})->Unit(benchmark::kMillisecond);

void BM_Prefill(benchmark::State& state) {
  const int d = static_cast<int>(state.range(0));
  const Eigen::Index T = state.range(1);
  recur::PrefillOptions options;
  options.threads = static_cast<int>(state.range(2));
  if (state.range(3) > 0) options.chunk = static_cast<int>(state.range(3));
  const auto layer = recur::bench::linear_layer(kHeads, d);
  auto s = layer.make_state();
  auto x = make_data(d, T);
  for (auto _ : state) {
    s.reset();
    layer.prefill(s, x.Q, x.K, x.V, x.O, options);
    benchmark::DoNotOptimize(x.O.data());
  }
  const auto n = static_cast<double>(state.iterations()) * static_cast<double>(T);
  recur::bench::report_tokens(state, n, s.bytes());
  recur::bench::report_floor(state, flop_per_token(d), n);
}
BENCHMARK(BM_Prefill)
    ->ArgNames({"d", "T", "threads", "chunk"})
    ->Args({64, 8192, 1, 0})
    ->Args({64, 8192, 1, 16})
    ->Args({64, 8192, 1, 32})
    ->Args({64, 8192, 1, 128})
    ->Args({64, 8192, 1, 256})
    ->Args({64, 8192, 2, 0})
    ->Args({128, 8192, 1, 0})
    ->Args({128, 8192, 2, 0})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// The textbook chunkwise prefill with Eigen's products, compiled for this machine: the inexact
// path that engines take. Its sums depend on the chunk; recur's prefill is exact at any chunk.
void BM_EigenChunkwise(benchmark::State& state) {
  const int d = static_cast<int>(state.range(0));
  const Eigen::Index T = state.range(1);
  const int chunk = static_cast<int>(state.range(2));
  auto x = make_data(d, T);
  for (auto _ : state) {
    recur::bench::eigen_chunkwise(x.Q.data(), x.K.data(), x.V.data(), x.O.data(), T, kHeads, d, chunk);
    benchmark::DoNotOptimize(x.O.data());
  }
  const auto n = static_cast<double>(state.iterations()) * static_cast<double>(T);
  recur::bench::report_tokens(state, n, 0);
  recur::bench::report_floor(state, flop_per_token(d), n);
}
BENCHMARK(BM_EigenChunkwise)
    ->ArgNames({"d", "T", "chunk"})
    ->Args({64, 8192, 16})
    ->Args({64, 8192, 64})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// The memory traffic of one step, without its arithmetic: P read and written and L32 read, for
// the same 8 heads, hot in L2. Step's own floor on a machine where the FMAs are not the limit.
void BM_StepTraffic(benchmark::State& state) {
  const int d = static_cast<int>(state.range(0));
  for (auto _ : state) {
    state.SetIterationTime(recur::bench::state_traffic_seconds(kHeads, d, d, 200));
  }
  recur::bench::report_tokens(state, static_cast<double>(state.iterations()), 0);
}
BENCHMARK(BM_StepTraffic)->Arg(64)->Arg(128)->UseManualTime()->Unit(benchmark::kMicrosecond);

// The inner walk alone: one head's register-tiled pass over a block of tokens already in
// cache, unnormalized (no denominator pass). Shows how close the kernel itself gets to peak.
void BM_Walk(benchmark::State& state) {
  const int d = static_cast<int>(state.range(0));
  const int n = static_cast<int>(state.range(1));
  std::vector<float> P(std::size_t(d * d)), L32(std::size_t(d * d));
  std::vector<double> L64(std::size_t(d * d));
  recur::kernels::HeadView h{P.data(), L32.data(), L64.data(), nullptr, nullptr, nullptr, d, d};
  const std::size_t tiles = recur::kernels::tile_floats(n, d);
  std::vector<float> qT(tiles, 0.01f), kT(tiles, 0.02f);
  std::vector<float> v(std::size_t(n * d), 0.5f), o(std::size_t(n * d));
  std::int64_t pos = 0;
  for (auto _ : state) {
    recur::kernels::walk_head(h, qT.data(), kT.data(), v.data(), d, o.data(), d, n, false, 0.0f, pos);
    pos += n;
    benchmark::DoNotOptimize(o.data());
  }
  const auto tokens = static_cast<double>(state.iterations()) * n;
  recur::bench::report_tokens(state, tokens, (P.size() + L32.size()) * sizeof(float) + L64.size() * sizeof(double));
  recur::bench::report_floor(state, 4.0 * d * d, tokens);
}
BENCHMARK(BM_Walk)->Args({64, 64})->Args({64, 256})->Args({128, 64});


// The walk's input pass alone (elu+1, the finiteness check, the layout) over 8 heads of d 64,
// chunks of 64 tokens: T = 64 reads the same rows from cache each time, T = 8192 streams 16 MiB
// from memory as prefill does for each of Q and K.
void BM_Gather(benchmark::State& state) {
  const int d = 64, n = 64;
  const Eigen::Index T = state.range(0);
  auto x = make_data(d, T);
  const std::int64_t head = static_cast<std::int64_t>(recur::kernels::tile_floats(n, d)) + 16;
  std::vector<float> tiles(static_cast<std::size_t>(head * kHeads));
  for (auto _ : state) {
    for (Eigen::Index b0 = 0; b0 < T; b0 += n)
      benchmark::DoNotOptimize(recur::kernels::gather_tiles(
          x.Q.data() + b0 * x.Q.outerStride(), x.Q.outerStride(), n, kHeads, d,
          recur::kernels::InputMap::kEluPlusOne, 0.125f, tiles.data(), head, d));
  }
  const auto n_in = static_cast<double>(state.iterations()) * static_cast<double>(T);
  recur::bench::report_tokens(state, n_in, tiles.size() * sizeof(float));
  state.counters["GB/s"] = benchmark::Counter(n_in * kHeads * d * sizeof(float) / 1e9,
                                              benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Gather)->Arg(64)->Arg(8192)->Unit(benchmark::kMicrosecond);

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::AddCustomContext("isa", recur::isa());
  benchmark::AddCustomContext("fma_peak_gflops", std::to_string(recur::bench::fma_peak() / 1e9));
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
