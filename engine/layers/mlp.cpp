#include "layers/mlp.h"

#include <cstdint>

namespace recur::model {

void swiglu_mlp(const Norm& norm, const Dense& gate, const Dense& up, const Dense& down, float* x,
                float* h, float* g, float* u, float* a, int n, int d, int threads) {
  const int width = gate.n_out();
  norm.apply(x, n, d, h, d);
  apply_all({{&gate, h, n, d, g, width}, {&up, h, n, d, u, width}}, threads);
  swiglu(g, u, g, std::int64_t(n) * width);
  down.apply(g, n, width, a, d, threads);
  add_inplace(x, a, std::int64_t(n) * d);
}

}  // namespace recur::model
