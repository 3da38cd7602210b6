// A short convolution over a range of its channels (engine/attention/): channels are
// independent, so threads that already split a layer's heads can each convolve their heads'
// channels without a crossing of their own. Each output element is the chain step() and
// prefill() compute, so no byte depends on the ranges.
#pragma once

#include <cstdint>

#include "kernels/finite.h"
#include "recur/short_conv.h"

namespace recur::detail {

struct ShortConvChannels {
  /// What step() (T = 1) and prefill() check of x before any channel range changes the state,
  /// under their names: its T rows of conv.channels() floats, ldx apart, are finite.
  static void check_input(const ShortConvolution& conv, const float* x, std::int64_t ldx,
                          std::int64_t T) {
    check_finite(T == 1 ? "ShortConvolution::step" : "ShortConvolution::prefill",
                 T == 1 ? "x" : "X", x, T, conv.channels(), ldx);
  }
  /// Channels [begin, end) of T tokens: x, y rows ldx and ldy floats apart, each holding every
  /// channel from its first (for one token y may be x). No checks: the caller has checked the
  /// shapes and that x is finite. The token count is left alone: after the ranges that cover
  /// the channels, count_tokens() once.
  static void convolve(const ShortConvolution& conv, ShortConvState& state, const float* x,
                       std::int64_t ldx, float* y, std::int64_t ldy, std::int64_t T, int begin,
                       int end) {
    conv.convolve(state, x, ldx, y, ldy, T, begin, end);
  }
  static void count_tokens(ShortConvState& state, std::int64_t T) {
    ShortConvolution::count_tokens(state, T);
  }
};

}  // namespace recur::detail
