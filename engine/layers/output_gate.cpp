#include "layers/output_gate.h"

#include <cmath>

namespace recur::model {

void norm_then_gate(const Norm& norm, float* o, const float* gate, int rows, int width,
                    int groups) {
  norm.apply(o, rows, width, o, width, groups);
  // norm(o) * silu(gate) is the swish-gated unit with the gate as its gate.
  if (gate) swiglu(gate, o, o, std::int64_t(rows) * width);
}

void sigmoid_gate(float* o, const float* gate, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) o[i] *= 1.0f / (1.0f + std::exp(-gate[i]));
}

}  // namespace recur::model
