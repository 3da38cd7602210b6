#include "model/layers.h"

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

std::size_t QKFeatureMap::scratch_floats(std::int64_t rows) const {
  switch (kind) {
    case ModelFeatureMap::kHedgehog:
    case ModelFeatureMap::kT2R:
      return static_cast<std::size_t>(rows) * static_cast<std::size_t>(d_key);
    case ModelFeatureMap::kElementwiseProduct:
      return 2 * static_cast<std::size_t>(rows) * static_cast<std::size_t>(d_key);
    case ModelFeatureMap::kDpfp:
      return 2 * static_cast<std::size_t>(d_key);
    default:
      return 0;
  }
}

void QKFeatureMap::apply(const float* x, std::int64_t rows, float* out, float* scratch) const {
  const int dk = d_key, D = d_feature;
  switch (kind) {
    case ModelFeatureMap::kElu:
    case ModelFeatureMap::kRelu:
    case ModelFeatureMap::kIdentity:
      simple->apply(x, rows, dk, dk, out, D);
      break;
    case ModelFeatureMap::kT2R:
      // relu(x W^T): a learned projection, then relu.
      l1.apply(x, rows, dk, out, D, 1);
      relu_inplace(out, rows * D);
      break;
    case ModelFeatureMap::kElementwiseProduct: {
      // (x W1^T + b1) * (x W2^T + b2): not positive, like the library's map.
      float* a = scratch;
      float* b = scratch + static_cast<std::size_t>(rows) * static_cast<std::size_t>(dk);
      l1.apply(x, rows, dk, a, dk, 1);
      l2.apply(x, rows, dk, b, dk, 1);
      for (std::int64_t i = 0; i < rows * dk; ++i) out[i] = a[i] * b[i];
      break;
    }
    case ModelFeatureMap::kHedgehog: {
      // softmax over [2z, -2z] with z = x W^T + b.
      float* z = scratch;
      l1.apply(x, rows, dk, z, dk, 1);
      for (std::int64_t r = 0; r < rows; ++r) {
        const float* zr = z + r * dk;
        float* o = out + r * D;
        float m = -INFINITY;
        for (int i = 0; i < dk; ++i) {
          o[i] = 2.0f * zr[i];
          o[dk + i] = -2.0f * zr[i];
          m = std::max(m, std::abs(o[i]));
        }
        kernels::active().exp_minus(o, o, D, m);
        const float inv = 1.0f / sum_fixed(o, D);
        for (int i = 0; i < D; ++i) o[i] *= inv;
      }
      break;
    }
    case ModelFeatureMap::kDpfp: {
      // [relu(x), relu(-x)] (2 dk values), then its products with itself rolled by 1..4 places:
      // block j-1 of the output is t * roll(t, j), roll(t, j)[i] = t[(i - j) mod 2 dk].
      const int n2 = 2 * dk;
      float* t = scratch;
      for (std::int64_t r = 0; r < rows; ++r) {
        const float* xr = x + r * dk;
        float* o = out + r * D;
        for (int i = 0; i < dk; ++i) {
          t[i] = std::max(xr[i], 0.0f);
          t[dk + i] = std::max(-xr[i], 0.0f);
        }
        for (int j = 1; j <= 4; ++j)
          for (int i = 0; i < n2; ++i) o[(j - 1) * n2 + i] = t[i] * t[((i - j) % n2 + n2) % n2];
      }
      break;
    }
  }
  if (normalize_sum) {
    for (std::int64_t r = 0; r < rows; ++r) {
      float* o = out + r * D;
      float s = 0.0f;
      for (int i = 0; i < D; ++i) s += o[i];
      const float denom = s + 1e-4f;
      for (int i = 0; i < D; ++i) o[i] /= denom;
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
