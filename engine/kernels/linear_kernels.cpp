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

bool gather_tiles(const float* x, std::int64_t ldx, int n, int n_heads, int d, InputMap map,
                  float scale, float* tiles, std::int64_t head_stride, int Dp,
                  const RowsAhead& ahead) {
  return active().gather_tiles(x, ldx, n, n_heads, d, map, scale, tiles, head_stride, Dp, ahead);
}

}  // namespace recur::kernels
