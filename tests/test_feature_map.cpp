// Feature maps: accuracy against float64, and the same bytes for a row whatever its neighbours.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "recur/error.h"
#include "recur/feature_map.h"

namespace {

constexpr double kEluTolerance = 3e-7;  // relative; exp8 is accurate to about 2 ulp

std::vector<float> sweep() {
  std::vector<float> x;
  for (float v = -100.0f; v <= 100.0f; v += 0.01171875f) x.push_back(v);
  for (float v : {0.0f, -0.0f, 1e-30f, -1e-30f, -87.5f, 88.0f, 1e30f, -1e30f}) x.push_back(v);
  return x;
}

}  // namespace

TEST_CASE("elu+1 is within a few ulp of its float64 value and positive", "[feature_map]") {
  const auto phi = recur::make_feature_map("elu");
  const auto x = sweep();
  const auto n = static_cast<int>(x.size());
  std::vector<float> out(x.size());
  phi->apply(x.data(), 1, n, n, out.data(), n);
  std::vector<double> xd(x.begin(), x.end()), ref(x.size());
  phi->apply_reference(xd.data(), 1, n, n, ref.data(), n);
  double worst = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    CHECK(out[i] >= 0.0f);
    if (ref[i] < 1e-37) continue;  // below float's normal range the map flushes towards 0
    worst = std::max(worst, std::abs(double(out[i]) - ref[i]) / ref[i]);
  }
  INFO("worst relative error " << worst);
  CHECK(worst < kEluTolerance);
}

TEST_CASE("relu and identity are exact", "[feature_map]") {
  const auto x = sweep();
  const auto n = static_cast<int>(x.size());
  std::vector<float> out(x.size());
  recur::make_feature_map("relu")->apply(x.data(), 1, n, n, out.data(), n);
  for (std::size_t i = 0; i < x.size(); ++i) CHECK(out[i] == (x[i] > 0 ? x[i] : 0.0f));
  recur::make_feature_map(recur::FeatureMapKind::kIdentity)->apply(x.data(), 1, n, n, out.data(), n);
  CHECK(std::memcmp(out.data(), x.data(), x.size() * sizeof(float)) == 0);
}

TEST_CASE("a row maps to the same bytes alone, among many, and at any length", "[feature_map]") {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (const char* name : {"elu", "relu", "identity"}) {
    const auto phi = recur::make_feature_map(name);
    for (int d : {1, 7, 8, 13, 64}) {
      const int rows = 9, stride = d + 3;
      std::vector<float> x(std::size_t(rows * stride));
      for (auto& v : x) v = normal(rng);
      std::vector<float> together(static_cast<std::size_t>(rows * d));
      std::vector<float> alone(static_cast<std::size_t>(d)), one(1);
      phi->apply(x.data(), rows, stride, d, together.data(), d);
      for (int r = 0; r < rows; ++r) {
        phi->apply(x.data() + r * stride, 1, stride, d, alone.data(), d);
        CHECK(std::memcmp(alone.data(), together.data() + r * d, sizeof(float) * std::size_t(d)) == 0);
        for (int i = 0; i < d; ++i) {  // one element at a time: a tail of one
          phi->apply(x.data() + r * stride + i, 1, 1, 1, one.data(), 1);
          CHECK(std::memcmp(&one[0], &together[std::size_t(r * d + i)], sizeof(float)) == 0);
        }
      }
    }
  }
}

TEST_CASE("unknown feature maps are rejected by name", "[feature_map][errors]") {
  CHECK_THROWS_AS(recur::make_feature_map("gelu"), recur::ArgumentError);
  CHECK_THROWS_WITH(recur::make_feature_map("gelu"),
                    Catch::Contains("[make_feature_map]") && Catch::Contains("\"gelu\""));
  CHECK(recur::make_feature_map("elu")->d_feature(24) == 24);
}
