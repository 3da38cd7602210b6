#include "kernels/linear_kernels.h"

#include "kernels/dispatch.h"

namespace recur::kernels {

void step_head(const HeadView& h, const float* q, const float* k, const float* v, float* out,
               bool normalized, float eps, std::int64_t pos) {
  active().step_head(h, q, k, v, out, normalized, eps, pos);
}

void walk_head(const HeadView& h, const float* qT, float* kT, const float* v,
               std::int64_t vstride, float* out, std::int64_t ostride, int n, bool normalized,
               float eps, std::int64_t pos0) {
  active().walk_head(h, qT, kT, v, vstride, out, ostride, n, normalized, eps, pos0);
}

}  // namespace recur::kernels
