// The MLPs of a pre-norm block (engine/layers/): the SwiGLU MLP every family with one runs.
#pragma once

#include "layers/dense.h"

namespace recur::model {

/// The SwiGLU MLP of a pre-norm block, as every family with one runs it:
/// x += down(silu(gate(norm(x))) * up(norm(x))), over n rows of width d. h (n, d), g and u
/// (n, gate's width) and a (n, d) are scratch. Falcon-H1's muP multipliers scale the gate's
/// output before silu and down's output before the sum (1: no multiply).
void swiglu_mlp(const Norm& norm, const Dense& gate, const Dense& up, const Dense& down, float* x,
                float* h, float* g, float* u, float* a, int n, int d, int threads,
                float gate_multiplier = 1.0f, float down_multiplier = 1.0f);

}  // namespace recur::model
