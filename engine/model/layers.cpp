#include "model/layers.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/simd.h"

namespace recur::model {
namespace {

using kernels::F8;
using kernels::kLanes;

// Applies op to n floats, eight at a time; the tail goes through the same vector code on a
// zero-padded copy. Every op here is per lane, so a value's result does not depend on where it
// sits.
template <class Op>
void map8(const float* x, float* y, std::int64_t n, const Op& op) {
  std::int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) kernels::store8(y + i, op(kernels::load8(x + i)));
  if (i < n) {
    float tmp[kLanes] = {};
    const auto rest = static_cast<std::size_t>(n - i);
    std::memcpy(tmp, x + i, sizeof(float) * rest);
    kernels::store8(tmp, op(kernels::load8(tmp)));
    std::memcpy(y + i, tmp, sizeof(float) * rest);
  }
}

// Loads up to eight floats, zero-filling past n.
F8 load_partial(const float* x, int n) {
  float tmp[kLanes] = {};
  std::memcpy(tmp, x, sizeof(float) * static_cast<std::size_t>(n));
  return kernels::load8(tmp);
}

// Sum of x[0..n) in the fixed order: eight lane chains, then hsum8's tree.
float sum_fixed(const float* x, int n) {
  F8 acc = kernels::zero8();
  int i = 0;
  for (; i + kLanes <= n; i += kLanes) acc = kernels::add8(acc, kernels::load8(x + i));
  if (i < n) acc = kernels::add8(acc, load_partial(x + i, n - i));
  return kernels::hsum8(acc);
}

// Sum of (x[i] - c)^2 in the same order.
float sum_squares_fixed(const float* x, int n, float c) {
  const F8 cv = kernels::broadcast8(c);
  F8 acc = kernels::zero8();
  int i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    const F8 d = kernels::sub8(kernels::load8(x + i), cv);
    acc = kernels::fma8(d, d, acc);
  }
  if (i < n) {
    float tmp[kLanes];
    for (int l = 0; l < kLanes; ++l) tmp[l] = c;  // pads to zero after subtracting c
    std::memcpy(tmp, x + i, sizeof(float) * static_cast<std::size_t>(n - i));
    const F8 d = kernels::sub8(kernels::load8(tmp), cv);
    acc = kernels::fma8(d, d, acc);
  }
  return kernels::hsum8(acc);
}

F8 sigmoid8(F8 x) {
  const F8 one = kernels::broadcast8(1.0f);
  return kernels::div8(one, kernels::add8(one, kernels::exp8(kernels::sub8(kernels::zero8(), x))));
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
        map8(o, o, D, [m](F8 v) { return kernels::exp8(kernels::sub8(v, kernels::broadcast8(m))); });
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
  std::int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    const F8 gv = kernels::load8(g + i);
    kernels::store8(out + i, kernels::mul8(kernels::mul8(gv, sigmoid8(gv)), kernels::load8(u + i)));
  }
  if (i < n) {
    const int rest = static_cast<int>(n - i);
    const F8 gv = load_partial(g + i, rest);
    float ot[kLanes];
    kernels::store8(ot, kernels::mul8(kernels::mul8(gv, sigmoid8(gv)), load_partial(u + i, rest)));
    std::memcpy(out + i, ot, sizeof(float) * static_cast<std::size_t>(rest));
  }
}

void relu_inplace(float* x, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) x[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

void gelu_inplace(float* x, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i)
    x[i] = 0.5f * x[i] * (1.0f + std::erf(x[i] * 0.70710678118654752f));
}

void add_inplace(float* y, const float* x, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) y[i] += x[i];
}

}  // namespace recur::model
