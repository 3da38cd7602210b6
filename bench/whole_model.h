// Shared by the whole-model benchmarks (bench_fla, bench_rwkv7, bench_qwen35, bench_mamba2,
// bench_lfm2): a model built in memory from random bf16 weights through its family's config JSON,
// or the same weights quantized by recur's quantizer, with only one model in memory at a time; the
// prompt ids; and the measurements every one of them makes (the read bandwidth, a prefill, a
// decode and its "x_read_time").
#pragma once

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

#include "bench_common.h"
#include "model/random_weights.h"
#include "recur/model.h"
#include "recur/quantize.h"

namespace recur::bench {

/// Decode reads several weight panels at once: its bandwidth is that of four streams per core.
inline constexpr int kDecodeStreams = 4;

/// The weight formats a whole-model benchmark measures: the published bf16, and q8.
inline constexpr const char* kWeightFormats[] = {"bf16", "q8"};

/// The model of `config_json` (named `name` in messages) with seeded random bf16 weights, as
/// stored (format 0) or quantized to q8 by recur's quantizer (format 1: written to a temporary
/// directory and loaded back, as a user would). The one model in memory: asking for another
/// drops the one held first, so that the largest shape fits beside nothing else.
inline std::shared_ptr<const Model> whole_model(const std::string& name,
                                                const std::string& config_json, int format) {
  static std::string held;
  static std::shared_ptr<const Model> model;
  const std::string key = name + "/" + kWeightFormats[format];
  if (held != key) {
    model.reset();
    held.clear();
    std::fprintf(stderr, "whole_model: building %s (%s) from random bf16 weights\n", name.c_str(),
                 kWeightFormats[format]);
    const auto c = ModelConfig::from_json(config_json, name);
    const RandomWeights weights(c, 1, DType::kBF16);
    if (format == 0) {
      model = Model::from_weights(c, weights);
    } else {
      namespace fs = std::filesystem;
      const fs::path dir =
          fs::temp_directory_path() / ("recur_bench_q8_" + std::to_string(::getpid()));
      QuantizeOptions o;
      o.format = "q8";
      write_quantized_model(dir.string(), c, weights, o);
      model = Model::load(dir.string());
      std::error_code ec;
      fs::remove_all(dir, ec);
    }
    held = key;
  }
  return model;
}

/// n prompt ids spread over the vocabulary (the same in every run).
inline std::vector<int> prompt_ids(int n, int vocab) {
  std::vector<int> t(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i)
    t[static_cast<std::size_t>(i)] = static_cast<int>((static_cast<long>(i) * 7919 + 13) % vocab);
  return t;
}

/// Registers BM_MemoryBandwidth at 1 and 2 threads: the read bandwidth that "x_read_time"
/// divides by, kDecodeStreams streams a core (measured once per thread count, then remembered).
inline void register_memory_bandwidth() {
  benchmark::RegisterBenchmark("BM_MemoryBandwidth", [](benchmark::State& state) {
    const int threads = static_cast<int>(state.range(0));
    for (auto _ : state) benchmark::DoNotOptimize(read_bandwidth(threads, kDecodeStreams));
    state.counters["read_GB/s"] = read_bandwidth(threads, kDecodeStreams) / 1e9;
  })->ArgName("threads")->Arg(1)->Arg(2)->Iterations(1);
}

/// Times `prompt` prefilled from an empty state by `dec` (warmed up by its caller), the head on
/// the last token only, and sets "tokens/s".
inline void time_prefill(benchmark::State& state, Decoder& dec, const std::vector<int>& prompt) {
  for (auto _ : state) {
    dec.reset();
    benchmark::DoNotOptimize(dec.prefill(prompt).data());
  }
  state.counters["tokens/s"] = benchmark::Counter(
      static_cast<double>(state.iterations()) * static_cast<double>(prompt.size()),
      benchmark::Counter::kIsRate);
}

/// Times one token at a time after `dec`'s prompt and two untimed steps, full logits each step,
/// the ids stepping by `stride` modulo `vocab`; sets "tokens/s", "weight_MB", "read_GB/s" and
/// "x_read_time": the time per token over the time to read every weight once at that bandwidth
/// with as many threads.
inline void time_decode(benchmark::State& state, Decoder& dec, const Model& model, int threads,
                        int vocab, int stride) {
  int t = 1;
  for (int i = 0; i < 2; ++i) benchmark::DoNotOptimize(dec.step(t++).data());  // warm-up
  for (auto _ : state) {
    benchmark::DoNotOptimize(dec.step(t).data());
    t = (t + stride) % vocab;
  }
  const double n = static_cast<double>(state.iterations());
  const double bytes = static_cast<double>(model.weight_bytes_per_token());
  const double bandwidth = read_bandwidth(threads, kDecodeStreams);
  state.counters["tokens/s"] = benchmark::Counter(n, benchmark::Counter::kIsRate);
  state.counters["weight_MB"] = bytes / 1e6;
  state.counters["read_GB/s"] = bandwidth / 1e9;
  // Rate counters are divided by the elapsed time: this one is (read time / token time)^-1.
  state.counters["x_read_time"] = benchmark::Counter(
      n * bytes / bandwidth, benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

}  // namespace recur::bench
