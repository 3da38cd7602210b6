// Linear attention against a softmax KV cache, one layer (n_heads 8, d_head 64), in one run:
// the step at growing contexts, prefill, and this machine's memory bandwidth, so that the
// cache's decode can be read as a fraction of it.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdint>
#include <vector>

#include "bench_common.h"
#include "recur/linear_attention.h"
#include "recur/softmax_attention.h"

namespace {

constexpr int kHeads = 8, kDim = 64;

// Cheap reproducible inputs: filling 64K tokens of cache with std::normal_distribution would
// take longer than the benchmark.
void fill(recur::RowMatrix& m, std::uint64_t seed) {
  std::uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (Eigen::Index i = 0; i < m.size(); ++i) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    m.data()[i] = float(s >> 40) * (2.0f / 16777216.0f) - 1.0f;
  }
}

struct Stream {
  recur::RowMatrix Q, K, V;
  explicit Stream(Eigen::Index T)
      : Q(T, kHeads * kDim), K(T, kHeads * kDim), V(T, kHeads * kDim) {
    fill(Q, 1);
    fill(K, 2);
    fill(V, 3);
  }
};

using recur::bench::read_bandwidth;

void BM_MemoryBandwidth(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(read_bandwidth());
  state.counters["read_GB/s"] = read_bandwidth() / 1e9;
}
BENCHMARK(BM_MemoryBandwidth)->Iterations(1);

void BM_KVStep(benchmark::State& state) {
  const Eigen::Index context = state.range(0);
  const recur::SoftmaxAttention layer{recur::SoftmaxAttentionConfig{}};
  auto cache = layer.make_cache();
  {
    const Stream fill_in(context);
    layer.append(cache, fill_in.K, fill_in.V);
  }
  const Stream in(64);
  Eigen::VectorXf o(kHeads * kDim);
  Eigen::Index t = 0;
  for (auto _ : state) {
    layer.step(cache, in.Q.row(t).transpose(), in.K.row(t).transpose(), in.V.row(t).transpose(), o);
    benchmark::DoNotOptimize(o.data());
    cache.truncate(context);  // the next step sees the same context
    t = (t + 1) % 64;
  }
  const auto n = static_cast<double>(state.iterations());
  const double bytes_read = 2.0 * double(context + 1) * kHeads * kDim * sizeof(float);
  recur::bench::report_tokens(state, n, cache.bytes());
  state.counters["read_GB/s"] = benchmark::Counter(n * bytes_read / 1e9, benchmark::Counter::kIsRate);
  state.counters["of_bandwidth"] =
      benchmark::Counter(n * bytes_read / read_bandwidth(), benchmark::Counter::kIsRate);
}

void BM_Step(benchmark::State& state) {  // the linear step after `context` tokens
  const Eigen::Index context = state.range(1);
  const auto layer = recur::bench::linear_layer(kHeads, static_cast<int>(state.range(0)));
  auto s = layer.make_state();
  {
    const Stream fill_in(context);
    layer.prefill(s, fill_in.Q, fill_in.K, fill_in.V);
  }
  const Stream in(64);
  Eigen::VectorXf o(kHeads * kDim);
  Eigen::Index t = 0;
  for (auto _ : state) {
    layer.step(s, in.Q.row(t).transpose(), in.K.row(t).transpose(), in.V.row(t).transpose(), o);
    benchmark::DoNotOptimize(o.data());
    t = (t + 1) % 64;
  }
  recur::bench::report_tokens(state, static_cast<double>(state.iterations()), s.bytes());
}

void BM_KVPrefill(benchmark::State& state) {
  const Eigen::Index T = state.range(0);
  const recur::SoftmaxAttention layer{recur::SoftmaxAttentionConfig{}};
  auto cache = layer.make_cache();
  const Stream in(T);
  recur::RowMatrix O(T, kHeads * kDim);
  for (auto _ : state) {
    cache.reset();
    layer.prefill(cache, in.Q, in.K, in.V, O);
    benchmark::DoNotOptimize(O.data());
  }
  recur::bench::report_tokens(state, static_cast<double>(state.iterations()) * double(T),
                              cache.bytes());
}

void BM_Prefill(benchmark::State& state) {
  const Eigen::Index T = state.range(1);
  const auto layer = recur::bench::linear_layer(kHeads, static_cast<int>(state.range(0)));
  auto s = layer.make_state();
  const Stream in(T);
  recur::RowMatrix O(T, kHeads * kDim);
  for (auto _ : state) {
    s.reset();
    layer.prefill(s, in.Q, in.K, in.V, O);
    benchmark::DoNotOptimize(O.data());
  }
  recur::bench::report_tokens(state, static_cast<double>(state.iterations()) * double(T),
                              s.bytes());
}

void contexts(benchmark::internal::Benchmark* b, bool with_d) {
  for (std::int64_t ctx : {64, 256, 1024, 4096, 16384, 65536}) {
    if (with_d)
      b->Args({kDim, ctx});
    else
      b->Arg(ctx);
  }
}

BENCHMARK(BM_KVStep)->Apply([](auto* b) { contexts(b, false); })->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Step)->Apply([](auto* b) { contexts(b, true); })->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_KVPrefill)->Arg(1024)->Arg(4096)->Arg(16384)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Prefill)->Args({kDim, 1024})->Args({kDim, 4096})->Args({kDim, 16384})
    ->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
