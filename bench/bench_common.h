// Shared by recur's benchmarks: the fp32 FMA peak of the instruction set in use, measured at
// start-up in the same run, so that every result can be read as a fraction of the floor
// (docs/machines.md); and the baselines, compiled for this machine (bench/native.cpp).
#pragma once

#include <benchmark/benchmark.h>

#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "kernels/dispatch.h"
#include "recur/isa.h"
#include "recur/linear_attention.h"

namespace recur::bench {

/// Runs `iters` rounds of kFmaChains independent FMA chains of full vectors of the instruction
/// set in use (recur::isa(); RECUR_ISA forces one); returns the FLOP performed.
inline double fma_loop(long iters) {
  const recur::kernels::Kernels& k = recur::kernels::active();
  benchmark::DoNotOptimize(k.fma_chains(iters, 0.5f));
  return 2.0 * k.lanes * double(recur::kernels::kFmaChains) * double(iters);
}

/// fp32 FLOP/s of one core with the instruction set in use, measured once (best of ten runs of
/// a few milliseconds each, so that a run the host interrupts does not count).
inline double fma_peak() {
  static const double peak = [] {
    double best = 0;
    for (int r = 0; r < 10; ++r) {
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
/// does (several weight panels at once). Compiled for this machine (bench/native.cpp).
double read_bandwidth(int threads = 1, int streams = 1);

/// Seconds per pass of the memory traffic of one step over `heads` heads of a (rows, cols)
/// state: P read and written, L32 read, as step does, hot in L2 (bench/native.cpp).
double state_traffic_seconds(int heads, int rows, int cols, long passes);

/// The textbook chunkwise prefill with Eigen's products (not exact: its sums depend on the
/// chunk), compiled for this machine: elu+1 features, then per head and chunk
/// O = Q S + tril(Q K^T) V, den = Q z + tril(Q K^T) 1, S += K^T V, z += K^T 1.
/// Q, K, V, O: (T, heads * d) row-major.
void eigen_chunkwise(const float* Q, const float* K, const float* V, float* O, long T, int heads,
                     int d, int chunk);

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

/// A benchmark program's main: the instruction set in use, `context` (name and value) and, with
/// `with_fma_peak`, the FMA peak in the report's context, then the benchmarks asked for.
inline int run_benchmarks(int argc, char** argv,
                          const std::vector<std::pair<std::string, std::string>>& context = {},
                          bool with_fma_peak = false) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::AddCustomContext("isa", recur::isa());
  for (const auto& [name, value] : context) benchmark::AddCustomContext(name, value);
  if (with_fma_peak) benchmark::AddCustomContext("fma_peak_GFLOP/s", std::to_string(fma_peak() / 1e9));
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

}  // namespace recur::bench
