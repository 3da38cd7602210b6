#include "recur/feature_map.h"

#include <algorithm>
#include <cmath>
#include <cstring>

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

}  // namespace

std::shared_ptr<const FeatureMap> make_feature_map(FeatureMapKind kind) {
  switch (kind) {
    case FeatureMapKind::kEluPlusOne:
      return std::make_shared<ElementwiseMap<EluPlusOne, EluPlusOneRef>>("elu");
    case FeatureMapKind::kRelu:
      return std::make_shared<ElementwiseMap<Relu, ReluRef>>("relu");
    case FeatureMapKind::kIdentity:
      return std::make_shared<ElementwiseMap<Identity, IdentityRef>>("identity");
  }
  detail::throw_argument("make_feature_map", "unknown FeatureMapKind {}", static_cast<int>(kind));
}

std::shared_ptr<const FeatureMap> make_feature_map(std::string_view name) {
  if (name == "elu" || name == "elu+1") return make_feature_map(FeatureMapKind::kEluPlusOne);
  if (name == "relu") return make_feature_map(FeatureMapKind::kRelu);
  if (name == "identity") return make_feature_map(FeatureMapKind::kIdentity);
  detail::throw_argument("make_feature_map",
                         "unknown feature map \"{}\" (known: elu, relu, identity)", name);
}

}  // namespace recur
