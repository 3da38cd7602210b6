// The dense blocks every layer is made of (engine/layers/): a torch Linear, RMSNorm and
// LayerNorm, and the elementwise activations; each a pure function of one row, so a token's
// result never depends on which other tokens share the call and decode and prefill agree to the
// bit.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <vector>

#include "kernels/matmul.h"
#include "recur/model.h"

namespace recur::model {

/// A torch Linear: y = x W^T (+ b).
struct Dense {
  kernels::PackedMatrix w;
  std::vector<float> bias;  // empty: none

  int n_out() const { return w.n_out(); }
  void apply(const float* X, std::int64_t rows, std::int64_t ldx, float* Y, std::int64_t ldy,
             int threads) const;
};

/// One Dense's product in a fused job (apply_all): Y (rows, n_out; stride ldy) = X W^T (+ b).
struct DenseCall {
  const Dense* dense;
  const float* X;
  std::int64_t rows, ldx;
  float* Y;
  std::int64_t ldy;
};

/// Several Denses as one job over the threads (kernels::multiply_all: the threads meet once,
/// the work split by bytes of weights), then their biases: each output the bytes of its own
/// apply(). At most kernels::kMaxProducts calls.
void apply_all(const DenseCall* calls, int n, int threads);
inline void apply_all(std::initializer_list<DenseCall> calls, int threads) {
  apply_all(calls.begin(), static_cast<int>(calls.size()), threads);
}

/// RMSNorm (x * rstd * w) or LayerNorm ((x - mean) * rstd * w + b) over `dim` features.
struct Norm {
  bool layer_norm = false;
  int dim = 0;
  float eps = 1e-6f;
  std::vector<float> weight;  // empty: none
  std::vector<float> bias;    // empty: none

  /// Normalises each group of `dim` consecutive floats of `rows` rows (row strides ldx, ldy);
  /// `groups` groups per row (per-head norms). In place when x == y.
  void apply(const float* x, std::int64_t rows, std::int64_t ldx, float* y, std::int64_t ldy,
             int groups = 1) const;
};

/// Bytes of a Dense's weights and bias (what one decode step reads of it).
inline std::size_t dense_bytes(const Dense& d) { return d.w.bytes() + d.bias.size() * sizeof(float); }

/// out[i] = g[i] * sigmoid(g[i]) * u[i] (swish-gated linear unit).
void swiglu(const float* g, const float* u, float* out, std::int64_t n);
/// In place: max(x, 0).
void relu_inplace(float* x, std::int64_t n);
/// In place: x * Phi(x), with the exact (erf) form.
void gelu_inplace(float* x, std::int64_t n);
/// y[i] += x[i].
void add_inplace(float* y, const float* x, std::int64_t n);

}  // namespace recur::model
