// One gated linear-attention layer at the attention shapes of flash-linear-attention's 1.3B
// checkpoints: step and prefill tokens/s against the FMA floor of 4 * n_heads * d_key * d_value
// FLOP per token (two FMAs per state element). The decay adds a multiply (k_i v_j) per element,
// so the walk's own ceiling is 2/3 of that floor.
//
//   shape 0  gla-1.3B:    hidden 2048, 4 heads, expand_k 0.5, expand_v 1 -> d_key 256, d_value 512
//   shape 1  hgrn2-1.3B:  hidden 2048, expand_ratio 128 -> 16 heads, d_key = d_value = 128
//   shape 2  retnet-1.3B: hidden 2048, 8 heads, expand_k 1, expand_v 2 -> 256 x 512, per head
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "bench_common.h"
#include "kernels/gated_kernels.h"
#include "recur/gla_recurrence.h"
#include "recur/isa.h"

namespace {

struct Shape {
  const char* name;
  int n_heads, d_key, d_value;
  bool per_head;
};
constexpr Shape kShapes[] = {
    {"gla-1.3B", 4, 256, 512, false},
    {"hgrn2-1.3B", 16, 128, 128, false},
    {"retnet-1.3B", 8, 256, 512, true},
};

recur::GlaRecurrence layer_of(const Shape& s) {
  recur::GlaRecurrenceConfig c;
  c.n_heads = s.n_heads;
  c.d_key = s.d_key;
  c.d_value = s.d_value;
  if (s.per_head) {
    c.decay = recur::DecayKind::kPerHead;
    c.head_decay = recur::gates::retnet_decays(s.n_heads);
  }
  return recur::GlaRecurrence(c);
}

struct Data {
  recur::RowMatrix Q, K, V, A, O;
};
Data make_data(const Shape& s, Eigen::Index T) {
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Data x;
  const Eigen::Index dk = Eigen::Index(s.n_heads) * s.d_key, dv = Eigen::Index(s.n_heads) * s.d_value;
  x.Q.resize(T, dk);
  x.K.resize(T, dk);
  x.V.resize(T, dv);
  x.O.resize(T, dv);
  for (auto* m : {&x.Q, &x.K, &x.V})
    for (Eigen::Index i = 0; i < m->size(); ++i) m->data()[i] = normal(rng);
  if (!s.per_head) {
    x.A.resize(T, dk);
    for (Eigen::Index i = 0; i < x.A.size(); ++i) x.A.data()[i] = normal(rng);
    recur::gates::gla_decay(x.A.data(), x.A.data(), x.A.size());
  }
  return x;
}

double flop_per_token(const Shape& s) { return 4.0 * s.n_heads * s.d_key * s.d_value; }

void label(benchmark::State& state, const Shape& s) { state.SetLabel(s.name); }

void BM_FmaPeak(benchmark::State& state) {
  double flop = 0;
  for (auto _ : state) flop += recur::bench::fma_loop(1'000'000);
  state.counters["FLOP/s"] = benchmark::Counter(flop, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_FmaPeak)->Unit(benchmark::kMillisecond);

void BM_GatedStep(benchmark::State& state) {
  const Shape& sh = kShapes[state.range(0)];
  const auto layer = layer_of(sh);
  auto s = layer.make_state();
  auto x = make_data(sh, 256);
  Eigen::VectorXf o(x.O.cols());
  const Eigen::VectorXf none;
  Eigen::Index t = 0;
  for (auto _ : state) {
    if (sh.per_head)
      layer.step(s, x.Q.row(t).transpose(), x.K.row(t).transpose(), x.V.row(t).transpose(), none, o);
    else
      layer.step(s, x.Q.row(t).transpose(), x.K.row(t).transpose(), x.V.row(t).transpose(),
                 x.A.row(t).transpose(), o);
    benchmark::DoNotOptimize(o.data());
    t = (t + 1) % 256;
  }
  const auto n = static_cast<double>(state.iterations());
  label(state, sh);
  recur::bench::report_tokens(state, n, s.bytes());
  recur::bench::report_floor(state, flop_per_token(sh), n);
}
BENCHMARK(BM_GatedStep)->ArgName("shape")->DenseRange(0, 2)->Unit(benchmark::kMicrosecond);

void BM_GatedPrefill(benchmark::State& state) {
  const Shape& sh = kShapes[state.range(0)];
  const Eigen::Index T = state.range(1);
  recur::PrefillOptions options;
  options.threads = static_cast<int>(state.range(2));
  if (state.range(3) > 0) options.chunk = static_cast<int>(state.range(3));
  const auto layer = layer_of(sh);
  auto s = layer.make_state();
  auto x = make_data(sh, T);
  for (auto _ : state) {
    s.reset();
    layer.prefill(s, x.Q, x.K, x.V, x.A, x.O, options);
    benchmark::DoNotOptimize(x.O.data());
  }
  const auto n = static_cast<double>(state.iterations()) * static_cast<double>(T);
  label(state, sh);
  recur::bench::report_tokens(state, n, s.bytes());
  recur::bench::report_floor(state, flop_per_token(sh), n);
}
BENCHMARK(BM_GatedPrefill)
    ->ArgNames({"shape", "T", "threads", "chunk"})
    ->Args({0, 2048, 1, 0})
    ->Args({0, 2048, 1, 256})
    ->Args({0, 2048, 2, 0})
    ->Args({1, 2048, 1, 0})
    ->Args({1, 2048, 1, 256})
    ->Args({1, 2048, 2, 0})
    ->Args({2, 2048, 1, 0})
    ->Args({2, 2048, 2, 0})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// The inner walk alone: one head's register-tiled pass over a block of tokens already in cache.
void BM_GatedWalk(benchmark::State& state) {
  const int dk = static_cast<int>(state.range(0)), dv = static_cast<int>(state.range(1));
  const int n = static_cast<int>(state.range(2));
  std::vector<float> S(std::size_t(dk * dv));
  const recur::kernels::GatedHeadView h{S.data(), dk, dv, dv};
  const std::size_t tiles = recur::kernels::tile_floats(n, dk);
  std::vector<float> qT(tiles, 0.01f), kT(tiles, 0.02f);
  std::vector<float> aT(tiles, 0.99f);
  std::vector<float> v(std::size_t(n * dv), 0.5f), o(std::size_t(n * dv));
  for (auto _ : state) {
    recur::kernels::gated_walk_head(h, qT.data(), kT.data(), aT.data(), 0.0f, v.data(), dv,
                                    o.data(), dv, n);
    benchmark::DoNotOptimize(o.data());
  }
  const auto tokens = static_cast<double>(state.iterations()) * n;
  recur::bench::report_tokens(state, tokens, S.size() * sizeof(float));
  recur::bench::report_floor(state, 4.0 * dk * dv, tokens);
}
BENCHMARK(BM_GatedWalk)->ArgNames({"dk", "dv", "n"})->Args({128, 128, 64})->Args({256, 512, 64});

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
