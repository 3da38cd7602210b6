#include "support/reference.h"

#include <cmath>

namespace recur::testing {
namespace {

// phi of one head's rows in float64, scaled by `scale`: (rows, d_feature).
Eigen::MatrixXd map_rows(const LinearAttention& layer, const RowMatrix& X, int head,
                         double scale) {
  const int dk = layer.config().d_key;
  const Eigen::Index T = X.rows();
  RowMatrixD in = X.middleCols(Eigen::Index(head) * dk, dk).cast<double>();
  RowMatrixD out(T, layer.d_feature());
  layer.feature_map().apply_reference(in.data(), T, dk, dk, out.data(), layer.d_feature());
  return out * scale;
}

}  // namespace

RowMatrixD quadratic_reference(const LinearAttention& layer, const RowMatrix& Q,
                               const RowMatrix& K, const RowMatrix& V) {
  const auto& c = layer.config();
  const Eigen::Index T = Q.rows();
  RowMatrixD O(T, Eigen::Index(c.n_heads) * c.d_value);
  for (int h = 0; h < c.n_heads; ++h) {
    const Eigen::MatrixXd q = map_rows(layer, Q, h, static_cast<double>(layer.scale()));
    const Eigen::MatrixXd k = map_rows(layer, K, h, 1.0);
    const Eigen::MatrixXd v = V.middleCols(Eigen::Index(h) * c.d_value, c.d_value).cast<double>();
    Eigen::MatrixXd A = q * k.transpose();  // (T, T)
    A.triangularView<Eigen::StrictlyUpper>().setZero();
    Eigen::MatrixXd o = A * v;
    if (c.normalized) {
      const Eigen::VectorXd den = A.rowwise().sum().array() + double(c.eps);
      o = o.array().colwise() / den.array();
    }
    O.middleCols(Eigen::Index(h) * c.d_value, c.d_value) = o;
  }
  return O;
}

RecurrenceReference::RecurrenceReference(const LinearAttention& layer) : layer_(layer) {
  const auto& c = layer.config();
  S_.assign(static_cast<std::size_t>(c.n_heads), Eigen::MatrixXd::Zero(layer.d_feature(), c.d_value));
  Z_.assign(static_cast<std::size_t>(c.n_heads), Eigen::VectorXd::Zero(layer.d_feature()));
  qf_.resize(layer.d_feature());
  kf_.resize(layer.d_feature());
}

Eigen::VectorXd RecurrenceReference::step(const Eigen::VectorXf& q, const Eigen::VectorXf& k,
                                          const Eigen::VectorXf& v) {
  const auto& c = layer_.config();
  const int dk = c.d_key, dv = c.d_value;
  Eigen::VectorXd o(Eigen::Index(c.n_heads) * dv);
  for (int h = 0; h < c.n_heads; ++h) {
    const Eigen::VectorXd qh = q.segment(Eigen::Index(h) * dk, dk).cast<double>();
    const Eigen::VectorXd kh = k.segment(Eigen::Index(h) * dk, dk).cast<double>();
    const Eigen::VectorXd vh = v.segment(Eigen::Index(h) * dv, dv).cast<double>();
    layer_.feature_map().apply_reference(qh.data(), 1, dk, dk, qf_.data(), layer_.d_feature());
    layer_.feature_map().apply_reference(kh.data(), 1, dk, dk, kf_.data(), layer_.d_feature());
    qf_ *= double(layer_.scale());
    auto& S = S_[static_cast<std::size_t>(h)];
    auto& Z = Z_[static_cast<std::size_t>(h)];
    S.noalias() += kf_ * vh.transpose();
    Z += kf_;
    Eigen::VectorXd oh = S.transpose() * qf_;
    if (c.normalized) oh /= Z.dot(qf_) + double(c.eps);
    o.segment(Eigen::Index(h) * dv, dv) = oh;
  }
  return o;
}

Inputs random_inputs(const LinearAttention& layer, Eigen::Index T, std::uint32_t seed,
                     float v_mean) {
  const auto& c = layer.config();
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> uniform(v_mean - 1.0f, v_mean + 1.0f);
  Inputs in;
  in.Q.resize(T, Eigen::Index(c.n_heads) * c.d_key);
  in.K.resize(T, Eigen::Index(c.n_heads) * c.d_key);
  in.V.resize(T, Eigen::Index(c.n_heads) * c.d_value);
  for (Eigen::Index i = 0; i < in.Q.size(); ++i) in.Q.data()[i] = normal(rng);
  for (Eigen::Index i = 0; i < in.K.size(); ++i) in.K.data()[i] = normal(rng);
  for (Eigen::Index i = 0; i < in.V.size(); ++i) in.V.data()[i] = uniform(rng);
  return in;
}

double relative_error(const RowMatrix& a, const RowMatrixD& b) {
  if (b.size() == 0) return 0.0;
  const double scale = b.cwiseAbs().maxCoeff();
  const double diff = (a.cast<double>() - b).cwiseAbs().maxCoeff();
  return scale > 0 ? diff / scale : diff;
}

}  // namespace recur::testing
