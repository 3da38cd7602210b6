// A mixer's output gate (engine/layers/): what multiplies a mixer's output before its output
// projection, elementwise, so each row's bytes depend on that row alone.
#pragma once

#include <cstdint>

#include "layers/dense.h"

namespace recur::model {

/// fla's FusedRMSNormGated (GLA, RetNet) and the Gated DeltaNet mixer's output: each row of
/// `width` floats normed in `groups` heads by `norm`, then times silu(gate) when `gate` is not
/// null (gate: rows x width, as o).
void norm_then_gate(const Norm& norm, float* o, const float* gate, int rows, int width,
                    int groups);

/// Qwen3.5's attention output gate: o *= sigmoid(gate), over n floats.
void sigmoid_gate(float* o, const float* gate, std::int64_t n);

}  // namespace recur::model
