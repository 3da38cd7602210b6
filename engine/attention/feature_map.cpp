#include "recur/feature_map.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/dispatch.h"
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

}  // namespace

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

}  // namespace recur
