// Argument checks for the public boundary. Each throws one of recur's exceptions with a message
// that starts with the call's name, so that a failure reads on its own.
#pragma once

#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "recur/error.h"

namespace recur::detail {

template <class... Args>
[[noreturn]] void throw_shape(const char* call, fmt::format_string<Args...> f, Args&&... args) {
  throw ShapeError(fmt::format("[{}] {}", call, fmt::format(f, std::forward<Args>(args)...)));
}
template <class... Args>
[[noreturn]] void throw_argument(const char* call, fmt::format_string<Args...> f,
                                 Args&&... args) {
  throw ArgumentError(fmt::format("[{}] {}", call, fmt::format(f, std::forward<Args>(args)...)));
}
template <class... Args>
[[noreturn]] void throw_numeric(const char* call, fmt::format_string<Args...> f, Args&&... args) {
  throw NumericError(fmt::format("[{}] {}", call, fmt::format(f, std::forward<Args>(args)...)));
}

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

/// Throws ShapeError unless `m` is (T, n_heads * d), the layout of a layer's per-head inputs and
/// outputs; `d_name` names d in the message.
template <class Matrix>
void check_heads_shape(const char* call, const char* name, const Matrix& m, std::int64_t T,
                       int n_heads, int d, const char* d_name) {
  if (m.rows() != T || m.cols() != static_cast<std::int64_t>(n_heads) * d)
    throw_shape(call, "{} has shape ({}, {}), expected (T, n_heads * {}) = ({}, {} * {})", name,
                m.rows(), m.cols(), d_name, T, n_heads, d);
}

/// Throws ArgumentError unless a prefill's chunk and thread count can be used.
inline void check_prefill_options(const char* call, int chunk, int threads) {
  if (chunk < 1) throw_argument(call, "options.chunk is {}, expected at least 1", chunk);
  if (threads < 0)
    throw_argument(call, "options.threads is {}, expected 0 (all cores) or more", threads);
}

}  // namespace recur::detail
