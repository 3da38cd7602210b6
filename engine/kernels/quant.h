// Weights quantized in blocks of 32 along the inner dimension, and the one rule that makes them.
//
// A quantized matrix keeps, for each output row and each block of 32 consecutive inputs, small
// integer codes q and one IEEE-half scale d, with w ≈ d · q. The product with an activation row
// quantizes the activations by one rule too (per block of 32, int8), takes each block's integer
// dot product (exact: |Σ q_w q_x| ≤ 32 · 127 · 127 < 2^31, in any order and at any vector
// width), and combines each output's blocks in one fixed float chain over the blocks in
// ascending order. So a row's bytes depend neither on the rows around it nor on the
// instruction set (docs/quantization.md).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace recur::kernels {

/// Inputs per block, for weights and activations alike.
inline constexpr int kQuantBlock = 32;

enum class QuantType {
  kQ8,  ///< int8 codes in [-127, 127]: 32 bytes and a 2-byte scale per block
  kQ4,  ///< 4-bit codes in [-8, 7]: 16 bytes and a 2-byte scale per block
};

/// "q8", "q4".
const char* quant_name(QuantType type);
/// Parses "q8" / "q4"; throws ArgumentError, as `call`, otherwise.
QuantType parse_quant(std::string_view name, const char* call);

/// A (n_out, k_in) weight quantized by rows; k_in is a multiple of kQuantBlock.
struct QuantizedRows {
  QuantType type = QuantType::kQ8;
  int n_out = 0;
  int k_in = 0;
  /// q8: n_out · k_in int8 codes, row-major (stored as bytes).
  /// q4: n_out · k_in / 2 bytes, row-major; in each block of 32, byte j (0 ≤ j < 16) holds
  ///     element j in its low nibble and element j + 16 in its high nibble, each as q + 8.
  std::vector<std::uint8_t> codes;
  /// One IEEE-half scale per block: n_out · (k_in / 32), row-major. Finite and ≥ 0.
  std::vector<std::uint16_t> scales;

  int blocks_per_row() const { return k_in / kQuantBlock; }
  /// Bytes of codes and scales: what a product reads of the weights.
  std::size_t bytes() const { return codes.size() + 2 * scales.size(); }
};

/// Quantizes w (n_out rows of k_in floats) by the one rule of docs/quantization.md. Throws
/// ArgumentError if k_in is not a multiple of kQuantBlock or a weight is not finite.
QuantizedRows quantize_rows(const float* w, int n_out, int k_in, QuantType type);
/// out (n_out · k_in floats) = d · q, exactly the numbers the kernels multiply by.
void dequantize_rows(const QuantizedRows& q, float* out);
/// Throws FormatError naming `what` if the sizes disagree with n_out and k_in, a scale is not
/// finite or negative, or a q8 code is -128.
void check_quantized(const QuantizedRows& q, const char* what);

}  // namespace recur::kernels
