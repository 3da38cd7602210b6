#include "layers/sequence.h"

#include "recur/types.h"

namespace recur::model {

void attend(const CausalAttention& attention, CausalState& state, const float* q, const float* k,
            const float* v, float* o, int count, int threads) {
  const CausalAttentionConfig& c = attention.config();
  const int hd = c.n_heads * c.d_head, kv = c.n_kv_heads * c.d_head;  // the constructor resolved 0
  if (count == 1) {
    Eigen::Map<Eigen::VectorXf> out(o, hd);
    attention.step(state, Eigen::Map<const Eigen::VectorXf>(q, hd),
                   Eigen::Map<const Eigen::VectorXf>(k, kv), Eigen::Map<const Eigen::VectorXf>(v, kv),
                   out, threads);
    return;
  }
  using CMap = Eigen::Map<const RowMatrix>;
  Eigen::Map<RowMatrix> O(o, count, hd);
  attention.prefill(state, CMap(q, count, hd), CMap(k, count, kv), CMap(v, count, kv), O,
                    PrefillOptions{count, threads});
}

void convolve(const ShortConvolution& conv, ShortConvState& state, const float* x, float* y,
              int count, int stride, int y_stride) {
  const int ch = conv.channels();
  if (count == 1) {
    Eigen::Map<Eigen::VectorXf> out(y, ch);
    conv.step(state, Eigen::Map<const Eigen::VectorXf>(x, ch), out);
    return;
  }
  const Eigen::OuterStride<> rows(stride > 0 ? stride : ch);
  const Eigen::OuterStride<> y_rows(y_stride > 0 ? y_stride : rows.outer());
  Eigen::Map<RowMatrix, 0, Eigen::OuterStride<>> Y(y, count, ch, y_rows);
  conv.prefill(state, Eigen::Map<const RowMatrix, 0, Eigen::OuterStride<>>(x, count, ch, rows), Y);
}

}  // namespace recur::model
