// Shared by the whole-model benchmarks (bench_rwkv7.cpp, bench_qwen35.cpp): a model built in memory from random bf16 weights through its
// family's config JSON, or the same weights quantized by recur's quantizer, with only one model
// in memory at a time; and the prompt ids.
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

}  // namespace recur::bench
