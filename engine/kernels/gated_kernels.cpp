#include "kernels/gated_kernels.h"

#include <cmath>

#include "kernels/dispatch.h"
#include "recur/gla_recurrence.h"
#include "util/check.h"

namespace recur::kernels {

void gated_step_head(const GatedHeadView& h, const float* q, const float* k, const float* v,
                     const float* alpha, float gamma, float* out) {
  active().gated_step_head(h, q, k, v, alpha, gamma, out);
}

void gated_walk_head(const GatedHeadView& h, const float* qT, const float* kT, const float* aT,
                     float gamma, const float* v, std::int64_t vstride, float* out,
                     std::int64_t ostride, int n) {
  active().gated_walk_head(h, qT, kT, aT, gamma, v, vstride, out, ostride, n);
}

}  // namespace recur::kernels

namespace recur::gates {
namespace {
void check_n(const char* call, std::int64_t n) {
  if (n < 0) detail::throw_argument(call, "n is {}, expected >= 0", n);
}
}  // namespace

void gla_decay(const float* x, float* alpha, std::int64_t n, float normalizer, float clamp_min) {
  constexpr const char* call = "gates::gla_decay";
  check_n(call, n);
  if (!std::isfinite(normalizer) || normalizer <= 0.0f)
    detail::throw_argument(call, "normalizer is {}, expected a finite number > 0", normalizer);
  if (std::isnan(clamp_min) || clamp_min > 0.0f)
    detail::throw_argument(call, "clamp_min is {}, expected <= 0 (a log decay; none: -inf)",
                           clamp_min);
  if (n > 0) kernels::active().gla_decay(x, alpha, n, normalizer, clamp_min);
}

void hgrn2_gates(const float* x, const float* lower_bound, float* alpha, float* k,
                 std::int64_t n) {
  check_n("gates::hgrn2_gates", n);
  if (n > 0) kernels::active().hgrn2_gates(x, lower_bound, alpha, k, n);
}

void sigmoid(const float* x, float* y, std::int64_t n) {
  check_n("gates::sigmoid", n);
  if (n > 0) kernels::active().sigmoid(x, y, n);
}

void silu(const float* x, float* y, std::int64_t n) {
  check_n("gates::silu", n);
  if (n > 0) kernels::active().silu(x, y, n);
}

float retnet_decay(int head) {
  if (head < 0 || head > 1000)
    detail::throw_argument("gates::retnet_decay", "head is {}, expected 0 to 1000", head);
  // 1 - 2^(-5-h) is exact in double; the float rounds it (exactly for h <= 19, to 1 past 20).
  return static_cast<float>(1.0 - std::ldexp(1.0, -5 - head));
}

std::vector<float> retnet_decays(int n_heads) {
  if (n_heads < 0 || n_heads > 1000)
    detail::throw_argument("gates::retnet_decays", "n_heads is {}, expected 0 to 1000", n_heads);
  std::vector<float> out(static_cast<std::size_t>(n_heads));
  for (int h = 0; h < n_heads; ++h) out[static_cast<std::size_t>(h)] = retnet_decay(h);
  return out;
}

}  // namespace recur::gates
