#include "kernels/delta_kernels.h"

#include "kernels/dispatch.h"
#include "util/check.h"

namespace recur::kernels {
namespace {

constexpr const char* kCall = "kernels::delta_walk_head";

void check_input(const char* name, const float* p, std::int64_t stride) {
  if (p == nullptr) detail::throw_argument(kCall, "{} is null", name);
  if (stride < 0) detail::throw_argument(kCall, "{}_stride is {}, expected >= 0", name, stride);
}

}  // namespace

void delta_walk_head(const DeltaHeadView& h, const DeltaInputs& x, float* y,
                     std::int64_t y_stride, int n) {
  if (h.d_k <= 0 || h.d_k % kDeltaChains != 0 || h.d_k > kDeltaMaxDim)
    detail::throw_shape(kCall,
                        "d_k is {} (with d_v {}), expected a positive multiple of {} up to {}: "
                        "the dot products run as {} interleaved chains",
                        h.d_k, h.d_v, kDeltaChains, kDeltaMaxDim, kDeltaChains);
  if (h.d_v <= 0 || h.d_v > kDeltaMaxDim)
    detail::throw_shape(kCall, "d_v is {} (with d_k {}), expected 1 to {}", h.d_v, h.d_k,
                        kDeltaMaxDim);
  if (n < 0) detail::throw_argument(kCall, "n is {}, expected >= 0", n);
  if (h.S == nullptr) detail::throw_argument(kCall, "S is null");
  if (y == nullptr) detail::throw_argument(kCall, "y is null");
  check_input("w", x.w, x.w_stride);
  check_input("a", x.a, x.a_stride);
  check_input("b", x.b, x.b_stride);
  check_input("k", x.k, x.k_stride);
  check_input("r", x.r, x.r_stride);
  check_input("v", x.v, x.v_stride);
  // Rows of y that overlap would make a token's output depend on the next one's.
  if (n > 1 && y_stride < h.d_v)
    detail::throw_argument(kCall, "y_stride is {}, expected at least d_v = {} for {} tokens",
                           y_stride, h.d_v, n);
  if (n > 0) active().delta_walk_head(h, x, y, y_stride, n);
}

}  // namespace recur::kernels
