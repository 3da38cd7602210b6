// float64 references for the tests: the quadratic (attention-matrix) form, O(T^2), and the
// recurrence. Both apply the layer's own feature map in float64 (FeatureMap::apply_reference).
#pragma once

#include <Eigen/Core>
#include <random>

#include "recur/linear_attention.h"

namespace recur::testing {

/// O = causal linear attention of (Q, K, V) computed as masked (phi(Q) phi(K)^T) V in float64.
RowMatrixD quadratic_reference(const LinearAttention& layer, const RowMatrix& Q,
                               const RowMatrix& K, const RowMatrix& V);

/// The recurrence in float64, one token at a time.
class RecurrenceReference {
 public:
  explicit RecurrenceReference(const LinearAttention& layer);
  /// One token; returns o (n_heads * d_value).
  Eigen::VectorXd step(const Eigen::VectorXf& q, const Eigen::VectorXf& k,
                       const Eigen::VectorXf& v);

 private:
  const LinearAttention& layer_;
  std::vector<Eigen::MatrixXd> S_;  // per head (d_feature, d_value)
  std::vector<Eigen::VectorXd> Z_;  // per head (d_feature)
  Eigen::VectorXd qf_, kf_;         // (d_feature) scratch
};

/// Q, K with standard normal entries and V uniform in [v_mean - 1, v_mean + 1].
struct Inputs {
  RowMatrix Q, K, V;
};
Inputs random_inputs(const LinearAttention& layer, Eigen::Index T, std::uint32_t seed,
                     float v_mean = 0.0f);

/// max |a - b| / max |b| (0 when both are empty).
double relative_error(const RowMatrix& a, const RowMatrixD& b);

}  // namespace recur::testing
