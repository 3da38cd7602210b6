// Argument checks for the public boundary. Each throws one of recur's exceptions with a message
// that starts with the call's name, so that a failure reads on its own.
#pragma once

#include <fmt/format.h>

#include <cmath>
#include <cstdint>

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

/// Throws NumericError naming the first non-finite element of a (rows, cols) block with the
/// given row stride.
inline void check_finite(const char* call, const char* name, const float* data,
                         std::int64_t rows, std::int64_t cols, std::int64_t stride) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* row = data + r * stride;
    bool ok = true;
    for (std::int64_t c = 0; c < cols; ++c) ok &= std::isfinite(row[c]);
    if (ok) continue;
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
