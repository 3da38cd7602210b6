// The quantized product's in-memory layout and the call its kernels receive (quant-inl.h).
//
// PackedMatrix(QuantizedRows) repacks the file layout (quant.h) into panels of 16 output rows.
// A panel is blocks_per_row records, one per block of 32 inputs, in ascending order:
//   16 IEEE-half scales (one per output of the panel), then the codes of the 16 outputs,
//   interleaved in groups of 4 consecutive inputs:
//     q8: byte  g * 64 + o * 4 + j  (g < 8)  = code of output o, input 4g + j of the block;
//     q4: byte  g * 64 + o * 4 + j  (g < 4)  holds input 4g + j in its low nibble and input
//         4(g + 4) + j in its high nibble, each as code + 8.
// So one load of 4 inputs times 16 (AVX-512), 8 (AVX2) or 4 (NEON) outputs gives each 32-bit
// lane one output's four products, and a block's integer sums land one output per lane, with no
// reduction across lanes. Padded outputs of the last panel have codes 0 and scale 0.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/quant.h"

namespace recur::kernels {

inline constexpr int kQuantPanel = 16;  // output rows per panel
inline constexpr std::size_t kQ8Record = 2 * kQuantPanel + kQuantPanel * kQuantBlock;      // 544
inline constexpr std::size_t kQ4Record = 2 * kQuantPanel + kQuantPanel * kQuantBlock / 2;  // 288

/// One quantized multiply over panels [p0, p1). The activations are already quantized, once per
/// row for every panel (quantize_activations).
struct QuantCall {
  const unsigned char* data;  // (panels, blocks, record), panel_stride bytes apart
  std::size_t panel_stride;
  int n_out, k_in;
  QuantType type;
  const std::int8_t* qx;     // (rows, k_in) activation codes in [-127, 127]
  const float* dx;           // (rows, k_in / 32) activation scales
  const std::int32_t* xsum;  // (rows, k_in / 32) the sum of each block's codes
  std::int64_t rows;
  float* Y;  // (rows, n_out), row stride ldy
  std::int64_t ldy;
};

/// The one activation rule, per row and block of 32: m = max |x|; a block with m below the
/// smallest normal float (zero included) gets codes 0 and dx 0; otherwise dx = m / 127,
/// inv = 127 / m and q = round_half_even(x * inv), all in float. Rows are ldx floats apart.
/// Runs the active table's kernel (quant-inl.h); every table gives the same bytes.
void quantize_activations(const float* X, std::int64_t rows, std::int64_t ldx, int k_in,
                          std::int8_t* qx, float* dx, std::int32_t* xsum);

}  // namespace recur::kernels
