#include "layers/dense.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/dispatch.h"

namespace recur::model {
namespace {

// The canonical sums (engine/kernels/ops-inl.h, SumChains): the same order on every target.
float sum_fixed(const float* x, int n) { return kernels::active().sum(x, n); }
float sum_squares_fixed(const float* x, int n, float c) {
  return kernels::active().sum_squares(x, n, c);
}

}  // namespace

void Dense::apply(const float* X, std::int64_t rows, std::int64_t ldx, float* Y,
                  std::int64_t ldy, int threads) const {
  w.multiply(X, rows, ldx, Y, ldy, threads);
  if (bias.empty()) return;
  const int n = w.n_out();
  for (std::int64_t r = 0; r < rows; ++r) add_inplace(Y + r * ldy, bias.data(), n);
}

void apply_all(const DenseCall* calls, int n, int threads) {
  kernels::Product products[kernels::kMaxProducts] = {};
  for (int j = 0; j < n; ++j) {
    const DenseCall& c = calls[j];
    products[j] = kernels::Product{&c.dense->w, c.X, c.rows, c.ldx, c.Y, c.ldy};
  }
  kernels::multiply_all(products, n, threads);
  for (int j = 0; j < n; ++j) {
    const DenseCall& c = calls[j];
    if (c.dense->bias.empty()) continue;
    for (std::int64_t r = 0; r < c.rows; ++r)
      add_inplace(c.Y + r * c.ldy, c.dense->bias.data(), c.dense->n_out());
  }
}

void Norm::apply(const float* x, std::int64_t rows, std::int64_t ldx, float* y,
                 std::int64_t ldy, int groups) const {
  for (std::int64_t r = 0; r < rows; ++r) {
    for (int g = 0; g < groups; ++g) {
      const float* xr = x + r * ldx + std::int64_t(g) * dim;
      float* yr = y + r * ldy + std::int64_t(g) * dim;
      const float inv_dim = 1.0f / static_cast<float>(dim);
      float mean = 0.0f;
      if (layer_norm) mean = sum_fixed(xr, dim) * inv_dim;
      const float var = sum_squares_fixed(xr, dim, mean) * inv_dim;
      const float rstd = 1.0f / std::sqrt(var + eps);
      for (int i = 0; i < dim; ++i) {
        float v = (layer_norm ? xr[i] - mean : xr[i]) * rstd;
        if (!weight.empty()) v *= weight[static_cast<std::size_t>(i)];
        if (!bias.empty()) v += bias[static_cast<std::size_t>(i)];
        yr[i] = v;
      }
    }
  }
}

void swiglu(const float* g, const float* u, float* out, std::int64_t n) {
  kernels::active().swiglu(g, u, out, n);
}

void relu_inplace(float* x, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) x[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

void gelu_inplace(float* x, std::int64_t n) { kernels::active().gelu(x, x, n); }

void add_inplace(float* y, const float* x, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) y[i] += x[i];
}

}  // namespace recur::model
