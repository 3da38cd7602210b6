#include "support/model_reference.h"

#include <cmath>
#include <filesystem>
#include <stdexcept>

#include "models/linear/linear.h"
#include "recur/model.h"
#include "recur/safetensors.h"

namespace recur::testing {
namespace {

using models::linear::ModelFeatureMap;

using Mat = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Vec = Eigen::VectorXd;

class Weights {
 public:
  explicit Weights(const std::string& dir) : store_(TensorStore::open_dir(dir)) {}
  bool has(const std::string& name) const { return store_.contains(name); }
  Mat matrix(const std::string& name) const {
    const auto& info = store_.info(name);
    const auto v = store_.read(name);
    const Eigen::Index rows = info.shape[0], cols = info.shape.size() > 1 ? info.shape[1] : 1;
    Mat m(rows, cols);
    for (Eigen::Index i = 0; i < rows * cols; ++i) m.data()[i] = static_cast<double>(v[static_cast<std::size_t>(i)]);
    return m;
  }
  Vec vector(const std::string& name) const {
    const auto v = store_.read(name);
    Vec out(static_cast<Eigen::Index>(v.size()));
    for (std::size_t i = 0; i < v.size(); ++i) out[static_cast<Eigen::Index>(i)] = static_cast<double>(v[i]);
    return out;
  }

 private:
  TensorStore store_;
};

Mat rms_norm(const Mat& x, const Vec* w, double eps) {
  Mat y(x.rows(), x.cols());
  for (Eigen::Index r = 0; r < x.rows(); ++r) {
    const double rstd = 1.0 / std::sqrt(x.row(r).squaredNorm() / double(x.cols()) + eps);
    for (Eigen::Index i = 0; i < x.cols(); ++i) y(r, i) = x(r, i) * rstd * (w ? (*w)[i] : 1.0);
  }
  return y;
}

Mat layer_norm(const Mat& x, const Vec& w, const Vec& b, double eps) {
  Mat y(x.rows(), x.cols());
  for (Eigen::Index r = 0; r < x.rows(); ++r) {
    const double mean = x.row(r).mean();
    const double var = (x.row(r).array() - mean).square().mean();
    const double rstd = 1.0 / std::sqrt(var + eps);
    for (Eigen::Index i = 0; i < x.cols(); ++i) y(r, i) = (x(r, i) - mean) * rstd * w[i] + b[i];
  }
  return y;
}

// x W^T (+ b)
Mat linear(const Mat& x, const Mat& W, const Vec* b = nullptr) {
  Mat y = x * W.transpose();
  if (b) y.rowwise() += b->transpose();
  return y;
}

struct FeatureMapRef {
  ModelFeatureMap kind;
  Mat W1, W2;
  Vec b1, b2;
  bool norm_sum = false;

  Vec operator()(const Vec& x) const {
    const Eigen::Index d = x.size();
    Vec out;
    switch (kind) {
      case ModelFeatureMap::kElu:
        out = x.unaryExpr([](double v) { return v > 0 ? v + 1.0 : std::exp(v); });
        break;
      case ModelFeatureMap::kRelu:
        out = x.cwiseMax(0.0);
        break;
      case ModelFeatureMap::kIdentity:
        out = x;
        break;
      case ModelFeatureMap::kT2R:
        out = (W1 * x).cwiseMax(0.0);
        break;
      case ModelFeatureMap::kElementwiseProduct:
        out = (W1 * x + b1).cwiseProduct(W2 * x + b2);
        break;
      case ModelFeatureMap::kHedgehog: {
        const Vec z = W1 * x + b1;
        Vec e(2 * d);
        e << 2.0 * z, -2.0 * z;
        const double m = e.maxCoeff();
        e = (e.array() - m).exp();
        out = e / e.sum();
        break;
      }
      case ModelFeatureMap::kDpfp: {
        Vec t(2 * d);
        t << x.cwiseMax(0.0), (-x).cwiseMax(0.0);
        const Eigen::Index n = 2 * d;
        out.resize(4 * n);
        for (int j = 1; j <= 4; ++j)
          for (Eigen::Index i = 0; i < n; ++i) out[(j - 1) * n + i] = t[i] * t[((i - j) % n + n) % n];
        break;
      }
    }
    if (norm_sum) out /= (out.sum() + 1e-4);
    return out;
  }
};

FeatureMapRef load_map(const Weights& w, const models::linear::LinearConfig& c,
                       const std::string& prefix, bool norm_sum) {
  FeatureMapRef f;
  f.kind = c.feature_map;
  f.norm_sum = norm_sum;
  if (c.feature_map == ModelFeatureMap::kHedgehog) {
    f.W1 = w.matrix(prefix + "layer.weight");
    f.b1 = w.vector(prefix + "layer.bias");
  } else if (c.feature_map == ModelFeatureMap::kT2R) {
    f.W1 = w.matrix(prefix + "layer.weight");
  } else if (c.feature_map == ModelFeatureMap::kElementwiseProduct) {
    f.W1 = w.matrix(prefix + "layer1.weight");
    f.b1 = w.vector(prefix + "layer1.bias");
    f.W2 = w.matrix(prefix + "layer2.weight");
    f.b2 = w.vector(prefix + "layer2.bias");
  }
  return f;
}

}  // namespace

RowMatrixD reference_logits(const std::string& dir, const std::vector<int>& tokens) {
  const ModelConfig c = ModelConfig::from_file((std::filesystem::path(dir) / "config.json").string());
  const models::linear::LinearConfig& lc = models::linear::config_of(c);
  const Weights w(dir);
  const auto T = static_cast<Eigen::Index>(tokens.size());
  const Mat E = w.matrix("model.embeddings.weight");
  Mat x(T, c.hidden_size);
  for (Eigen::Index t = 0; t < T; ++t) x.row(t) = E.row(tokens[static_cast<std::size_t>(t)]);
  const bool fla = c.architecture == Architecture::kLinearAttn;
  const int H = c.num_heads, dk = lc.head_k_dim, dv = lc.head_v_dim, G = lc.kv_groups;

  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    Mat h = x;
    if (fla) {
      const Vec wn = w.vector(p + "attn_norm.weight");
      h = rms_norm(x, &wn, c.norm_eps);
    }
    Mat Q, K, V;
    if (fla) {
      Q = linear(h, w.matrix(p + "attn.q_proj.weight"));
      K = linear(h, w.matrix(p + "attn.k_proj.weight"));
      V = linear(h, w.matrix(p + "attn.v_proj.weight"));
    } else {
      const Vec bq = w.vector(p + "attn.q_proj.bias"), bk = w.vector(p + "attn.k_proj.bias"),
                bv = w.vector(p + "attn.v_proj.bias");
      Q = linear(h, w.matrix(p + "attn.q_proj.weight"), &bq);
      K = linear(h, w.matrix(p + "attn.k_proj.weight"), &bk);
      V = linear(h, w.matrix(p + "attn.v_proj.weight"), &bv);
    }
    std::string q_prefix = p + "attn.feature_map_q.", k_prefix = p + "attn.feature_map_k.";
    if (lc.tie_feature_map_qk) {
      const bool q_stored = w.has(q_prefix + "layer.weight") || w.has(q_prefix + "layer1.weight");
      if (!q_stored) q_prefix = k_prefix;
      k_prefix = q_prefix;
    }
    const FeatureMapRef phi_q = load_map(w, lc, q_prefix, lc.norm_q);
    const FeatureMapRef phi_k = load_map(w, lc, k_prefix, lc.norm_k);
    const double s = fla ? 1.0 / std::sqrt(double(lc.d_feature)) : 1.0;
    Mat O(T, lc.value_dim);
    for (int head = 0; head < H; ++head) {
      const int kvh = head / G;
      std::vector<Vec> fq(static_cast<std::size_t>(T)), fk(static_cast<std::size_t>(T));
      for (Eigen::Index t = 0; t < T; ++t) {
        fq[static_cast<std::size_t>(t)] = s * phi_q(Q.row(t).segment(head * dk, dk).transpose());
        fk[static_cast<std::size_t>(t)] = phi_k(K.row(t).segment(kvh * dk, dk).transpose());
      }
      for (Eigen::Index t = 0; t < T; ++t) {
        Vec num = Vec::Zero(dv);
        double den = 0.0;
        for (Eigen::Index u = 0; u <= t; ++u) {
          const double a = fq[static_cast<std::size_t>(t)].dot(fk[static_cast<std::size_t>(u)]);
          num += a * V.row(u).segment(kvh * dv, dv).transpose();
          den += a;
        }
        Vec o = lc.norm_feature_map ? Vec(num / (den + lc.attn_eps)) : num;
        if (fla) {
          const double rstd = 1.0 / std::sqrt(o.squaredNorm() / double(dv) + c.norm_eps);
          o *= rstd;
          if (lc.elementwise_affine) o = o.cwiseProduct(w.vector(p + "attn.norm.weight"));
        }
        O.row(t).segment(head * dv, dv) = o.transpose();
      }
    }
    if (fla) {
      x += linear(O, w.matrix(p + "attn.o_proj.weight"));
      const Vec wn = w.vector(p + "mlp_norm.weight");
      const Mat hm = rms_norm(x, &wn, c.norm_eps);
      const Mat g = linear(hm, w.matrix(p + "mlp.gate_proj.weight"));
      const Mat u = linear(hm, w.matrix(p + "mlp.up_proj.weight"));
      const Mat a = g.unaryExpr([](double v) { return v / (1.0 + std::exp(-v)); }).cwiseProduct(u);
      x += linear(a, w.matrix(p + "mlp.down_proj.weight"));
    } else {
      const Vec bo = w.vector(p + "attn.o_proj.bias");
      x = layer_norm(x + linear(O, w.matrix(p + "attn.o_proj.weight"), &bo),
                     w.vector(p + "attn_norm.weight"), w.vector(p + "attn_norm.bias"), c.norm_eps);
      const Vec b1 = w.vector(p + "mlp.fc1.bias"), b2 = w.vector(p + "mlp.fc2.bias");
      Mat a = linear(x, w.matrix(p + "mlp.fc1.weight"), &b1);
      if (lc.hidden_act == "gelu")
        a = a.unaryExpr([](double v) { return 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0))); });
      else
        a = a.cwiseMax(0.0);
      x = layer_norm(x + linear(a, w.matrix(p + "mlp.fc2.weight"), &b2),
                     w.vector(p + "mlp_norm.weight"), w.vector(p + "mlp_norm.bias"), c.norm_eps);
    }
  }
  if (fla) {
    const Vec wn = w.vector("model.norm.weight");
    x = rms_norm(x, &wn, c.norm_eps);
  }
  const Mat head = c.tie_word_embeddings ? E : w.matrix("lm_head.weight");
  return linear(x, head);
}

double relative_error(const RowMatrixD& a, const RowMatrixD& b) {
  const double scale = b.cwiseAbs().maxCoeff();
  return scale > 0 ? (a - b).cwiseAbs().maxCoeff() / scale : (a - b).cwiseAbs().maxCoeff();
}

}  // namespace recur::testing
