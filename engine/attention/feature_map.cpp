#include "recur/feature_map.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include <utility>
#include <vector>

#include "attention/input_map.h"
#include "kernels/dispatch.h"
#include "kernels/matmul.h"
#include "util/check.h"

namespace recur {
namespace {

// An elementwise map through one of the dispatched kernels (kernels/dispatch.h): a row's tail goes
// through the same vector code on a zero-padded copy, so every element takes one path whatever
// its position.
template <class Op, class RefOp>
class ElementwiseMap final : public FeatureMap {
 public:
  explicit ElementwiseMap(const char* name) : name_(name) {}
  std::string name() const override { return name_; }
  int d_feature(int d_key) const override { return d_key; }

  void apply(const float* x, std::int64_t rows, std::int64_t x_stride, int d_key, float* out,
             std::int64_t out_stride) const override {
    const Op op;
    const kernels::Kernels& k = kernels::active();
    if (x_stride == d_key && out_stride == d_key) {  // one run of rows * d_key elements
      op(k, x, out, rows * d_key);
      return;
    }
    for (std::int64_t r = 0; r < rows; ++r) op(k, x + r * x_stride, out + r * out_stride, d_key);
  }

  void apply_reference(const double* x, std::int64_t rows, std::int64_t x_stride, int d_key,
                       double* out, std::int64_t out_stride) const override {
    const RefOp op;
    for (std::int64_t r = 0; r < rows; ++r)
      for (int i = 0; i < d_key; ++i) out[r * out_stride + i] = op(x[r * x_stride + i]);
  }

 private:
  const char* name_;
};

struct EluPlusOne {
  void operator()(const kernels::Kernels& k, const float* x, float* y, std::int64_t n) const {
    k.elu_plus_one(x, y, n);
  }
};
struct EluPlusOneRef {
  double operator()(double x) const { return x > 0 ? x + 1.0 : std::exp(x); }
};
struct Relu {
  void operator()(const kernels::Kernels& k, const float* x, float* y, std::int64_t n) const {
    k.relu(x, y, n);
  }
};
struct ReluRef {
  double operator()(double x) const { return x > 0 ? x : 0.0; }
};
struct Identity {
  void operator()(const kernels::Kernels&, const float* x, float* y, std::int64_t n) const {
    std::memmove(y, x, sizeof(float) * static_cast<std::size_t>(n));
  }
};
struct IdentityRef {
  double operator()(double x) const { return x; }
};

// Based's second-order Taylor map (TaylorExp in its linear_attention.py), one row at a time:
//   out[0] = 1,  out[1 + m] = x_m * c1,  out[1 + d + d m + n] = (x_m * x_n) * c2
// with c1 = float(1 / sqrt(sqrt(d))) and c2 = float(1 / (sqrt(2) sqrt(d))), both computed in
// double and rounded once. sqrt and division are correctly rounded IEEE operations, so the
// constants are the same bits on every machine, and every output is one or two float multiplies:
// plain code, the same bytes whatever the instruction set (the kernels' table is not involved).
// Based divides twice (by sqrt 2, then by sqrt d); one multiply by c2 differs from that by at most
// an ulp or two, well inside the float64 reference's tolerance.
class TaylorMap final : public FeatureMap {
 public:
  std::string name() const override { return "taylor"; }
  // Saturates rather than overflows: a caller checks the result against its own limit.
  int d_feature(int d_key) const override {
    const std::int64_t d = d_key;
    return static_cast<int>(std::min<std::int64_t>(1 + d + d * d, std::numeric_limits<int>::max()));
  }

  static float linear_scale(int d) {
    return static_cast<float>(1.0 / std::sqrt(std::sqrt(static_cast<double>(d))));
  }
  static float quadratic_scale(int d) {
    return static_cast<float>(1.0 / (std::sqrt(2.0) * std::sqrt(static_cast<double>(d))));
  }

  void apply(const float* x, std::int64_t rows, std::int64_t x_stride, int d_key, float* out,
             std::int64_t out_stride) const override {
    const float c1 = linear_scale(d_key), c2 = quadratic_scale(d_key);
    for (std::int64_t r = 0; r < rows; ++r) {
      const float* xr = x + r * x_stride;
      float* o = out + r * out_stride;
      o[0] = 1.0f;
      for (int m = 0; m < d_key; ++m) o[1 + m] = xr[m] * c1;
      float* o2 = o + 1 + d_key;
      for (int m = 0; m < d_key; ++m) {
        const float xm = xr[m];
        float* row = o2 + static_cast<std::int64_t>(m) * d_key;
        for (int n = 0; n < d_key; ++n) row[n] = (xm * xr[n]) * c2;
      }
    }
  }

  void apply_reference(const double* x, std::int64_t rows, std::int64_t x_stride, int d_key,
                       double* out, std::int64_t out_stride) const override {
    const double d = static_cast<double>(d_key);
    const double c1 = 1.0 / std::sqrt(std::sqrt(d)), c2 = 1.0 / (std::sqrt(2.0) * std::sqrt(d));
    for (std::int64_t r = 0; r < rows; ++r) {
      const double* xr = x + r * x_stride;
      double* o = out + r * out_stride;
      o[0] = 1.0;
      for (int m = 0; m < d_key; ++m) o[1 + m] = xr[m] * c1;
      for (int m = 0; m < d_key; ++m)
        for (int n = 0; n < d_key; ++n)
          o[1 + d_key + static_cast<std::int64_t>(m) * d_key + n] = xr[m] * xr[n] * c2;
    }
  }
};

// ---- The models' maps (flash-linear-attention's feature-map modules) ------------------------
//
// These were model::QKFeatureMap until they moved here; their arithmetic is unchanged, operation
// for operation, so that models give the same bytes as before (and as the committed digits).

// The canonical sum (engine/kernels/ops-inl.h, SumChains): the same order on every target.
float sum_fixed(const float* x, int n) { return kernels::active().sum(x, n); }

std::size_t usize(std::int64_t n) { return static_cast<std::size_t>(n); }

// A torch Linear(d_key, d_key): y = x W^T, then + b element by element (plain adds, in order).
// The float weights are kept beside the packed ones for apply_reference: d_key^2 floats.
class Linear {
 public:
  Linear(const char* call, int d_key, FeatureMapLinear l) : raw_(std::move(l)) {
    const auto dk = usize(d_key);
    if (raw_.weight.size() != dk * dk)
      detail::throw_argument(call, "weight has {} floats, expected d_key^2 = {}",
                             raw_.weight.size(), dk * dk);
    if (!raw_.bias.empty() && raw_.bias.size() != dk)
      detail::throw_argument(call, "bias has {} floats, expected d_key = {}", raw_.bias.size(),
                             dk);
    w_ = kernels::PackedMatrix(raw_.weight.data(), d_key, d_key, raw_.storage);
  }

  // Y (rows, d_key; row stride ldy) from X (rows, d_key; row stride ldx), on one thread.
  void apply(const float* X, std::int64_t rows, std::int64_t ldx, float* Y,
             std::int64_t ldy) const {
    w_.multiply(X, rows, ldx, Y, ldy, 1);
    if (raw_.bias.empty()) return;
    const int n = w_.n_out();
    const float* b = raw_.bias.data();
    for (std::int64_t r = 0; r < rows; ++r) {
      float* y = Y + r * ldy;
      for (int i = 0; i < n; ++i) y[i] += b[i];
    }
  }

  // One row in float64 (the weights are the same floats).
  void apply_reference(const double* x, int d_key, double* y) const {
    for (int n = 0; n < d_key; ++n) {
      double s = 0.0;
      const float* wr = raw_.weight.data() + usize(n) * usize(d_key);
      for (int k = 0; k < d_key; ++k) s += static_cast<double>(wr[k]) * x[k];
      if (!raw_.bias.empty()) s += static_cast<double>(raw_.bias[usize(n)]);
      y[n] = s;
    }
  }

  std::size_t bytes() const { return w_.bytes() + raw_.bias.size() * sizeof(float); }

 private:
  FeatureMapLinear raw_;
  kernels::PackedMatrix w_;
};

// What the models' maps share: a fixed d_key, checked at every call (a cheap compare), and
// apply() through apply_with_scratch with scratch of its own.
class ModelMap : public FeatureMap {
 public:
  ModelMap(const char* name, int d_key, int expansion)
      : name_(name), d_key_(d_key), expansion_(expansion) {
    if (d_key < 1) detail::throw_argument(name, "d_key is {}, expected >= 1", d_key);
  }
  std::string name() const override { return name_; }
  int d_feature(int d_key) const override { return expansion_ * d_key; }

  void apply(const float* x, std::int64_t rows, std::int64_t x_stride, int d_key, float* out,
             std::int64_t out_stride) const override {
    std::vector<float> scratch(scratch_floats(rows, d_key));
    apply_with_scratch(x, rows, x_stride, d_key, out, out_stride, scratch.data());
  }

 protected:
  void check(int d_key) const {
    if (d_key != d_key_)
      detail::throw_argument(name_, "d_key is {}, but the map was built for {}", d_key, d_key_);
  }

  const char* name_;
  int d_key_;
  int expansion_;
};

// hedgehog: softmax over [2z, -2z] with z = x W^T + b.
class HedgehogMap final : public ModelMap {
 public:
  HedgehogMap(int d_key, FeatureMapLinear l)
      : ModelMap("hedgehog", d_key, 2), l1_("make_hedgehog_map", d_key, std::move(l)) {}

  std::size_t scratch_floats(std::int64_t rows, int d_key) const override {
    return usize(rows) * usize(d_key);
  }
  std::size_t parameter_bytes() const override { return l1_.bytes(); }

  void apply_with_scratch(const float* x, std::int64_t rows, std::int64_t x_stride, int d_key,
                          float* out, std::int64_t out_stride, float* scratch) const override {
    check(d_key);
    const int dk = d_key, D = 2 * d_key;
    float* z = scratch;
    l1_.apply(x, rows, x_stride, z, dk);
    for (std::int64_t r = 0; r < rows; ++r) {
      const float* zr = z + r * dk;
      float* o = out + r * out_stride;
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
  }

  void apply_reference(const double* x, std::int64_t rows, std::int64_t x_stride, int d_key,
                       double* out, std::int64_t out_stride) const override {
    check(d_key);
    const int dk = d_key, D = 2 * d_key;
    std::vector<double> z(usize(dk));
    for (std::int64_t r = 0; r < rows; ++r) {
      l1_.apply_reference(x + r * x_stride, dk, z.data());
      double* o = out + r * out_stride;
      double m = 0.0;
      for (int i = 0; i < dk; ++i) {
        o[i] = 2.0 * z[usize(i)];
        o[dk + i] = -2.0 * z[usize(i)];
        m = std::max(m, std::abs(o[i]));
      }
      double s = 0.0;
      for (int i = 0; i < D; ++i) s += o[i] = std::exp(o[i] - m);
      for (int i = 0; i < D; ++i) o[i] /= s;
    }
  }

 private:
  Linear l1_;
};

// t2r: relu(x W^T (+ b)): a learned projection, then relu (a plain compare, not the kernels').
class T2RMap final : public ModelMap {
 public:
  T2RMap(int d_key, FeatureMapLinear l)
      : ModelMap("t2r", d_key, 1), l1_("make_t2r_map", d_key, std::move(l)) {}

  std::size_t parameter_bytes() const override { return l1_.bytes(); }

  void apply_with_scratch(const float* x, std::int64_t rows, std::int64_t x_stride, int d_key,
                          float* out, std::int64_t out_stride, float*) const override {
    check(d_key);
    l1_.apply(x, rows, x_stride, out, out_stride);
    for (std::int64_t r = 0; r < rows; ++r) {
      float* o = out + r * out_stride;
      for (int i = 0; i < d_key; ++i) o[i] = o[i] > 0.0f ? o[i] : 0.0f;
    }
  }

  void apply_reference(const double* x, std::int64_t rows, std::int64_t x_stride, int d_key,
                       double* out, std::int64_t out_stride) const override {
    check(d_key);
    for (std::int64_t r = 0; r < rows; ++r) {
      double* o = out + r * out_stride;
      l1_.apply_reference(x + r * x_stride, d_key, o);
      for (int i = 0; i < d_key; ++i) o[i] = o[i] > 0.0 ? o[i] : 0.0;
    }
  }

 private:
  Linear l1_;
};

// elementwise_product: (x W1^T + b1) * (x W2^T + b2).
class ElementwiseProductMap final : public ModelMap {
 public:
  ElementwiseProductMap(int d_key, FeatureMapLinear l1, FeatureMapLinear l2)
      : ModelMap("elementwise_product", d_key, 1),
        l1_("make_elementwise_product_map", d_key, std::move(l1)),
        l2_("make_elementwise_product_map", d_key, std::move(l2)) {}

  std::size_t scratch_floats(std::int64_t rows, int d_key) const override {
    return 2 * usize(rows) * usize(d_key);
  }
  std::size_t parameter_bytes() const override { return l1_.bytes() + l2_.bytes(); }

  void apply_with_scratch(const float* x, std::int64_t rows, std::int64_t x_stride, int d_key,
                          float* out, std::int64_t out_stride, float* scratch) const override {
    check(d_key);
    const int dk = d_key;
    float* a = scratch;
    float* b = scratch + usize(rows) * usize(dk);
    l1_.apply(x, rows, x_stride, a, dk);
    l2_.apply(x, rows, x_stride, b, dk);
    for (std::int64_t r = 0; r < rows; ++r) {
      float* o = out + r * out_stride;
      const float* ar = a + r * dk;
      const float* br = b + r * dk;
      for (int i = 0; i < dk; ++i) o[i] = ar[i] * br[i];
    }
  }

  void apply_reference(const double* x, std::int64_t rows, std::int64_t x_stride, int d_key,
                       double* out, std::int64_t out_stride) const override {
    check(d_key);
    std::vector<double> b(usize(d_key));
    for (std::int64_t r = 0; r < rows; ++r) {
      double* o = out + r * out_stride;
      l1_.apply_reference(x + r * x_stride, d_key, o);
      l2_.apply_reference(x + r * x_stride, d_key, b.data());
      for (int i = 0; i < d_key; ++i) o[i] *= b[usize(i)];
    }
  }

 private:
  Linear l1_, l2_;
};

// dpfp: [relu(x), relu(-x)] (2 dk values), then its products with itself rolled by 1..4 places:
// block j-1 of the output is t * roll(t, j), roll(t, j)[i] = t[(i - j) mod 2 dk].
class DpfpMap final : public ModelMap {
 public:
  explicit DpfpMap(int d_key) : ModelMap("dpfp", d_key, 8) {}

  std::size_t scratch_floats(std::int64_t, int d_key) const override {
    return 2 * usize(d_key);
  }

  void apply_with_scratch(const float* x, std::int64_t rows, std::int64_t x_stride, int d_key,
                          float* out, std::int64_t out_stride, float* scratch) const override {
    check(d_key);
    const int dk = d_key, n2 = 2 * dk;
    float* t = scratch;
    for (std::int64_t r = 0; r < rows; ++r) {
      const float* xr = x + r * x_stride;
      float* o = out + r * out_stride;
      for (int i = 0; i < dk; ++i) {
        t[i] = std::max(xr[i], 0.0f);
        t[dk + i] = std::max(-xr[i], 0.0f);
      }
      for (int j = 1; j <= 4; ++j)
        for (int i = 0; i < n2; ++i) o[(j - 1) * n2 + i] = t[i] * t[((i - j) % n2 + n2) % n2];
    }
  }

  void apply_reference(const double* x, std::int64_t rows, std::int64_t x_stride, int d_key,
                       double* out, std::int64_t out_stride) const override {
    check(d_key);
    const int dk = d_key, n2 = 2 * dk;
    std::vector<double> t(usize(n2));
    for (std::int64_t r = 0; r < rows; ++r) {
      const double* xr = x + r * x_stride;
      double* o = out + r * out_stride;
      for (int i = 0; i < dk; ++i) {
        t[usize(i)] = std::max(xr[i], 0.0);
        t[usize(dk + i)] = std::max(-xr[i], 0.0);
      }
      for (int j = 1; j <= 4; ++j)
        for (int i = 0; i < n2; ++i)
          o[(j - 1) * n2 + i] = t[usize(i)] * t[usize(((i - j) % n2 + n2) % n2)];
    }
  }
};

// norm_q / norm_k: the inner map, then x / (sum(x) + 1e-4) per row (a plain sum, in order).
class SumNormalizedMap final : public FeatureMap {
 public:
  explicit SumNormalizedMap(std::shared_ptr<const FeatureMap> inner) : inner_(std::move(inner)) {}
  std::string name() const override { return inner_->name() + "+normalize_sum"; }
  int d_feature(int d_key) const override { return inner_->d_feature(d_key); }
  std::size_t scratch_floats(std::int64_t rows, int d_key) const override {
    return inner_->scratch_floats(rows, d_key);
  }
  std::size_t parameter_bytes() const override { return inner_->parameter_bytes(); }

  void apply(const float* x, std::int64_t rows, std::int64_t x_stride, int d_key, float* out,
             std::int64_t out_stride) const override {
    inner_->apply(x, rows, x_stride, d_key, out, out_stride);
    normalize(out, rows, inner_->d_feature(d_key), out_stride);
  }
  void apply_with_scratch(const float* x, std::int64_t rows, std::int64_t x_stride, int d_key,
                          float* out, std::int64_t out_stride, float* scratch) const override {
    inner_->apply_with_scratch(x, rows, x_stride, d_key, out, out_stride, scratch);
    normalize(out, rows, inner_->d_feature(d_key), out_stride);
  }

  void apply_reference(const double* x, std::int64_t rows, std::int64_t x_stride, int d_key,
                       double* out, std::int64_t out_stride) const override {
    inner_->apply_reference(x, rows, x_stride, d_key, out, out_stride);
    const int D = inner_->d_feature(d_key);
    for (std::int64_t r = 0; r < rows; ++r) {
      double* o = out + r * out_stride;
      double s = 0.0;
      for (int i = 0; i < D; ++i) s += o[i];
      const double denom = s + 1e-4;
      for (int i = 0; i < D; ++i) o[i] /= denom;
    }
  }

 private:
  static void normalize(float* out, std::int64_t rows, int D, std::int64_t out_stride) {
    for (std::int64_t r = 0; r < rows; ++r) {
      float* o = out + r * out_stride;
      float s = 0.0f;
      for (int i = 0; i < D; ++i) s += o[i];
      const float denom = s + 1e-4f;
      for (int i = 0; i < D; ++i) o[i] /= denom;
    }
  }

  std::shared_ptr<const FeatureMap> inner_;
};

}  // namespace

namespace detail {
kernels::InputMap input_map_of(const FeatureMap& phi) {
  if (dynamic_cast<const ElementwiseMap<EluPlusOne, EluPlusOneRef>*>(&phi) != nullptr)
    return kernels::InputMap::kEluPlusOne;
  if (dynamic_cast<const ElementwiseMap<Relu, ReluRef>*>(&phi) != nullptr)
    return kernels::InputMap::kRelu;
  if (dynamic_cast<const ElementwiseMap<Identity, IdentityRef>*>(&phi) != nullptr)
    return kernels::InputMap::kIdentity;
  return kernels::InputMap::kNone;
}
}  // namespace detail

std::shared_ptr<const FeatureMap> make_feature_map(FeatureMapKind kind) {
  switch (kind) {
    case FeatureMapKind::kEluPlusOne:
      return std::make_shared<ElementwiseMap<EluPlusOne, EluPlusOneRef>>("elu");
    case FeatureMapKind::kRelu:
      return std::make_shared<ElementwiseMap<Relu, ReluRef>>("relu");
    case FeatureMapKind::kIdentity:
      return std::make_shared<ElementwiseMap<Identity, IdentityRef>>("identity");
    case FeatureMapKind::kTaylor:
      return std::make_shared<TaylorMap>();
  }
  detail::throw_argument("make_feature_map", "unknown FeatureMapKind {}", static_cast<int>(kind));
}

std::shared_ptr<const FeatureMap> make_feature_map(std::string_view name) {
  if (name == "elu" || name == "elu+1") return make_feature_map(FeatureMapKind::kEluPlusOne);
  if (name == "relu") return make_feature_map(FeatureMapKind::kRelu);
  if (name == "identity") return make_feature_map(FeatureMapKind::kIdentity);
  if (name == "taylor") return make_feature_map(FeatureMapKind::kTaylor);
  detail::throw_argument("make_feature_map",
                         "unknown feature map \"{}\" (known: elu, relu, identity, taylor)", name);
}

std::shared_ptr<const FeatureMap> make_hedgehog_map(int d_key, FeatureMapLinear layer) {
  return std::make_shared<HedgehogMap>(d_key, std::move(layer));
}

std::shared_ptr<const FeatureMap> make_t2r_map(int d_key, FeatureMapLinear layer) {
  return std::make_shared<T2RMap>(d_key, std::move(layer));
}

std::shared_ptr<const FeatureMap> make_elementwise_product_map(int d_key, FeatureMapLinear layer1,
                                                               FeatureMapLinear layer2) {
  return std::make_shared<ElementwiseProductMap>(d_key, std::move(layer1), std::move(layer2));
}

std::shared_ptr<const FeatureMap> make_dpfp_map(int d_key) {
  return std::make_shared<DpfpMap>(d_key);
}

std::shared_ptr<const FeatureMap> make_sum_normalized(std::shared_ptr<const FeatureMap> inner) {
  if (!inner) detail::throw_argument("make_sum_normalized", "inner map is null");
  return std::make_shared<SumNormalizedMap>(std::move(inner));
}

}  // namespace recur
