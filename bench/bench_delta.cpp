// The delta rule's state update (engine/kernels/delta_kernels.h) at the models' head shapes,
// over the inputs of 512 tokens laid out as a layer's projections, (T, H * d):
//
//   d 64,  H 16: RWKV-7 0.4B (hidden 1024, head size 64)
//   d 128, H 16: Qwen3.5's Gated DeltaNet layers (16 value heads of 128)
//
// Per state element and token the update costs two dot-product FMAs (S.a, S.r), one multiply
// and two FMAs: 9 FLOP. floor_frac is 9 * H * d_k * d_v FLOP per token over the FMA peak of the
// instruction set in use; the multiply takes an FMA slot for one FLOP, so 0.9 is the ceiling.
#include <benchmark/benchmark.h>

#include <cmath>
#include <random>
#include <vector>

#include "bench_common.h"
#include "kernels/delta_kernels.h"
#include "recur/isa.h"

namespace {

constexpr int kTokens = 512;

struct Data {
  int H, d;
  std::vector<float> w, a, b, k, r, v, y, alpha;  // (T, H * d); alpha (T, H)
  std::vector<float> S;                           // (H, d, d)
};

// RWKV-7-like values (w in (0.55, 1), a = -kk, b = kk * a_gate, kk a unit vector), which keep S
// bounded however long the benchmark walks; alpha in (0.9, 1) for the decay-per-token variant.
Data make_data(int H, int d) {
  Data x{H, d, {}, {}, {}, {}, {}, {}, {}, {}, {}};
  const auto n = std::size_t(kTokens) * std::size_t(H) * std::size_t(d);
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
  for (auto* m : {&x.w, &x.a, &x.b, &x.k, &x.r, &x.v, &x.y}) m->resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    x.w[i] = std::exp(-0.6f * uniform(rng));
    x.k[i] = 0.5f * normal(rng);
    x.r[i] = 0.5f * normal(rng);
    x.v[i] = normal(rng);
    x.a[i] = normal(rng);
  }
  for (std::size_t i = 0; i < n; i += std::size_t(d)) {
    double s = 0;
    for (int j = 0; j < d; ++j) {
      const double e = double(x.a[i + std::size_t(j)]);
      s += e * e;
    }
    const auto inv = float(1.0 / std::sqrt(s));
    for (int j = 0; j < d; ++j) {
      const float kk = x.a[i + std::size_t(j)] * inv;
      x.a[i + std::size_t(j)] = -kk;
      x.b[i + std::size_t(j)] = kk * uniform(rng);
    }
  }
  x.alpha.resize(std::size_t(kTokens) * std::size_t(H));
  for (auto& e : x.alpha) e = 0.9f + 0.1f * uniform(rng);
  x.S.assign(std::size_t(H) * std::size_t(d) * std::size_t(d), 0.0f);
  return x;
}

// Head h's view of tokens [t0, t0 + n); per_token: w is alpha, one float per token.
recur::kernels::DeltaInputs inputs(const Data& x, int h, int t0, bool per_token) {
  const std::int64_t row = std::int64_t(x.H) * x.d;
  const std::size_t off = std::size_t(t0) * std::size_t(row) + std::size_t(h) * std::size_t(x.d);
  recur::kernels::DeltaInputs in;
  in.w_per_token = per_token;
  in.w = per_token ? x.alpha.data() + std::size_t(t0) * std::size_t(x.H) + std::size_t(h)
                   : x.w.data() + off;
  in.w_stride = per_token ? x.H : row;
  in.a = x.a.data() + off, in.a_stride = row;
  in.b = x.b.data() + off, in.b_stride = row;
  in.k = x.k.data() + off, in.k_stride = row;
  in.r = x.r.data() + off, in.r_stride = row;
  in.v = x.v.data() + off, in.v_stride = row;
  return in;
}

// Tokens [t0, t0 + n) through every head; heads split over `threads` (OpenMP), as a layer would.
void walk_heads(Data& x, int t0, int n, bool per_token, int threads) {
  const std::int64_t row = std::int64_t(x.H) * x.d;
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1)
  for (int h = 0; h < x.H; ++h) {
    float* S = x.S.data() + std::size_t(h) * std::size_t(x.d) * std::size_t(x.d);
    const recur::kernels::DeltaHeadView view{S, x.d, x.d};
    float* y = x.y.data() + std::size_t(t0) * std::size_t(row) + std::size_t(h) * std::size_t(x.d);
    recur::kernels::delta_walk_head(view, inputs(x, h, t0, per_token), y, row, n);
  }
}

double flop_per_token(int H, int d) { return 9.0 * H * d * d; }

void report(benchmark::State& state, const Data& x, double tokens) {
  recur::bench::report_tokens(state, tokens, x.S.size() * sizeof(float));
  recur::bench::report_floor(state, flop_per_token(x.H, x.d), tokens);
}

void BM_FmaPeak(benchmark::State& state) {
  double flop = 0;
  for (auto _ : state) flop += recur::bench::fma_loop(1'000'000);
  state.counters["FLOP/s"] = benchmark::Counter(flop, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_FmaPeak)->Unit(benchmark::kMillisecond);

// Prefill's walk: 512 tokens through H heads in one call per head. Args: d, H, threads.
void BM_DeltaWalk(benchmark::State& state) {
  auto x = make_data(int(state.range(1)), int(state.range(0)));
  const int threads = int(state.range(2));
  for (auto _ : state) {
    walk_heads(x, 0, kTokens, false, threads);
    benchmark::DoNotOptimize(x.y.data());
  }
  report(state, x, double(state.iterations()) * kTokens);
}
BENCHMARK(BM_DeltaWalk)
    ->Args({64, 16, 1})
    ->Args({128, 16, 1})
    ->Args({64, 16, 2})
    ->Args({128, 16, 2})
    ->Unit(benchmark::kMillisecond);

// Gated DeltaNet's decay: one float per token (w_per_token) against the caller broadcasting it
// into a row of w. The same bytes; which is faster? Args: d, H, per_token.
void BM_DeltaWalkDecay(benchmark::State& state) {
  auto x = make_data(int(state.range(1)), int(state.range(0)));
  const bool per_token = state.range(2) != 0;
  if (!per_token)  // the broadcast rows hold the same alphas
    for (int t = 0; t < kTokens; ++t)
      for (int h = 0; h < x.H; ++h)
        for (int j = 0; j < x.d; ++j) {
          const std::size_t th = std::size_t(t) * std::size_t(x.H) + std::size_t(h);
          x.w[th * std::size_t(x.d) + std::size_t(j)] = x.alpha[th];
        }
  for (auto _ : state) {
    walk_heads(x, 0, kTokens, per_token, 1);
    benchmark::DoNotOptimize(x.y.data());
  }
  state.SetLabel(per_token ? "w per token" : "w broadcast by the caller");
  report(state, x, double(state.iterations()) * kTokens);
}
BENCHMARK(BM_DeltaWalkDecay)
    ->Args({64, 16, 1})
    ->Args({64, 16, 0})
    ->Args({128, 16, 1})
    ->Args({128, 16, 0})
    ->Unit(benchmark::kMillisecond);

// The walk alone: one head over the same 16 tokens again and again, S and the inputs in L1.
// Shows how close the kernel itself gets to the peak. Args: d.
void BM_DeltaWalkHot(benchmark::State& state) {
  auto x = make_data(1, int(state.range(0)));
  constexpr int n = 16;
  for (auto _ : state) {
    walk_heads(x, 0, n, false, 1);
    benchmark::DoNotOptimize(x.y.data());
  }
  report(state, x, double(state.iterations()) * n);
}
BENCHMARK(BM_DeltaWalkHot)->Arg(64)->Arg(128)->Unit(benchmark::kMicrosecond);

// Decode's step: one token through H heads (the state, H d^2 floats, stays in cache between
// steps). Args: d, H.
void BM_DeltaStep(benchmark::State& state) {
  auto x = make_data(int(state.range(1)), int(state.range(0)));
  int t = 0;
  for (auto _ : state) {
    walk_heads(x, t, 1, false, 1);
    benchmark::DoNotOptimize(x.y.data());
    t = (t + 1) % kTokens;
  }
  report(state, x, double(state.iterations()));
}
BENCHMARK(BM_DeltaStep)->Args({64, 16})->Args({128, 16})->Unit(benchmark::kMicrosecond);

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
