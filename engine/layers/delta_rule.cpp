#include "layers/delta_rule.h"

namespace recur::model {

void DeltaRuleMixer::walk_heads(float* S, const kernels::DeltaInputs& x, float* y,
                                std::int64_t y_stride, int count, int begin, int end) const {
  for (int h = begin; h < end; ++h) {
    const auto own_k = std::size_t(h) * std::size_t(d_k);
    const auto key_head = std::size_t(h / group) * std::size_t(d_k);
    const auto own_v = std::size_t(h) * std::size_t(d_v);
    const kernels::DeltaHeadView view{S + own_v * std::size_t(d_k), d_k, d_v};
    kernels::DeltaInputs head = x;
    head.w += decay_per_token ? std::size_t(h) : own_k;
    head.a += key_head;
    head.b += own_k;
    head.k += key_head;
    head.r += key_head;
    head.v += own_v;
    kernels::delta_walk_head(view, head, y + own_v, y_stride, count);
  }
}

}  // namespace recur::model
