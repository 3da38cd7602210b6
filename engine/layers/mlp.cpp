#include "layers/mlp.h"

#include <cstdint>

namespace recur::model {

void swiglu_mlp(const Norm& norm, const Dense& gate, const Dense& up, const Dense& down, float* x,
                float* h, float* g, float* u, float* a, int n, int d, int threads,
                float gate_multiplier, float down_multiplier) {
  const int width = gate.n_out();
  const std::int64_t gates = std::int64_t(n) * width, outs = std::int64_t(n) * d;
  norm.apply(x, n, d, h, d);
  apply_all({{&gate, h, n, d, g, width}, {&up, h, n, d, u, width}}, threads);
  if (gate_multiplier != 1.0f)
    for (std::int64_t i = 0; i < gates; ++i) g[i] *= gate_multiplier;
  swiglu(g, u, g, gates);
  down.apply(g, n, width, a, d, threads);
  if (down_multiplier != 1.0f)
    for (std::int64_t i = 0; i < outs; ++i) a[i] *= down_multiplier;
  add_inplace(x, a, outs);
}

}  // namespace recur::model
