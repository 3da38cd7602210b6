// Shared by recur's benchmarks: this machine's fp32 FMA peak, measured at start-up in the same
// run, so that every result can be read as a fraction of the floor (docs/machines.md).
#pragma once

#include <benchmark/benchmark.h>

#include <chrono>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "kernels/simd.h"
#include "recur/linear_attention.h"

namespace recur::bench {

/// Runs `iters` rounds of 12 independent 8-lane FMA chains; returns the FLOP performed.
inline double fma_loop(long iters) {
  using namespace recur::kernels;
  F8 a[12];
  for (int i = 0; i < 12; ++i) a[i] = broadcast8(0.5f + 0.01f * float(i));
  const F8 m = broadcast8(0.999999f), c = broadcast8(1e-7f);
  for (long n = 0; n < iters; ++n) {
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) a[i] = fma8(a[i], m, c);
  }
  F8 s = a[0];
  for (int i = 1; i < 12; ++i) s = add8(s, a[i]);
  float out[kLanes];
  store8(out, s);
  benchmark::DoNotOptimize(out);
  return 2.0 * kLanes * 12.0 * double(iters);
}

/// fp32 FLOP/s of one core, measured once (best of five 50 ms runs).
inline double fma_peak() {
  static const double peak = [] {
    double best = 0;
    for (int r = 0; r < 5; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      const double flop = fma_loop(4'000'000);
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      best = std::max(best, flop / s);
    }
    return best;
  }();
  return peak;
}

/// Read bandwidth in bytes/s: `threads` cores (1 or 2) summing a 1 GiB array in `streams`
/// concurrent streams per core (1 or 4); best of three passes, the first also faulting the pages
/// in. One stream is what a single sequential scan gets; four is what the model's decode kernel
/// does (four weight panels at once), and more than one stream alone reaches on this machine.
inline double read_bandwidth(int threads = 1, int streams = 1) {
  static double measured[3][5] = {};
  const int t = std::max(1, std::min(threads, 2));
  const int S = streams >= 4 ? 4 : 1;
  if (measured[t][S] > 0) return measured[t][S];
  static std::vector<float> a(std::size_t(1) << 28, 1.0f);
  // Streams are staggered by a few KiB: starts a power of two apart alias in the caches and
  // read at half the speed.
  constexpr std::size_t kStagger = 1040;
  const std::size_t per = a.size() / std::size_t(t) / std::size_t(S) - 4096;  // floats per stream
  double best = 0;
  for (int r = 0; r < 3; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    float total = 0;
#pragma omp parallel num_threads(t) reduction(+ : total)
    {
      int w = 0;
#ifdef _OPENMP
      w = omp_get_thread_num();
#endif
      using namespace recur::kernels;
      const float* p0 = a.data() + (a.size() / std::size_t(t)) * std::size_t(w);
      F8 s0 = zero8(), s1 = zero8(), s2 = zero8(), s3 = zero8();
      if (S == 1) {
        for (std::size_t i = 0; i < per; i += 4 * kLanes) {
          s0 = add8(s0, load8(p0 + i));
          s1 = add8(s1, load8(p0 + i + kLanes));
          s2 = add8(s2, load8(p0 + i + 2 * kLanes));
          s3 = add8(s3, load8(p0 + i + 3 * kLanes));
        }
      } else {
        const float* p1 = p0 + per + kStagger;
        const float* p2 = p1 + per + kStagger;
        const float* p3 = p2 + per + kStagger;
        for (std::size_t i = 0; i < per; i += 2 * kLanes) {
          s0 = add8(s0, add8(load8(p0 + i), load8(p0 + i + kLanes)));
          s1 = add8(s1, add8(load8(p1 + i), load8(p1 + i + kLanes)));
          s2 = add8(s2, add8(load8(p2 + i), load8(p2 + i + kLanes)));
          s3 = add8(s3, add8(load8(p3 + i), load8(p3 + i + kLanes)));
        }
      }
      total += hsum8(add8(add8(s0, s1), add8(s2, s3)));
    }
    benchmark::DoNotOptimize(total);
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, double(std::size_t(t) * std::size_t(S) * per * sizeof(float)) / sec);
  }
  measured[t][S] = best;
  return best;
}

/// Adds the counter "floor_frac": the FMA floor's time for `flop_per_item` over the measured
/// time per item (1.0 would be the floor itself; 0.67 is 1.5x the floor).
inline void report_floor(benchmark::State& state, double flop_per_item, double items) {
  state.counters["floor_frac"] =
      benchmark::Counter(flop_per_item * items / fma_peak(), benchmark::Counter::kIsRate);
}

/// The layer every benchmark measures: n_heads heads, d_feature = d_value = d, elu+1, normalized.
inline recur::LinearAttention linear_layer(int n_heads, int d) {
  recur::LinearAttentionConfig c;
  c.n_heads = n_heads;
  c.d_key = d;
  c.d_value = d;
  return recur::LinearAttention(c);
}

/// Adds "tokens/s" (a rate over `tokens` processed) and "bytes_held" by the state or cache.
inline void report_tokens(benchmark::State& state, double tokens, std::size_t bytes_held) {
  state.counters["tokens/s"] = benchmark::Counter(tokens, benchmark::Counter::kIsRate);
  state.counters["bytes_held"] = static_cast<double>(bytes_held);
}

}  // namespace recur::bench
