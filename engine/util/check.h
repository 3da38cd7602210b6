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

/// Whether every element of a (rows, cols) block with the given row stride is finite. On the
/// bits (all exponent bits set is Inf or NaN), so that the compiler vectorizes it.
inline bool all_finite(const float* data, std::int64_t rows, std::int64_t cols,
                       std::int64_t stride) {
  std::uint32_t bad = 0;
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* row = data + r * stride;
    for (std::int64_t c = 0; c < cols; ++c) {
      std::uint32_t u;
      std::memcpy(&u, row + c, sizeof u);
      bad |= static_cast<std::uint32_t>((u & 0x7f800000u) == 0x7f800000u);
    }
  }
  return bad == 0;
}

/// Throws NumericError naming the first non-finite element of a (rows, cols) block with the
/// given row stride.
inline void check_finite(const char* call, const char* name, const float* data,
                         std::int64_t rows, std::int64_t cols, std::int64_t stride) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* row = data + r * stride;
    // All exponent bits set is Inf or NaN. Written on the bits, so that the compiler vectorizes it.
    std::uint32_t bad = 0;
    for (std::int64_t c = 0; c < cols; ++c) {
      std::uint32_t u;
      std::memcpy(&u, row + c, sizeof u);
      bad |= static_cast<std::uint32_t>((u & 0x7f800000u) == 0x7f800000u);
    }
    if (bad == 0) continue;
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
