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
