#include "recur/feature_map.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/simd.h"
#include "util/check.h"

namespace recur {
namespace {

using kernels::F8;
using kernels::kLanes;

// An elementwise map, vectorised in groups of eight; a row's tail goes through the same vector
// code on a zero-padded copy, so every element takes one path whatever its position.
template <class Op, class RefOp>
class ElementwiseMap final : public FeatureMap {
 public:
  explicit ElementwiseMap(const char* name) : name_(name) {}
  std::string name() const override { return name_; }
  int d_feature(int d_key) const override { return d_key; }

  void apply(const float* x, std::int64_t rows, std::int64_t x_stride, int d_key, float* out,
             std::int64_t out_stride) const override {
    const Op op;
    for (std::int64_t r = 0; r < rows; ++r) {
      const float* xr = x + r * x_stride;
      float* orow = out + r * out_stride;
      int i = 0;
      for (; i + kLanes <= d_key; i += kLanes) kernels::store8(orow + i, op(kernels::load8(xr + i)));
      if (i < d_key) {
        float tmp[kLanes] = {};
        std::memcpy(tmp, xr + i, sizeof(float) * static_cast<std::size_t>(d_key - i));
        kernels::store8(tmp, op(kernels::load8(tmp)));
        std::memcpy(orow + i, tmp, sizeof(float) * static_cast<std::size_t>(d_key - i));
      }
    }
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
  F8 operator()(F8 x) const {
    return kernels::select_positive8(x, kernels::add8(x, kernels::broadcast8(1.0f)),
                                     kernels::exp8(x));
  }
};
struct EluPlusOneRef {
  double operator()(double x) const { return x > 0 ? x + 1.0 : std::exp(x); }
};
struct Relu {
  F8 operator()(F8 x) const { return kernels::max8(x, kernels::zero8()); }
};
struct ReluRef {
  double operator()(double x) const { return x > 0 ? x : 0.0; }
};
struct Identity {
  F8 operator()(F8 x) const { return x; }
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
