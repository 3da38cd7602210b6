// Seeded random weights for any configuration, and a model directory written with them: for
// tests, benchmarks and `recur make-model`. Not part of the installed API.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "recur/model.h"

namespace recur {

/// Random weights for a configuration, generated from a seed (the same on every machine).
/// Each tensor is filled as its family's table says (TensorSpec::init). With a 16-bit dtype the
/// values are rounded to it, as if read from a file of that dtype.
class RandomWeights final : public WeightSource {
 public:
  RandomWeights(const ModelConfig& config, std::uint64_t seed, DType dtype = DType::kF32);
  DType dtype(const std::string& name) const override;
  bool has(const std::string& name) const override;
  std::vector<std::int64_t> shape(const std::string& name) const override;
  std::vector<float> read(const std::string& name) const override;
  std::vector<std::string> names() const override;
  std::string describe() const override;

 private:
  struct Spec {
    std::vector<std::int64_t> shape;
    enum class Init { kNormal, kNearOne, kSmall, kIdentityNear } init;
    double std;
  };
  std::vector<std::pair<std::string, Spec>> specs_;
  std::uint64_t seed_;
  DType dtype_;
};

/// Writes config.json and the weights (model.safetensors, or `shards` files with an index)
/// with random values into `dir`, which is created if needed. Returns the number of weight
/// files written: `shards`, or fewer when the model has fewer tensors than that.
int write_random_model(const std::string& dir, const ModelConfig& config, std::uint64_t seed,
                        DType dtype = DType::kF32, int shards = 1);

}  // namespace recur
