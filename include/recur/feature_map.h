// Feature maps phi: R^d_key -> R^d_feature, applied per head to a block of rows before the
// attention kernels run. A map must be a pure function of one row: the same row must give the
// same bytes whether it is mapped alone (step) or among many (prefill).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

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

  /// A short name, as accepted by make_feature_map ("elu", "relu", "identity", "taylor").
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
};

/// One of the built-in maps.
std::shared_ptr<const FeatureMap> make_feature_map(FeatureMapKind kind);

/// A built-in map by name: "elu" (elu + 1), "relu", "identity" or "taylor". Throws ArgumentError
/// otherwise.
std::shared_ptr<const FeatureMap> make_feature_map(std::string_view name);

}  // namespace recur
