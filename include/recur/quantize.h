// Writing a model with quantized weights: what `recur quantize` does (docs/quantization.md).
//
// The matrices of the forward pass (every projection, the MLP, and the head, or the tied
// embedding that serves as the head) are stored as blocks of 32 integer codes with one IEEE-half
// scale each: q8 (I8 codes, shape (n_out, k_in)) or q4 (two 4-bit codes per U8, shape
// (n_out, k_in / 2)), with the scales beside them as NAME_scale (F16, (n_out, k_in / 32)).
// Everything else keeps its stored precision: norms, biases, learned feature maps,
// convolutions, an untied embedding (gathered a row per token, never multiplied), and every
// matrix whose k_in is not a multiple of 32.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "recur/model.h"

namespace recur {

struct QuantizeOptions {
  /// "q8" or "q4": the projections' and the MLP's format.
  std::string format = "q8";
  /// The head's (the tied embedding's): "q8" or "q4"; empty for the same as `format`.
  std::string head;
};

/// What write_quantized_model() wrote.
struct QuantizeReport {
  int tensors = 0;    ///< tensors of the model (a quantized one counts once, without its scales)
  int quantized = 0;  ///< matrices stored as codes and scales
  int kept = 0;       ///< matrices kept in their precision: k_in not a multiple of 32
  std::uint64_t bytes = 0;  ///< bytes of tensor data in model.safetensors
  std::string weight_format;  ///< Model::weight_format() of the model written
};

/// Called after each tensor is prepared: (tensors done, tensors in all, the tensor's name).
using QuantizeProgress = std::function<void(int, int, const std::string&)>;

/// Loads the model of `config` and `weights` (every check of Model::from_weights), quantizes its
/// matrices and writes `dir`/model.safetensors and `dir`/config.json (with a
/// quantization_config), creating `dir` if needed. Each file is written beside its final name
/// and renamed over it. Throws ArgumentError for a bad format or a model that is already
/// quantized, FormatError for bad weights.
QuantizeReport write_quantized_model(const std::string& dir, const ModelConfig& config,
                                     const WeightSource& weights, const QuantizeOptions& options,
                                     const QuantizeProgress& progress = {});

}  // namespace recur
