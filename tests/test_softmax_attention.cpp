// The softmax KV-cache baseline: agreement with a float64 naive softmax, memory accounting,
// clone, and bad input (contract 4).
#include <catch2/catch.hpp>

#include <cmath>
#include <random>

#include "recur/error.h"
#include "recur/softmax_attention.h"

using recur::RowMatrix;
using recur::RowMatrixD;
using recur::SoftmaxAttention;
using recur::SoftmaxAttentionConfig;

namespace {

constexpr double kTolerance = 1e-5;  // relative to max |o|

struct Inputs {
  RowMatrix Q, K, V;
};
Inputs random_inputs(int H, int d, Eigen::Index T, std::uint32_t seed, float q_scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Inputs in{RowMatrix(T, H * d), RowMatrix(T, H * d), RowMatrix(T, H * d)};
  for (Eigen::Index i = 0; i < in.Q.size(); ++i) in.Q.data()[i] = q_scale * normal(rng);
  for (Eigen::Index i = 0; i < in.K.size(); ++i) in.K.data()[i] = normal(rng);
  for (Eigen::Index i = 0; i < in.V.size(); ++i) in.V.data()[i] = normal(rng);
  return in;
}

// Causal softmax attention in float64, the textbook way.
RowMatrixD naive(const Inputs& in, int H, int d) {
  const Eigen::Index T = in.Q.rows();
  RowMatrixD O(T, H * d);
  const double scale = 1.0 / std::sqrt(double(d));
  for (int h = 0; h < H; ++h) {
    const Eigen::MatrixXd q = in.Q.middleCols(h * d, d).cast<double>();
    const Eigen::MatrixXd k = in.K.middleCols(h * d, d).cast<double>();
    const Eigen::MatrixXd v = in.V.middleCols(h * d, d).cast<double>();
    for (Eigen::Index t = 0; t < T; ++t) {
      Eigen::VectorXd s = k.topRows(t + 1) * q.row(t).transpose() * scale;
      s = (s.array() - s.maxCoeff()).exp();
      O.block(t, h * d, 1, d) = (s.transpose() * v.topRows(t + 1)) / s.sum();
    }
  }
  return O;
}

// Rows [a, a + n) of the inputs through step(), one token at a time, into the same rows of out.
void step_rows(const SoftmaxAttention& layer, recur::KVCache& cache, const Inputs& in,
               Eigen::Index a, Eigen::Index n, RowMatrix& out) {
  Eigen::VectorXf o(in.Q.cols());
  for (Eigen::Index t = a; t < a + n; ++t) {
    layer.step(cache, in.Q.row(t).transpose(), in.K.row(t).transpose(), in.V.row(t).transpose(),
               o);
    out.row(t) = o.transpose();
  }
}

double relative_error(const RowMatrix& a, const RowMatrixD& b) {
  return (a.cast<double>() - b).cwiseAbs().maxCoeff() / b.cwiseAbs().maxCoeff();
}

}  // namespace

TEST_CASE("step and prefill agree with a float64 naive softmax", "[softmax][correctness]") {
  for (auto [H, d] : {std::pair{1, 8}, std::pair{3, 24}, std::pair{8, 64}, std::pair{2, 13}}) {
    for (float q_scale : {1.0f, 8.0f}) {  // 8: sharp attention, large score ranges
      const Eigen::Index T = 300;         // several pages, one partial
      const auto in = random_inputs(H, d, T, 17u + std::uint32_t(d), q_scale);
      const auto ref = naive(in, H, d);
      SoftmaxAttentionConfig c;
      c.n_heads = H;
      c.d_head = d;
      const SoftmaxAttention layer(c);

      auto stepped = layer.make_cache();
      RowMatrix out_step(T, H * d);
      step_rows(layer, stepped, in, 0, T, out_step);
      INFO("n_heads " << H << ", d_head " << d << ", q scale " << q_scale);
      CHECK(relative_error(out_step, ref) < kTolerance);

      // Prefill in uneven pieces, crossing page boundaries, then steps.
      auto cache = layer.make_cache();
      RowMatrix out(T, H * d);
      const Eigen::Index cuts[] = {0, 1, 70, 64 * 3 + 5, 250, T};
      for (int p = 0; p + 1 < 6; ++p) {
        const Eigen::Index a = cuts[p], n = cuts[p + 1] - cuts[p];
        if (p == 3) {  // one piece as steps, to mix the two paths
          step_rows(layer, cache, in, a, n, out);
          continue;
        }
        layer.prefill(cache, in.Q.middleRows(a, n), in.K.middleRows(a, n), in.V.middleRows(a, n),
                      out.middleRows(a, n));
      }
      CHECK(relative_error(out, ref) < kTolerance);
      CHECK(cache.n_tokens() == T);
    }
  }
}

TEST_CASE("the cache accounts for 2 * n_heads * d_head * 4 bytes per token", "[softmax][memory]") {
  SoftmaxAttentionConfig c;  // 8 heads, d_head 64
  const SoftmaxAttention layer(c);
  auto cache = layer.make_cache();
  const auto in = random_inputs(8, 64, 5000, 3u);
  const double per_token = 2.0 * 8 * 64 * 4;
  Eigen::Index done = 0;
  for (Eigen::Index n : {700, 1000, 2048, 4999}) {
    layer.append(cache, in.K.middleRows(done, n - done), in.V.middleRows(done, n - done));
    done = n;
    const double ratio = double(cache.bytes()) / (per_token * double(n));
    INFO(n << " tokens: " << cache.bytes() << " bytes, " << ratio << " of the expected");
    CHECK(ratio >= 1.0);
    CHECK(ratio < 1.1);
  }
  cache.release();
  CHECK(cache.bytes() < 10000);
}

TEST_CASE("a cloned cache continues independently", "[softmax][state]") {
  SoftmaxAttentionConfig c;
  c.n_heads = 2;
  c.d_head = 16;
  const SoftmaxAttention layer(c);
  const auto in = random_inputs(2, 16, 200, 5u);
  auto a = layer.make_cache();
  layer.prefill(a, in.Q.topRows(100), in.K.topRows(100), in.V.topRows(100));
  auto b = a.clone();
  const RowMatrix oa = layer.prefill(a, in.Q.bottomRows(100), in.K.bottomRows(100),
                                     in.V.bottomRows(100));
  CHECK(b.n_tokens() == 100);
  const RowMatrix ob = layer.prefill(b, in.Q.bottomRows(100), in.K.bottomRows(100),
                                     in.V.bottomRows(100));
  CHECK(oa == ob);
}

TEST_CASE("bad input to the softmax layer is rejected by name and changes nothing",
          "[softmax][errors]") {
  SoftmaxAttentionConfig c;
  c.n_heads = 2;
  c.d_head = 8;
  const SoftmaxAttention layer(c);
  const auto in = random_inputs(2, 8, 80, 9u);
  auto cache = layer.make_cache();
  layer.prefill(cache, in.Q.topRows(70), in.K.topRows(70), in.V.topRows(70));
  const auto before = cache.clone();
  Eigen::VectorXf q = in.Q.row(70).transpose(), k = in.K.row(70).transpose();
  Eigen::VectorXf v = in.V.row(70).transpose(), o(16), o_bad(15);
  const Eigen::VectorXf q_short = q.head(15);

  CHECK_THROWS_WITH(layer.step(cache, q_short, k, v, o),
                    Catch::Contains("[SoftmaxAttention::step]") &&
                        Catch::Contains("q has 15 elements") && Catch::Contains("2 * 8 = 16"));
  CHECK_THROWS_WITH(layer.step(cache, q, k, v, o_bad), Catch::Contains("out has 15 elements"));
  Eigen::VectorXf v_nan = v;
  v_nan(9) = std::nanf("");
  CHECK_THROWS_AS(layer.step(cache, q, k, v_nan, o), recur::NumericError);
  CHECK_THROWS_WITH(layer.step(cache, q, k, v_nan, o), Catch::Contains("element 9 of 16"));
  RowMatrix K_inf = in.K.bottomRows(10);
  K_inf(4, 3) = INFINITY;
  RowMatrix O(10, 16);
  CHECK_THROWS_WITH(layer.prefill(cache, in.Q.bottomRows(10), K_inf, in.V.bottomRows(10), O),
                    Catch::Contains("[SoftmaxAttention::prefill]") &&
                        Catch::Contains("row 4, column 3"));
  CHECK_THROWS_WITH(layer.prefill(cache, in.Q.bottomRows(9), in.K.bottomRows(10),
                                  in.V.bottomRows(10), O),
                    Catch::Contains("has shape"));
  SoftmaxAttentionConfig other = c;
  other.n_heads = 4;
  auto foreign = SoftmaxAttention(other).make_cache();
  CHECK_THROWS_WITH(layer.step(foreign, q, k, v, o),
                    Catch::Contains("cache was made for another layer"));
  CHECK(foreign.n_tokens() == 0);

  // Nothing changed: the next step gives the same output as on the copy made before.
  CHECK(cache.n_tokens() == 70);
  auto copy = before.clone();
  Eigen::VectorXf o1(16), o2(16);
  layer.step(cache, q, k, v, o1);
  layer.step(copy, q, k, v, o2);
  CHECK(o1 == o2);
}
