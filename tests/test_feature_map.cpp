// Feature maps: accuracy against float64, and the same bytes for a row whatever its neighbours.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "recur/error.h"
#include "recur/feature_map.h"

namespace {

constexpr double kEluTolerance = 3e-7;  // relative; exp8 is accurate to about 2 ulp
// Relative, per feature: the quadratic features round twice (x_m x_n, then the scale).
constexpr double kTaylorTolerance = 2.5e-7;

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

TEST_CASE("the Taylor map lays out 1, x / d^(1/4) and the full outer product, row-major",
          "[feature_map][taylor]") {
  const auto phi = recur::make_feature_map(recur::FeatureMapKind::kTaylor);
  CHECK(phi->name() == "taylor");
  CHECK(phi->d_feature(16) == 273);
  CHECK(phi->d_feature(1) == 3);
  CHECK(phi->d_feature(1 << 16) == std::numeric_limits<int>::max());  // saturates, no overflow
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.5f);
  for (int d : {1, 3, 16, 24}) {
    const int D = phi->d_feature(d), rows = 5, stride = d + 2, out_stride = D + 3;
    std::vector<float> x(std::size_t(rows * stride));
    for (auto& v : x) v = normal(rng);
    std::vector<float> out(std::size_t(rows * out_stride), -7.0f);
    phi->apply(x.data(), rows, stride, d, out.data(), out_stride);
    std::vector<double> xd(x.begin(), x.end()), ref(out.size(), -7.0);
    phi->apply_reference(xd.data(), rows, stride, d, ref.data(), out_stride);
    // The constants, as documented: computed in double, rounded once.
    const auto c1 = static_cast<float>(1.0 / std::sqrt(std::sqrt(double(d))));
    const auto c2 = static_cast<float>(1.0 / (std::sqrt(2.0) * std::sqrt(double(d))));
    double worst = 0;
    for (int r = 0; r < rows; ++r) {
      const float* xr = x.data() + r * stride;
      const float* o = out.data() + r * out_stride;
      CHECK(o[0] == 1.0f);
      for (int m = 0; m < d; ++m) CHECK(o[1 + m] == xr[m] * c1);
      for (int m = 0; m < d; ++m)
        for (int n = 0; n < d; ++n) {
          const float expect = (xr[m] * xr[n]) * c2;
          CHECK(std::memcmp(&o[1 + d + d * m + n], &expect, sizeof(float)) == 0);
        }
      for (int j = 0; j < D; ++j) {
        const double rj = ref[std::size_t(r * out_stride + j)];
        if (rj != 0.0) worst = std::max(worst, std::abs(double(o[j]) - rj) / std::abs(rj));
      }
      // The padding between rows is never written.
      for (int j = D; j < out_stride; ++j) CHECK(o[j] == -7.0f);
      // Alone or among many rows: the same bytes.
      std::vector<float> alone(static_cast<std::size_t>(D));
      phi->apply(xr, 1, stride, d, alone.data(), D);
      CHECK(std::memcmp(alone.data(), o, sizeof(float) * std::size_t(D)) == 0);
    }
    INFO("d " << d << ": worst relative error against float64 " << worst);
    CHECK(worst < kTaylorTolerance);
  }
}

TEST_CASE("the Taylor map's features give the kernel 1 + s + s^2 / 2, s = q . k / sqrt(d)",
          "[feature_map][taylor]") {
  const auto phi = recur::make_feature_map("taylor");
  std::mt19937 rng(12);
  std::normal_distribution<double> normal(0.0, 1.0);
  double worst = 0;
  for (int d : {1, 2, 16, 33}) {
    const int D = phi->d_feature(d);
    for (int trial = 0; trial < 50; ++trial) {
      const auto du = static_cast<std::size_t>(d), Du = static_cast<std::size_t>(D);
      std::vector<double> q(du), k(du), fq(Du), fk(Du);
      for (auto& v : q) v = normal(rng);
      for (auto& v : k) v = normal(rng);
      phi->apply_reference(q.data(), 1, d, d, fq.data(), D);
      phi->apply_reference(k.data(), 1, d, d, fk.data(), D);
      double dot = 0, qk = 0;
      for (int j = 0; j < D; ++j) dot += fq[std::size_t(j)] * fk[std::size_t(j)];
      for (int i = 0; i < d; ++i) qk += q[std::size_t(i)] * k[std::size_t(i)];
      const double s = qk / std::sqrt(double(d));
      const double kernel = 1.0 + s + s * s / 2.0;
      CHECK(kernel >= 0.5);
      worst = std::max(worst, std::abs(dot - kernel) / kernel);
    }
  }
  INFO("worst relative difference " << worst);
  CHECK(worst < 1e-13);
}

TEST_CASE("unknown feature maps are rejected by name", "[feature_map][errors]") {
  CHECK_THROWS_AS(recur::make_feature_map("gelu"), recur::ArgumentError);
  CHECK_THROWS_WITH(recur::make_feature_map("gelu"),
                    Catch::Contains("[make_feature_map]") && Catch::Contains("\"gelu\""));
  CHECK(recur::make_feature_map("elu")->d_feature(24) == 24);
  CHECK_THROWS_WITH(recur::make_feature_map("gelu"), Catch::Contains("taylor"));
}

namespace {

// The models' maps are float products and sums of a few dozen terms: a loose relative bound,
// against the float64 map over the same float weights, scaled by the row's largest feature.
constexpr double kModelMapTolerance = 1e-5;

recur::FeatureMapLinear random_linear(int d, bool bias, std::mt19937& rng) {
  std::normal_distribution<float> g(0.0f, 0.3f);
  recur::FeatureMapLinear l;
  l.weight.resize(static_cast<std::size_t>(d) * static_cast<std::size_t>(d));
  for (auto& v : l.weight) v = g(rng);
  if (bias) {
    l.bias.resize(static_cast<std::size_t>(d));
    for (auto& v : l.bias) v = g(rng);
  }
  return l;
}

}  // namespace

TEST_CASE("the models' maps agree with float64, with and without scratch, at any row count",
          "[feature_map]") {
  constexpr int d = 12;
  std::mt19937 rng(7);
  std::vector<std::shared_ptr<const recur::FeatureMap>> maps = {
      recur::make_hedgehog_map(d, random_linear(d, true, rng)),
      recur::make_t2r_map(d, random_linear(d, false, rng)),
      recur::make_elementwise_product_map(d, random_linear(d, true, rng),
                                          random_linear(d, true, rng)),
      recur::make_dpfp_map(d)};
  const std::size_t n_base = maps.size();
  for (std::size_t i = 0; i < n_base; ++i) maps.push_back(recur::make_sum_normalized(maps[i]));
  constexpr int rows = 9;
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> x(rows * d);
  for (auto& v : x) v = g(rng);
  const std::vector<double> xd(x.begin(), x.end());
  for (const auto& phi : maps) {
    INFO(phi->name());
    const int D = phi->d_feature(d);
    const auto n_out = static_cast<std::size_t>(rows * D);
    std::vector<float> a(n_out), b(n_out, -1.0f), one(static_cast<std::size_t>(D));
    phi->apply(x.data(), rows, d, d, a.data(), D);
    std::vector<float> scratch(phi->scratch_floats(rows, d));
    phi->apply_with_scratch(x.data(), rows, d, d, b.data(), D, scratch.data());
    CHECK(std::memcmp(a.data(), b.data(), n_out * sizeof(float)) == 0);
    for (int r = 0; r < rows; ++r) {  // a row alone gives the bytes it gave among the others
      phi->apply(x.data() + r * d, 1, d, d, one.data(), D);
      CHECK(std::memcmp(one.data(), a.data() + r * D, one.size() * sizeof(float)) == 0);
    }
    std::vector<double> ref(n_out);
    phi->apply_reference(xd.data(), rows, d, d, ref.data(), D);
    double worst = 0;
    for (int r = 0; r < rows; ++r) {
      double scale = 1e-30;
      for (int j = 0; j < D; ++j) scale = std::max(scale, std::abs(ref[std::size_t(r * D + j)]));
      for (int j = 0; j < D; ++j) {
        const auto k = std::size_t(r * D + j);
        worst = std::max(worst, std::abs(double(a[k]) - ref[k]) / scale);
      }
    }
    INFO("largest relative difference " << worst);
    CHECK(worst < kModelMapTolerance);
  }
  CHECK_THROWS_AS(maps[0]->apply(x.data(), 1, d, d - 1, std::vector<float>(64).data(), 64),
                  recur::ArgumentError);
}
