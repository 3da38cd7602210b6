// Based's three mixers as layers: Taylor-map linear attention, the short convolution and
// sliding-window attention with rotary. For each: prefill in any split, chunk and thread count
// gives the bytes of step() token by token (contract 2), outputs agree with a float64 reference,
// the state keeps its size, bad input is refused with the state unchanged (contract 4), and every
// instruction set gives the same bytes.
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "recur/error.h"
#include "recur/isa.h"
#include "recur/linear_attention.h"
#include "recur/short_conv.h"
#include "recur/window_attention.h"
#include "attention/rotary.h"
#include "support/each_isa.h"
#include "support/reference.h"

using recur::PrefillOptions;
using recur::RowMatrix;
using recur::RowMatrixD;

namespace {

constexpr double kTaylorTolerance = 1e-5;  // float32 against float64, relative to max |o|
constexpr double kConvTolerance = 1e-6;
constexpr double kWindowTolerance = 2e-5;

RowMatrix random_matrix(Eigen::Index rows, Eigen::Index cols, std::uint32_t seed,
                        float sd = 1.0f, float mean = 0.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(mean, sd);
  RowMatrix m(rows, cols);
  for (Eigen::Index i = 0; i < m.size(); ++i) m.data()[i] = normal(rng);
  return m;
}

// Where two float matrices first differ in their bytes, or "" when they are identical.
std::string first_difference(const RowMatrix& a, const RowMatrix& b) {
  if (a.rows() != b.rows() || a.cols() != b.cols())
    return fmt::format("shapes ({}, {}) and ({}, {})", a.rows(), a.cols(), b.rows(), b.cols());
  for (Eigen::Index r = 0; r < a.rows(); ++r)
    for (Eigen::Index c = 0; c < a.cols(); ++c)
      if (std::memcmp(&a(r, c), &b(r, c), sizeof(float)) != 0)
        return fmt::format("row {}, column {}: {:.9g} vs {:.9g}", r, c, a(r, c), b(r, c));
  return "";
}

double relative_error(const RowMatrix& a, const RowMatrixD& b) {
  const double scale = b.cwiseAbs().maxCoeff();
  return (a.cast<double>() - b).cwiseAbs().maxCoeff() / (scale > 0 ? scale : 1.0);
}

// Calls of a prefill: [0, T) cut at these points (uneven, some calls of one token).
std::vector<std::vector<Eigen::Index>> splits(Eigen::Index T) {
  std::vector<std::vector<Eigen::Index>> out = {{0, T}};
  if (T >= 3) out.push_back({0, T / 3, T / 3 + 1, T});
  if (T >= 10) out.push_back({0, 1, T / 7, T / 2, T - 1, T});
  return out;
}

// The chunk sizes of the brief: 1, 7, 64, 300 and the whole prompt.
std::vector<int> chunks(Eigen::Index T) {
  return {1, 7, 64, 300, static_cast<int>(std::max<Eigen::Index>(T, 1))};
}

// Expects f to throw E with every fragment in its message, and the state's bytes unchanged.
template <class E, class State, class F>
void expect_rejected(const State& s, const F& f, std::initializer_list<const char*> fragments) {
  const auto before = s.raw_bytes();
  const auto n = s.n_tokens();
  try {
    f();
    FAIL("no exception");
  } catch (const E& e) {
    const std::string what = e.what();
    for (const char* frag : fragments) {
      INFO("message: " << what);
      CHECK(what.find(frag) != std::string::npos);
    }
  }
  CHECK(s.raw_bytes() == before);
  CHECK(s.n_tokens() == n);
}

// -------------------------------------------------------------------------------------------
// Taylor linear attention

recur::LinearAttentionConfig taylor_config(int heads, int d_value) {
  recur::LinearAttentionConfig c;
  c.n_heads = heads;
  c.d_key = 16;
  c.d_value = d_value;
  c.feature_map = recur::FeatureMapKind::kTaylor;
  c.normalized = true;
  c.eps = 1e-12f;
  return c;
}

// -------------------------------------------------------------------------------------------
// Sliding-window reference: full causal attention with a band mask and rotary, in double, with
// the layer's inv_freq (which Based's RotaryEmbedding also keeps in float).
RowMatrixD window_reference(const recur::WindowAttention& layer, const RowMatrix& Q,
                            const RowMatrix& K, const RowMatrix& V, std::int64_t pos0 = 0) {
  const auto& c = layer.config();
  const int d = c.d_head, half = d / 2;
  const Eigen::Index T = Q.rows();
  const double scale = double(layer.scale());
  const auto rot = [&](const float* x, std::int64_t pos, double* out) {
    for (int i = 0; i < half; ++i) {
      const double a = double(pos) * double(layer.inv_freq()[std::size_t(i)]);
      const double cs = std::cos(a), sn = std::sin(a);
      out[i] = double(x[i]) * cs - double(x[i + half]) * sn;
      out[i + half] = double(x[i + half]) * cs + double(x[i]) * sn;
    }
  };
  RowMatrixD O(T, Eigen::Index(c.n_heads) * d);
  std::vector<double> qr(static_cast<std::size_t>(d)), kr(std::size_t(T) * std::size_t(d)),
      w(static_cast<std::size_t>(T));
  for (int h = 0; h < c.n_heads; ++h) {
    for (Eigen::Index t = 0; t < T; ++t)
      rot(K.data() + t * K.cols() + h * d, pos0 + t, kr.data() + std::size_t(t) * std::size_t(d));
    for (Eigen::Index t = 0; t < T; ++t) {
      rot(Q.data() + t * Q.cols() + h * d, pos0 + t, qr.data());
      const Eigen::Index lo = std::max<Eigen::Index>(0, t - c.window);
      double m = -std::numeric_limits<double>::infinity();
      for (Eigen::Index j = lo; j <= t; ++j) {
        double s = 0;
        for (int i = 0; i < d; ++i) s += qr[std::size_t(i)] * kr[std::size_t(j) * std::size_t(d) + std::size_t(i)];
        w[std::size_t(j)] = s * scale;
        m = std::max(m, w[std::size_t(j)]);
      }
      double l = 0;
      for (Eigen::Index j = lo; j <= t; ++j) l += (w[std::size_t(j)] = std::exp(w[std::size_t(j)] - m));
      for (int i = 0; i < d; ++i) {
        double o = 0;
        for (Eigen::Index j = lo; j <= t; ++j) o += w[std::size_t(j)] * double(V(j, h * d + i));
        O(t, h * d + i) = o / l;
      }
    }
  }
  return O;
}

// Compares prefill in every split, chunk and thread count (then kTail steps) with stepping.
// prefill(state, a, n, out_rows, options) runs rows [a, a + n); step(state, t, out_row) one.
template <class Layer, class Prefill, class Step>
int check_prefill_equals_step(const Layer& layer, Eigen::Index T_max, Eigen::Index width,
                              const std::vector<Eigen::Index>& Ts, const Prefill& prefill,
                              const Step& step, bool threads_matter, const std::string& what) {
  constexpr Eigen::Index kTail = 20;
  RowMatrix stepped(T_max + kTail, width);
  // The state's bytes after T and T + kTail tokens, for each T (a state may be large: only these).
  std::map<Eigen::Index, std::vector<unsigned char>> state_after;
  {
    auto s = layer.make_state();
    const auto mark = [&](Eigen::Index n) {
      for (const Eigen::Index T : Ts)
        if (n == T || n == T + kTail) state_after[n] = s.raw_bytes();
    };
    mark(0);
    for (Eigen::Index t = 0; t < T_max + kTail; ++t) {
      step(s, t, stepped.row(t));
      mark(t + 1);
    }
  }
  int compared = 0;
  for (const Eigen::Index T : Ts) {
    for (const auto& cuts : splits(T)) {
      for (const int chunk : chunks(T)) {
        for (int threads : {1, 2, 3}) {
          if (!threads_matter && threads > 1) continue;
          auto s = layer.make_state();
          RowMatrix out(T + kTail, width);
          PrefillOptions options;
          options.chunk = chunk;
          options.threads = threads;
          for (std::size_t p = 0; p + 1 < cuts.size(); ++p)
            prefill(s, cuts[p], cuts[p + 1] - cuts[p], out.middleRows(cuts[p], cuts[p + 1] - cuts[p]),
                    options);
          const bool same_prefill_state = s.raw_bytes() == state_after[T];
          for (Eigen::Index t = T; t < T + kTail; ++t) step(s, t, out.row(t));
          const std::string diff = first_difference(out, stepped.topRows(T + kTail));
          const bool same_state = s.raw_bytes() == state_after[T + kTail];
          ++compared;
          if (!diff.empty() || !same_state || !same_prefill_state)
            FAIL_CHECK(fmt::format("{}: T {}, {} calls, chunk {}, {} threads: outputs {}, state "
                                   "after prefill {}, after the steps {}",
                                   what, T, cuts.size() - 1, chunk, threads,
                                   diff.empty() ? "identical" : "differ at " + diff,
                                   same_prefill_state ? "identical" : "differs",
                                   same_state ? "identical" : "differs"));
        }
      }
    }
  }
  return compared;
}

}  // namespace

// ===========================================================================================
// Taylor linear attention

TEST_CASE("Taylor linear attention: 273 features, padded rows, the normalized form with eps "
          "1e-12", "[based][taylor]") {
  const recur::LinearAttention layer(taylor_config(16, 64));
  CHECK(layer.d_feature() == 273);
  CHECK(layer.scale() == 1.0f);
  CHECK(layer.config().eps == 1e-12f);
  auto s = layer.make_state();
  CHECK(s.d_feature() == 273);
  // Per head: P, L32 (float) and L64 (double) of 280 x 64 (273 rows padded to 8), and Zp, Z32,
  // Z64 of 280: 291200 bytes; 16 heads.
  CHECK(s.raw_size() == 16u * 291200u + 8u);
}

TEST_CASE("Taylor linear attention: prefill equals step() bit for bit in any split, chunk and "
          "thread count", "[based][taylor][exactness]") {
  for (const int dv : {64, 24}) {  // 24: d_value padded to 32
    const recur::LinearAttention layer(taylor_config(3, dv));
    const Eigen::Index T_max = 700;  // past two folds (256, 512)
    const Eigen::Index width = 3 * dv;
    const RowMatrix Q = random_matrix(T_max + 20, 48, 1), K = random_matrix(T_max + 20, 48, 2);
    const RowMatrix V = random_matrix(T_max + 20, width, 3, 1.0f, 0.5f);
    const int compared = check_prefill_equals_step(
        layer, T_max, width, {0, 1, 2, 255, 256, 257, 700},
        [&](recur::LinearState& s, Eigen::Index a, Eigen::Index n, Eigen::Ref<RowMatrix> out,
            const PrefillOptions& o) {
          layer.prefill(s, Q.middleRows(a, n), K.middleRows(a, n), V.middleRows(a, n), out, o);
        },
        [&](recur::LinearState& s, Eigen::Index t, Eigen::Ref<RowMatrix> out) {
          Eigen::VectorXf o(width);
          layer.step(s, Q.row(t).transpose(), K.row(t).transpose(), V.row(t).transpose(), o);
          out = o.transpose();
        },
        true, fmt::format("taylor, d_value {}", dv));
    CHECK(compared > 200);
  }
}

TEST_CASE("Taylor linear attention agrees with the float64 quadratic form", "[based][taylor]") {
  for (const int heads : {1, 4}) {
    const recur::LinearAttention layer(taylor_config(heads, 64));
    for (const Eigen::Index T : {1, 65, 1000}) {
      const auto in = recur::testing::random_inputs(layer, T, 17u + std::uint32_t(T), 0.5f);
      auto s = layer.make_state();
      const RowMatrix out = layer.prefill(s, in.Q, in.K, in.V);
      const RowMatrixD ref = recur::testing::quadratic_reference(layer, in.Q, in.K, in.V);
      const double err = relative_error(out, ref);
      INFO("heads " << heads << ", T " << T << ": relative error " << err);
      CHECK(err < kTaylorTolerance);
    }
  }
}

// ===========================================================================================
// Short convolution

namespace {

RowMatrixD conv_reference(const RowMatrix& W, const Eigen::VectorXf& b, const RowMatrix& X) {
  const Eigen::Index C = W.rows(), K = W.cols(), T = X.rows();
  RowMatrixD Y(T, C);
  for (Eigen::Index t = 0; t < T; ++t)
    for (Eigen::Index c = 0; c < C; ++c) {
      double y = b.size() ? double(b(c)) : 0.0;
      for (Eigen::Index k = 0; k < K; ++k) {
        const Eigen::Index src = t - (K - 1) + k;
        if (src >= 0) y += double(W(c, k)) * double(X(src, c));
      }
      Y(t, c) = y;
    }
  return Y;
}

}  // namespace

TEST_CASE("short convolution: prefill equals step() bit for bit in any split", "[based][conv][exactness]") {
  for (const int K : {3, 1, 4}) {
    for (const bool with_bias : {false, true}) {
      const int C = 37;
      const RowMatrix W = random_matrix(C, K, 5u + std::uint32_t(K));
      const Eigen::VectorXf b = with_bias ? Eigen::VectorXf(random_matrix(C, 1, 6).col(0))
                                          : Eigen::VectorXf();
      const recur::ShortConvolution conv(W, b);
      const Eigen::Index T_max = 400;
      const RowMatrix X = random_matrix(T_max + 20, C, 7);
      const int compared = check_prefill_equals_step(
          conv, T_max, C, {0, 1, 2, 3, 64, 400},
          [&](recur::ShortConvState& s, Eigen::Index a, Eigen::Index n, Eigen::Ref<RowMatrix> out,
              const PrefillOptions& o) {
            // The convolution has no chunk option: the chunk is the size of each call.
            for (Eigen::Index c0 = 0; c0 < n; c0 += o.chunk) {
              const Eigen::Index m = std::min<Eigen::Index>(o.chunk, n - c0);
              conv.prefill(s, X.middleRows(a + c0, m), out.middleRows(c0, m));
            }
          },
          [&](recur::ShortConvState& s, Eigen::Index t, Eigen::Ref<RowMatrix> out) {
            Eigen::VectorXf y(C);
            conv.step(s, X.row(t).transpose(), y);
            out = y.transpose();
          },
          false, fmt::format("conv, kernel {}, {}", K, with_bias ? "bias" : "no bias"));
      CHECK(compared > 40);

      auto s = conv.make_state();
      const RowMatrix Y = conv.prefill(s, X);
      const double err = relative_error(Y, conv_reference(W, b, X));
      INFO("kernel " << K << ": relative error " << err);
      CHECK(err < kConvTolerance);
      // The state holds the last K - 1 inputs, oldest first.
      const RowMatrix h = s.history();
      REQUIRE(h.rows() == K - 1);
      for (int j = 0; j + 1 < K; ++j)
        CHECK(first_difference(h.row(j), X.row(X.rows() - (K - 1) + j)).empty());
    }
  }
}

TEST_CASE("short convolution: PyTorch's taps, zeros before the start, y may be x",
          "[based][conv]") {
  RowMatrix W(2, 3);
  W << 1, 10, 100, -1, -2, -4;  // tap 2 multiplies the current input
  Eigen::VectorXf b(2);
  b << 0.5f, 0.0f;
  const recur::ShortConvolution conv(W, b);
  CHECK(conv.channels() == 2);
  CHECK(conv.kernel_size() == 3);
  CHECK(conv.has_bias());
  auto s = conv.make_state();
  Eigen::VectorXf x(2);
  x << 1, 1;
  conv.step(s, x, x);  // in place
  CHECK(x(0) == 100.5f);
  CHECK(x(1) == -4.0f);
  Eigen::VectorXf x2(2);
  x2 << 2, 3;
  const Eigen::VectorXf y = conv.step(s, x2);
  CHECK(y(0) == 10.0f * 1.0f + 200.0f + 0.5f);  // the state holds the input, not the output
  CHECK(y(1) == -2.0f * 1.0f - 12.0f);
  CHECK(s.n_tokens() == 2);
  // A copy continues on its own; save and restore continue bit for bit.
  auto copy = s.clone();
  const auto saved = s.raw_bytes();
  Eigen::VectorXf x3(2);
  x3 << 5, -5;
  const Eigen::VectorXf y3 = conv.step(s, x3);
  CHECK(copy.n_tokens() == 2);
  auto restored = conv.make_state();
  restored.load_raw_bytes(saved.data(), saved.size());
  CHECK(first_difference(conv.step(restored, x3).transpose(), y3.transpose()).empty());
  CHECK(first_difference(conv.step(copy, x3).transpose(), y3.transpose()).empty());
  s.reset();
  CHECK(s.raw_bytes() == conv.make_state().raw_bytes());
}

TEST_CASE("short convolution: bad input is refused by name, the state unchanged",
          "[based][conv][errors]") {
  const RowMatrix W = random_matrix(8, 3, 9);
  const recur::ShortConvolution conv(W);
  auto s = conv.make_state();
  conv.prefill(s, random_matrix(5, 8, 10));
  Eigen::VectorXf x = Eigen::VectorXf::Ones(8), y(8), x7(7);
  using recur::ShapeError;
  expect_rejected<ShapeError>(s, [&] { conv.step(s, x7, y); },
                              {"[ShortConvolution::step]", "x has 7 elements", "channels = 8"});
  expect_rejected<ShapeError>(s, [&] { conv.step(s, x, x7); }, {"y has 7 elements"});
  x(3) = std::numeric_limits<float>::quiet_NaN();
  expect_rejected<recur::NumericError>(s, [&] { conv.step(s, x, y); },
                                       {"[ShortConvolution::step]", "x", "element 3 of 8"});
  RowMatrix X = random_matrix(4, 8, 11), Y(4, 8), Y3(3, 8);
  const RowMatrix X9 = random_matrix(4, 9, 11);
  expect_rejected<ShapeError>(s, [&] { conv.prefill(s, X9, Y); },
                              {"[ShortConvolution::prefill]", "X has shape (4, 9)", "(4, 8)"});
  expect_rejected<ShapeError>(s, [&] { conv.prefill(s, X, Y3); }, {"Y has shape (3, 8)"});
  expect_rejected<recur::ArgumentError>(s, [&] { conv.prefill(s, X, X); }, {"Y overlaps X"});
  X(2, 5) = std::numeric_limits<float>::infinity();
  expect_rejected<recur::NumericError>(s, [&] { conv.prefill(s, X, Y); },
                                       {"X", "row 2, column 5"});
  const recur::ShortConvolution other(random_matrix(8, 4, 12));
  auto s2 = other.make_state();
  expect_rejected<recur::ArgumentError>(s2, [&] { conv.step(s2, Eigen::VectorXf::Ones(8), y); },
                                        {"state was made for another convolution", "kernel size 4"});
  std::vector<unsigned char> bytes = s.raw_bytes();
  expect_rejected<recur::FormatError>(s, [&] { s.load_raw_bytes(bytes.data(), bytes.size() - 1); },
                                      {"[ShortConvState::load_raw_bytes]", "bytes given"});
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::memcpy(bytes.data() + 4, &nan, sizeof nan);
  expect_rejected<recur::FormatError>(
      s, [&] { s.load_raw_bytes(bytes.data(), bytes.size()); },
      {"the state's history has a non-finite number (nan) at row 0, column 1"});
  CHECK_THROWS_WITH(recur::ShortConvolution(random_matrix(8, 3, 1), Eigen::VectorXf::Ones(7)),
                    Catch::Contains("[ShortConvolution]") && Catch::Contains("bias has 7"));
  RowMatrix Wbad = random_matrix(8, 3, 1);
  Wbad(1, 1) = nan;
  CHECK_THROWS_AS(recur::ShortConvolution(Wbad), recur::NumericError);
  CHECK_THROWS_AS(recur::ShortConvolution(RowMatrix(0, 3)), recur::ShapeError);
}

// ===========================================================================================
// Sliding-window attention

TEST_CASE("sincos_fixed agrees with the C library's double sin and cos", "[based][window]") {
  double worst = 0;
  std::mt19937 rng(21);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  for (int i = 0; i < 20000; ++i) {
    const double x = i < 10000 ? double(i) * 0.37 : std::pow(10.0, 7.0 * unit(rng));
    double s = 0, c = 0;
    recur::sincos_fixed(x, &s, &c);
    const double err = std::max(std::abs(s - std::sin(x)), std::abs(c - std::cos(x)));
    // Below 2^20 pi/2 the reduction is exact; beyond it n * pi/2's first part rounds (2^-53 x).
    worst = std::max(worst, err / (5e-16 + (x >= 1.6e6 ? 2.3e-16 * x : 0.0)));
  }
  double s = 1, c = 0;
  recur::sincos_fixed(0.0, &s, &c);
  CHECK(s == 0.0);
  CHECK(c == 1.0);
  INFO("worst error relative to the bound: " << worst);
  CHECK(worst < 1.0);
}

TEST_CASE("window attention: rotary angles in double, cos and sin within an ulp of float's",
          "[based][window]") {
  recur::WindowAttentionConfig c;
  const recur::WindowAttention layer(c);
  REQUIRE(layer.inv_freq().size() == 32);
  CHECK(layer.inv_freq()[0] == 1.0f);
  CHECK(layer.inv_freq()[1] == static_cast<float>(1.0 / std::pow(10000.0, 2.0 / 64.0)));
  std::vector<float> cs(32), sn(32);
  int off_by_one = 0;
  for (std::int64_t pos : {0, 1, 2, 127, 128, 2047, 100000, 1 << 24}) {
    layer.rotary(pos, cs.data(), sn.data());
    for (std::size_t i = 0; i < 32; ++i) {
      const double a = double(pos) * double(layer.inv_freq()[i]);
      const float ec = static_cast<float>(std::cos(a)), es = static_cast<float>(std::sin(a));
      CHECK(std::abs(cs[i] - ec) <= std::nextafter(std::abs(ec), 2.0f) - std::abs(ec));
      CHECK(std::abs(sn[i] - es) <= std::nextafter(std::abs(es), 2.0f) - std::abs(es));
      off_by_one += (cs[i] != ec) + (sn[i] != es);
    }
  }
  INFO(off_by_one << " of 512 values one float ulp away from float(libm's)");
  CHECK(off_by_one < 8);
}

namespace {

recur::WindowAttentionConfig window_config(int heads, int d, int window) {
  recur::WindowAttentionConfig c;
  c.n_heads = heads;
  c.d_head = d;
  c.window = window;
  return c;
}

}  // namespace

TEST_CASE("window attention: prefill equals step() bit for bit in any split, chunk and thread "
          "count", "[based][window][exactness]") {
  // Windows smaller and larger than the chunks, prompts longer than the window.
  for (const auto& c : {window_config(3, 16, 5), window_config(2, 64, 128), window_config(3, 8, 0),
                        window_config(1, 20, 300)}) {
    const recur::WindowAttention layer(c);
    const Eigen::Index T_max = 650, width = Eigen::Index(c.n_heads) * c.d_head;
    const RowMatrix Q = random_matrix(T_max + 20, width, 31), K = random_matrix(T_max + 20, width, 32);
    const RowMatrix V = random_matrix(T_max + 20, width, 33);
    const int compared = check_prefill_equals_step(
        layer, T_max, width, {0, 1, 2, 129, 130, 650},
        [&](recur::WindowState& s, Eigen::Index a, Eigen::Index n, Eigen::Ref<RowMatrix> out,
            const PrefillOptions& o) {
          layer.prefill(s, Q.middleRows(a, n), K.middleRows(a, n), V.middleRows(a, n), out, o);
        },
        [&](recur::WindowState& s, Eigen::Index t, Eigen::Ref<RowMatrix> out) {
          Eigen::VectorXf o(width);
          layer.step(s, Q.row(t).transpose(), K.row(t).transpose(), V.row(t).transpose(), o);
          out = o.transpose();
        },
        true, fmt::format("window {}, n_heads {}, d_head {}", c.window, c.n_heads, c.d_head));
    CHECK(compared >= 180);
  }
}

TEST_CASE("window attention agrees with float64 banded causal attention with rotary",
          "[based][window]") {
  for (const auto& c : {window_config(2, 64, 128), window_config(3, 16, 5), window_config(1, 32, 0)}) {
    const recur::WindowAttention layer(c);
    const Eigen::Index T = 700, width = Eigen::Index(c.n_heads) * c.d_head;
    const RowMatrix Q = random_matrix(T, width, 41), K = random_matrix(T, width, 42);
    const RowMatrix V = random_matrix(T, width, 43);
    auto s = layer.make_state();
    const RowMatrix out = layer.prefill(s, Q, K, V);
    const double err = relative_error(out, window_reference(layer, Q, K, V));
    INFO("window " << c.window << ", d_head " << c.d_head << ": relative error " << err);
    CHECK(err < kWindowTolerance);
  }
}

TEST_CASE("window attention: a token sees exactly the window, and the state keeps its size "
          "from 100 to 100,000 tokens", "[based][window][state]") {
  const auto c = window_config(2, 16, 32);
  const recur::WindowAttention layer(c);
  const Eigen::Index width = 32;
  // Changing a key and value more than `window` tokens back changes nothing, bit for bit.
  RowMatrix Q = random_matrix(100, width, 51), K = random_matrix(100, width, 52),
            V = random_matrix(100, width, 53);
  auto a = layer.make_state();
  const RowMatrix out_a = layer.prefill(a, Q, K, V);
  K.row(10).setConstant(9.0f);
  V.row(10).setConstant(-9.0f);
  auto b = layer.make_state();
  const RowMatrix out_b = layer.prefill(b, Q, K, V);
  CHECK(first_difference(out_a.topRows(10), out_b.topRows(10)).empty());
  CHECK(!first_difference(out_a.middleRows(10, 33), out_b.middleRows(10, 33)).empty());
  CHECK(first_difference(out_a.bottomRows(100 - 43), out_b.bottomRows(100 - 43)).empty());

  auto s = layer.make_state();
  const std::size_t bytes = s.bytes(), raw = s.raw_size();
  // 2 heads x (33 slots padded to 48) x 16 key floats, 2 x 33 x 16 value floats, the count.
  CHECK(raw == (2u * 16u * 48u + 2u * 33u * 16u) * 4u + 8u);
  Eigen::Index done = 0;
  for (const Eigen::Index upto : {100, 1000, 10000, 100000}) {
    const RowMatrix q = random_matrix(upto - done, width, 54u + std::uint32_t(upto));
    layer.prefill(s, q, q, q);
    done = upto;
    CHECK(s.n_tokens() == upto);
    CHECK(s.bytes() == bytes);
    CHECK(s.raw_size() == raw);
  }
  // Past 100,000 tokens the output still matches the float64 reference at those positions.
  const RowMatrix q2 = random_matrix(80, width, 60), k2 = random_matrix(80, width, 61),
                  v2 = random_matrix(80, width, 62);
  RowMatrix warm = random_matrix(100000, width, 63);
  // The reference sees only the last window tokens before the comparison: feed them again.
  auto s2 = layer.make_state();
  layer.prefill(s2, warm, warm, warm);
  const RowMatrix out2 = layer.prefill(s2, q2, k2, v2);
  RowMatrix Qc(32 + 80, width), Kc(32 + 80, width), Vc(32 + 80, width);
  Qc << warm.bottomRows(32), q2;
  Kc << warm.bottomRows(32), k2;
  Vc << warm.bottomRows(32), v2;
  const RowMatrixD ref = window_reference(layer, Qc, Kc, Vc, 100000 - 32);
  const double err = relative_error(out2, ref.bottomRows(80));
  INFO("relative error at positions 100,000 to 100,079: " << err);
  CHECK(err < kWindowTolerance);
}

TEST_CASE("window attention: clone, reset, save and restore continue bit for bit",
          "[based][window][state]") {
  const recur::WindowAttention layer(window_config(2, 16, 7));
  const RowMatrix X = random_matrix(60, 32, 70);
  auto s = layer.make_state();
  layer.prefill(s, X.topRows(30), X.topRows(30), X.topRows(30));
  auto copy = s.clone();
  const auto saved = s.raw_bytes();
  const RowMatrix a = layer.prefill(s, X.bottomRows(30), X.bottomRows(30), X.bottomRows(30));
  auto restored = layer.make_state();
  restored.load_raw_bytes(saved.data(), saved.size());
  CHECK(restored.n_tokens() == 30);
  CHECK(first_difference(layer.prefill(restored, X.bottomRows(30), X.bottomRows(30), X.bottomRows(30)), a).empty());
  CHECK(first_difference(layer.prefill(copy, X.bottomRows(30), X.bottomRows(30), X.bottomRows(30)), a).empty());
  s.reset();
  CHECK(s.raw_bytes() == layer.make_state().raw_bytes());
}

TEST_CASE("window attention: bad input is refused by name, the state unchanged",
          "[based][window][errors]") {
  const recur::WindowAttention layer(window_config(2, 8, 4));
  auto s = layer.make_state();
  const RowMatrix X = random_matrix(10, 16, 80);
  layer.prefill(s, X, X, X);
  Eigen::VectorXf q = Eigen::VectorXf::Ones(16), o(16), q15(15);
  using recur::ShapeError;
  expect_rejected<ShapeError>(s, [&] { layer.step(s, q15, q, q, o); },
                              {"[WindowAttention::step]", "q has 15 elements", "2 * 8 = 16"});
  expect_rejected<ShapeError>(s, [&] { layer.step(s, q, q, q, q15); }, {"out has 15 elements"});
  Eigen::VectorXf bad = q;
  bad(9) = std::numeric_limits<float>::quiet_NaN();
  expect_rejected<recur::NumericError>(s, [&] { layer.step(s, q, bad, q, o); },
                                       {"[WindowAttention::step]", "k", "element 9 of 16"});
  RowMatrix Y(10, 16), X2 = X;
  X2(4, 2) = -std::numeric_limits<float>::infinity();
  expect_rejected<recur::NumericError>(s, [&] { layer.prefill(s, X, X, X2, Y); },
                                       {"[WindowAttention::prefill]", "V", "row 4, column 2"});
  const RowMatrix X9 = random_matrix(9, 16, 81);
  expect_rejected<ShapeError>(s, [&] { layer.prefill(s, X, X9, X, Y); },
                              {"K has shape (9, 16)", "(10, 2 * 8)"});
  PrefillOptions zero;
  zero.chunk = 0;
  expect_rejected<recur::ArgumentError>(s, [&] { layer.prefill(s, X, X, X, Y, zero); },
                                        {"options.chunk is 0"});
  const recur::WindowAttention other(window_config(2, 8, 5));
  auto s2 = other.make_state();
  expect_rejected<recur::ArgumentError>(s2, [&] { layer.step(s2, q, q, q, o); },
                                        {"state was made for another layer", "window 5", "window 4"});
  auto bytes = s.raw_bytes();
  expect_rejected<recur::FormatError>(s, [&] { s.load_raw_bytes(bytes.data(), 3); },
                                      {"[WindowState::load_raw_bytes]", "3 bytes given"});
  const float inf = std::numeric_limits<float>::infinity();
  std::memcpy(bytes.data() + 8, &inf, sizeof inf);
  expect_rejected<recur::FormatError>(
      s, [&] { s.load_raw_bytes(bytes.data(), bytes.size()); },
      {"the state's keys has a non-finite number (inf) at element 2"});
  CHECK_THROWS_WITH(recur::WindowAttention(window_config(2, 7, 4)),
                    Catch::Contains("[WindowAttention]") && Catch::Contains("d_head is 7"));
  CHECK_THROWS_AS(recur::WindowAttention(window_config(2, 8, -1)), recur::ArgumentError);
}

// ===========================================================================================
// Every instruction set

namespace {

using recur::test::require_same_bytes_under_each_isa;

template <class T>
void append(std::string& out, const T* data, std::size_t n) {
  recur::test::append_bytes(out, data, n);
}

}  // namespace

TEST_CASE("every instruction set gives the same bytes: Taylor attention, the convolution and "
          "the window", "[based][isa][exactness]") {
  const recur::LinearAttention taylor(taylor_config(2, 64));
  const RowMatrix Q = random_matrix(300, 32, 90), K = random_matrix(300, 32, 91);
  const RowMatrix V = random_matrix(300, 128, 92);
  require_same_bytes_under_each_isa([&] {
    auto s = taylor.make_state();
    const RowMatrix o = taylor.prefill(s, Q.topRows(270), K.topRows(270), V.topRows(270));
    std::string bytes;
    append(bytes, o.data(), std::size_t(o.size()));
    for (Eigen::Index t = 270; t < 300; ++t) {
      const Eigen::VectorXf y =
          taylor.step(s, Q.row(t).transpose(), K.row(t).transpose(), V.row(t).transpose());
      append(bytes, y.data(), std::size_t(y.size()));
    }
    const auto raw = s.raw_bytes();
    append(bytes, raw.data(), raw.size());
    return bytes;
  });

  const recur::ShortConvolution conv(random_matrix(40, 3, 93), Eigen::VectorXf(random_matrix(40, 1, 94).col(0)));
  const RowMatrix X = random_matrix(50, 40, 95);
  require_same_bytes_under_each_isa([&] {
    auto s = conv.make_state();
    const RowMatrix y = conv.prefill(s, X.topRows(25));
    std::string bytes;
    append(bytes, y.data(), std::size_t(y.size()));
    for (Eigen::Index t = 25; t < 50; ++t) {
      const Eigen::VectorXf yt = conv.step(s, X.row(t).transpose());
      append(bytes, yt.data(), std::size_t(yt.size()));
    }
    return bytes;
  });

  const recur::WindowAttention window(window_config(2, 64, 40));
  const RowMatrix WQ = random_matrix(200, 128, 96), WK = random_matrix(200, 128, 97),
                  WV = random_matrix(200, 128, 98);
  require_same_bytes_under_each_isa([&] {
    auto s = window.make_state();
    const RowMatrix o = window.prefill(s, WQ.topRows(150), WK.topRows(150), WV.topRows(150));
    std::string bytes;
    append(bytes, o.data(), std::size_t(o.size()));
    for (Eigen::Index t = 150; t < 200; ++t) {
      const Eigen::VectorXf y =
          window.step(s, WQ.row(t).transpose(), WK.row(t).transpose(), WV.row(t).transpose());
      append(bytes, y.data(), std::size_t(y.size()));
    }
    const auto raw = s.raw_bytes();
    append(bytes, raw.data(), raw.size());
    return bytes;
  });
}
