// Feature maps phi: R^d_key -> R^d_feature, applied per head to a block of rows before the
// attention kernels run. A map must be a pure function of one row: the same row must give the
// same bytes whether it is mapped alone (step) or among many (prefill).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "recur/safetensors.h"

namespace recur {

/// The built-in, parameter-free maps.
enum class FeatureMapKind {
  kEluPlusOne,  ///< elu(x) + 1: x + 1 for x > 0, exp(x) otherwise. The default.
  kRelu,        ///< max(x, 0)
  kIdentity,    ///< x (not positive: use with the unnormalized form)
  /// Based's second-order Taylor map of exp: [1, x / d^(1/4), vec(x x^T) / (sqrt(2) sqrt(d))],
  /// 1 + d + d^2 features (the full outer product, row-major: feature 1 + d + d m + n is
  /// x_m x_n / (sqrt 2 sqrt d)), so that phi(q) . phi(k) = 1 + s + s^2 / 2 with
  /// s = q . k / sqrt(d). Use with the normalized form: the kernel is at least 1/2.
  kTaylor,
};

/// A feature map. Implementations are immutable and safe to share between threads.
class FeatureMap {
 public:
  virtual ~FeatureMap() = default;

  /// A short name: for the built-in maps, as accepted by make_feature_map ("elu", "relu",
  /// "identity", "taylor"); for the others, their module's name ("hedgehog", "t2r", "dpfp",
  /// "elementwise_product"), with "+normalize_sum" when make_sum_normalized wraps them.
  virtual std::string name() const = 0;

  /// The output dimension for rows of d_key numbers.
  virtual int d_feature(int d_key) const = 0;

  /// Maps `rows` rows of d_key floats (x[r * x_stride + i]) to rows of d_feature(d_key) floats
  /// (out[r * out_stride + j]). Inputs are finite; the caller has checked them.
  virtual void apply(const float* x, std::int64_t rows, std::int64_t x_stride, int d_key,
                     float* out, std::int64_t out_stride) const = 0;

  /// The same map in float64, for references and tests.
  virtual void apply_reference(const double* x, std::int64_t rows, std::int64_t x_stride,
                               int d_key, double* out, std::int64_t out_stride) const = 0;

  /// Floats of scratch that apply_with_scratch needs for `rows` rows of d_key floats. The
  /// built-in maps need none.
  virtual std::size_t scratch_floats(std::int64_t rows, int d_key) const {
    (void)rows;
    (void)d_key;
    return 0;
  }

  /// apply() with caller-owned scratch of at least scratch_floats(rows, d_key) floats: the same
  /// bytes, and no allocation (apply() of a map that needs scratch allocates it per call).
  virtual void apply_with_scratch(const float* x, std::int64_t rows, std::int64_t x_stride,
                                  int d_key, float* out, std::int64_t out_stride,
                                  float* scratch) const {
    (void)scratch;
    apply(x, rows, x_stride, d_key, out, out_stride);
  }

  /// Bytes of learned parameters one application reads (packed matrices and biases); 0 for
  /// the parameter-free maps.
  virtual std::size_t parameter_bytes() const { return 0; }
};

/// One of the built-in maps.
std::shared_ptr<const FeatureMap> make_feature_map(FeatureMapKind kind);

/// A built-in map by name: "elu" (elu + 1), "relu", "identity" or "taylor". Throws ArgumentError
/// otherwise.
std::shared_ptr<const FeatureMap> make_feature_map(std::string_view name);

/// One torch Linear(d_key, d_key) of a learned map: y = x W^T (+ b).
struct FeatureMapLinear {
  std::vector<float> weight;       ///< (d_key, d_key), row-major as torch stores it
  std::vector<float> bias;         ///< (d_key), or empty: none
  DType storage = DType::kF32;     ///< how the packed weight is kept (16-bit: as read from file)
};

/// flash-linear-attention's learned and model-only maps, for a model's q or k heads. Each is
/// built for one d_key; apply() with another d_key throws ArgumentError.
///
/// hedgehog: softmax over [2z, -2z] with z = x W^T + b; 2 d_key features.
std::shared_ptr<const FeatureMap> make_hedgehog_map(int d_key, FeatureMapLinear layer);
/// t2r: relu(x W^T (+ b)); d_key features.
std::shared_ptr<const FeatureMap> make_t2r_map(int d_key, FeatureMapLinear layer);
/// elementwise_product: (x W1^T + b1) * (x W2^T + b2); d_key features, not positive.
std::shared_ptr<const FeatureMap> make_elementwise_product_map(int d_key, FeatureMapLinear layer1,
                                                               FeatureMapLinear layer2);
/// dpfp (parameter-free): t = [relu(x), relu(-x)], then t * roll(t, j) for j = 1..4, block
/// after block; 8 d_key features.
std::shared_ptr<const FeatureMap> make_dpfp_map(int d_key);

/// `inner`, then each row divided by (its sum + 1e-4): the models' norm_q / norm_k.
std::shared_ptr<const FeatureMap> make_sum_normalized(std::shared_ptr<const FeatureMap> inner);

}  // namespace recur
