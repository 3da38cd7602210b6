// One sequence's rows through a layer that keeps state (engine/layers/): step() for one row,
// prefill() for more. The two give the same bytes, so callers need not choose; every family's
// sequence stage goes through these instead of writing the choice again. Rows are row-major,
// `count` of them, contiguous.
#pragma once

#include "recur/causal_attention.h"
#include "recur/short_conv.h"

namespace recur::model {

/// Softmax attention (full or windowed, rotary, grouped kv heads): q and o (count, n_heads *
/// d_head), k and v (count, n_kv_heads * d_head).
void attend(const CausalAttention& attention, CausalState& state, const float* q, const float* k,
            const float* v, float* o, int count, int threads);

/// A depthwise causal convolution: x and y (count, channels), each row `stride` floats after the
/// one before (0: channels; a wider row holds the convolution's columns among others), y's rows
/// `y_stride` apart when that is given (else as x's); for one row y may be x.
void convolve(const ShortConvolution& conv, ShortConvState& state, const float* x, float* y,
              int count, int stride = 0, int y_stride = 0);

}  // namespace recur::model
