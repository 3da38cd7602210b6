// The boundary checks that read every value, whether it is finite: through the vector kernel of
// the instruction set in use (kernels::Kernels::all_finite), on the bits. Here in kernels/, not
// in util/, so that the arrows point down: util knows no kernel.
#pragma once

#include <cmath>
#include <cstdint>

#include "util/check.h"

namespace recur::detail {

/// Whether every element of a (rows, cols) block with the given row stride is finite: the
/// vector kernel of the instruction set in use (kernels::Kernels::all_finite), on the bits.
bool all_finite(const float* data, std::int64_t rows, std::int64_t cols, std::int64_t stride);

/// Throws NumericError naming the first non-finite element of a (rows, cols) block with the
/// given row stride.
inline void check_finite(const char* call, const char* name, const float* data,
                         std::int64_t rows, std::int64_t cols, std::int64_t stride) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* row = data + r * stride;
    if (all_finite(row, 1, cols, cols)) continue;
    for (std::int64_t c = 0; c < cols; ++c) {
      if (!std::isfinite(row[c])) {
        if (rows == 1) {
          throw_numeric(call, "{} holds a non-finite value ({}) at element {} of {}", name,
                        row[c], c, cols);
        }
        throw_numeric(call, "{} holds a non-finite value ({}) at row {}, column {} of a ({}, {}) matrix",
                      name, row[c], r, c, rows, cols);
      }
    }
  }
}

}  // namespace recur::detail
