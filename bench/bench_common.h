// Shared by recur's benchmarks: this machine's fp32 FMA peak, measured at start-up in the same
// run, so that every result can be read as a fraction of the floor (shared/MACHINE.md).
#pragma once

#include <benchmark/benchmark.h>

#include <chrono>

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
