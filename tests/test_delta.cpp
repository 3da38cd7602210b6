// The delta rule's state-update kernel (engine/kernels/delta_kernels.h): against a float64
// recurrence over thousands of RWKV-7-like and Gated-DeltaNet-like tokens, the canonical order
// pinned by a plain float32 copy of it written here (and other trees and update orders seen to
// give other bytes), a walk of T tokens equal to T steps and to any split, the same bytes under
// every instruction set, a decay per token equal to a broadcast row, and bad input refused with
// the state untouched; the delta-rule mixer (layers/delta_rule.h) walking every head through
// its own inputs and its key head's. A hidden case measures the drift against float64 over a million tokens.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/delta_kernels.h"
#include "layers/delta_rule.h"
#include "recur/error.h"
#include "support/each_isa.h"

namespace {

using recur::kernels::DeltaHeadView;
using recur::kernels::DeltaInputs;

// max |y - y64| / max |y64| over every token: 2,000 to 4,000 tokens of d 32, 64 and 128
// measured 0.9e-7 to 1.5e-7 (RWKV-7-like and Gated-DeltaNet-like), the float32 rounding of a
// contracting recurrence; the bound leaves a factor of about 7.
constexpr double kReferenceTolerance = 1e-6;
// The negative controls' orders over 300 tokens: the worst, one FMA chain over d_k = 512,
// measured 7.4e-7.
constexpr double kOtherOrderTolerance = 5e-6;
// The same figure over 2^20 tokens of d 64 (the hidden drift case): measured 1.2e-7 after 4K
// tokens and 1.8e-7 after 1M. It does not grow with the length: the decay forgets old rounding
// errors.
constexpr double kDriftTolerance = 1e-6;

// One head's inputs over T tokens, stored as a layer's projections are: (T, H * d) row-major,
// this head at column offset `head * d`. w is (T, H) when a decay is given per token.
struct Stream {
  int T = 0, H = 1, head = 0, dk = 0, dv = 0;
  bool w_per_token = false;
  std::vector<float> w, a, b, k, r, v;

  std::int64_t row_k() const { return std::int64_t(H) * dk; }
  std::int64_t row_v() const { return std::int64_t(H) * dv; }
  std::int64_t w_stride() const { return w_per_token ? H : row_k(); }
  const float* at_k(const std::vector<float>& x, int t) const {
    return x.data() + t * row_k() + head * dk;
  }
  float w_at(int t, int j) const {
    return w_per_token ? w[std::size_t(t * H + head)] : at_k(w, t)[j];
  }
  // The kernel's view of tokens [t0, T).
  DeltaInputs inputs(int t0 = 0) const {
    DeltaInputs x;
    x.w = w_per_token ? w.data() + t0 * H + head : at_k(w, t0);
    x.w_stride = w_stride();
    x.w_per_token = w_per_token;
    x.a = at_k(a, t0), x.a_stride = row_k();
    x.b = at_k(b, t0), x.b_stride = row_k();
    x.k = at_k(k, t0), x.k_stride = row_k();
    x.r = at_k(r, t0), x.r_stride = row_k();
    x.v = v.data() + t0 * row_v() + head * dv, x.v_stride = row_v();
    return x;
  }
};

void normalize(float* x, int n) {
  double s = 0;
  for (int j = 0; j < n; ++j) s += double(x[j]) * double(x[j]);
  const auto inv = float(1.0 / std::sqrt(s));
  for (int j = 0; j < n; ++j) x[j] *= inv;
}

float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

// RWKV-7's values: w = exp(-e^-0.5 sigmoid(x)) in (0.545, 1) per channel, kk a unit vector,
// a = -kk, b = kk * a_gate with a_gate in (0, 1); k, v, r of order 1.
Stream rwkv_stream(int T, int H, int head, int dk, int dv, std::uint32_t seed) {
  Stream s;
  s.T = T, s.H = H, s.head = head, s.dk = dk, s.dv = dv;
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const auto nk = std::size_t(T) * std::size_t(H) * std::size_t(dk);
  for (auto* x : {&s.w, &s.a, &s.b, &s.k, &s.r}) x->resize(nk);
  s.v.resize(std::size_t(T) * std::size_t(H) * std::size_t(dv));
  const float e = std::exp(-0.5f);
  for (std::size_t i = 0; i < nk; ++i) {
    s.w[i] = std::exp(-e * sigmoid(2.0f * normal(rng)));
    s.k[i] = 0.5f * normal(rng);
    s.r[i] = 0.5f * normal(rng);
    s.b[i] = sigmoid(normal(rng));  // a_gate, times kk below
    s.a[i] = normal(rng);           // kk before the norm
  }
  for (std::size_t i = 0; i < nk; i += std::size_t(dk)) {
    normalize(&s.a[i], dk);
    for (int j = 0; j < dk; ++j) {
      s.b[i + std::size_t(j)] *= s.a[i + std::size_t(j)];
      s.a[i + std::size_t(j)] = -s.a[i + std::size_t(j)];
    }
  }
  for (auto& x : s.v) x = normal(rng);
  return s;
}

// Gated DeltaNet's values: alpha = exp(g) in (0.9, 1) per token and head, k and q unit vectors,
// beta in (0, 1); a = k, b = -alpha beta k, v scaled by beta, r = q / sqrt(d_k). With
// `broadcast`, alpha is written out as a row of w instead of one float per token.
Stream gdn_stream(int T, int H, int head, int dk, int dv, std::uint32_t seed, bool broadcast) {
  Stream s;
  s.T = T, s.H = H, s.head = head, s.dk = dk, s.dv = dv, s.w_per_token = !broadcast;
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
  const auto nk = std::size_t(T) * std::size_t(H) * std::size_t(dk);
  for (auto* x : {&s.a, &s.b, &s.k, &s.r}) x->resize(nk);
  s.w.resize(broadcast ? nk : std::size_t(T) * std::size_t(H));
  s.v.resize(std::size_t(T) * std::size_t(H) * std::size_t(dv));
  const float scale = 1.0f / std::sqrt(float(dk));
  for (int t = 0; t < T; ++t)
    for (int h = 0; h < H; ++h) {
      const float alpha = 0.9f + 0.1f * uniform(rng), beta = uniform(rng);
      const std::size_t o = (std::size_t(t) * std::size_t(H) + std::size_t(h)) * std::size_t(dk);
      for (int j = 0; j < dk; ++j) {
        s.k[o + std::size_t(j)] = normal(rng);
        s.r[o + std::size_t(j)] = normal(rng);
      }
      normalize(&s.k[o], dk);
      normalize(&s.r[o], dk);
      for (int j = 0; j < dk; ++j) {
        const std::size_t i = o + std::size_t(j);
        s.a[i] = s.k[i];
        s.b[i] = -alpha * beta * s.k[i];
        s.r[i] *= scale;
        if (broadcast) s.w[i] = alpha;
      }
      if (!broadcast) s.w[std::size_t(t) * std::size_t(H) + std::size_t(h)] = alpha;
      const std::size_t ov = (std::size_t(t) * std::size_t(H) + std::size_t(h)) * std::size_t(dv);
      for (int i = 0; i < dv; ++i) s.v[ov + std::size_t(i)] = beta * normal(rng);
    }
  return s;
}

// The recurrence in float64 from the same float inputs. Returns y (T, dv); S (dv, dk) continues.
std::vector<double> reference(const Stream& s, std::vector<double>& S) {
  std::vector<double> y(std::size_t(s.T) * std::size_t(s.dv));
  std::vector<double> w(std::size_t(s.dk));
  for (int t = 0; t < s.T; ++t) {
    const float *a = s.at_k(s.a, t), *b = s.at_k(s.b, t), *k = s.at_k(s.k, t),
                *r = s.at_k(s.r, t), *v = s.v.data() + t * s.row_v() + s.head * s.dv;
    for (int j = 0; j < s.dk; ++j) w[std::size_t(j)] = double(s.w_at(t, j));
    for (int i = 0; i < s.dv; ++i) {
      double* row = &S[std::size_t(i) * std::size_t(s.dk)];
      double sa = 0, o = 0;
      for (int j = 0; j < s.dk; ++j) sa += row[j] * double(a[j]);
      for (int j = 0; j < s.dk; ++j) {
        row[j] = row[j] * w[std::size_t(j)] + sa * double(b[j]) + double(v[i]) * double(k[j]);
        o += row[j] * double(r[j]);
      }
      y[std::size_t(t) * std::size_t(s.dv) + std::size_t(i)] = o;
    }
  }
  return y;
}

// The canonical order of delta_kernels.h in plain scalar float32, and the orders the negative
// controls use instead.
enum class Order {
  kCanonical,
  kSequentialTree,  // the 16 chains added 0, 1, ..., 15
  kPairTree,        // the tree over neighbours first: s[2c] + s[2c + 1], ...
  kOneChain,        // the textbook dot product: one FMA chain over j
  kSwappedUpdate,   // fma(sa, b, fma(v, k, S * w)): the same terms, the other rounding order
};

float dot(const float* x, const float* y, int n, Order order) {
  if (order == Order::kOneChain) {
    float s = 0.0f;
    for (int j = 0; j < n; ++j) s = std::fma(x[j], y[j], s);
    return s;
  }
  float c[16] = {};
  for (int j = 0; j < n; ++j) c[j % 16] = std::fma(x[j], y[j], c[j % 16]);
  if (order == Order::kSequentialTree) {
    float s = c[0];
    for (int i = 1; i < 16; ++i) s += c[i];
    return s;
  }
  if (order == Order::kPairTree) {
    for (int step = 1; step < 16; step *= 2)
      for (int i = 0; i + step < 16; i += 2 * step) c[i] += c[i + step];
    return c[0];
  }
  for (int width = 8; width >= 1; width /= 2)
    for (int i = 0; i < width; ++i) c[i] += c[i + width];
  return c[0];
}

std::vector<float> plain_walk(const Stream& s, std::vector<float>& S, Order order) {
  std::vector<float> y(std::size_t(s.T) * std::size_t(s.dv));
  for (int t = 0; t < s.T; ++t) {
    const float *a = s.at_k(s.a, t), *b = s.at_k(s.b, t), *k = s.at_k(s.k, t),
                *r = s.at_k(s.r, t), *v = s.v.data() + t * s.row_v() + s.head * s.dv;
    for (int i = 0; i < s.dv; ++i) {
      float* row = &S[std::size_t(i) * std::size_t(s.dk)];
      const float sa = dot(row, a, s.dk, order);
      for (int j = 0; j < s.dk; ++j) {
        const float sw = row[j] * s.w_at(t, j);
        row[j] = order == Order::kSwappedUpdate ? std::fma(sa, b[j], std::fma(v[i], k[j], sw))
                                                : std::fma(v[i], k[j], std::fma(sa, b[j], sw));
      }
      y[std::size_t(t) * std::size_t(s.dv) + std::size_t(i)] = dot(row, r, s.dk, order);
    }
  }
  return y;
}

// The kernel over tokens [t0, t0 + n), S continuing; y written at its rows.
void walk(const Stream& s, std::vector<float>& S, std::vector<float>& y, int t0, int n) {
  const DeltaHeadView h{S.data(), s.dk, s.dv};
  recur::kernels::delta_walk_head(h, s.inputs(t0), y.data() + std::size_t(t0) * std::size_t(s.dv),
                                  s.dv, n);
}

std::vector<float> walk_all(const Stream& s, std::vector<float>& S) {
  std::vector<float> y(std::size_t(s.T) * std::size_t(s.dv));
  walk(s, S, y, 0, s.T);
  return y;
}

std::vector<float> zero_state(const Stream& s) {
  return std::vector<float>(std::size_t(s.dk) * std::size_t(s.dv), 0.0f);
}

double relative_error(const std::vector<float>& y, const std::vector<double>& ref) {
  double err = 0, scale = 0;
  for (std::size_t i = 0; i < y.size(); ++i) {
    err = std::max(err, std::abs(double(y[i]) - ref[i]));
    scale = std::max(scale, std::abs(ref[i]));
  }
  return err / scale;
}

// The index of the first float whose bytes differ, or -1: a readable failure.
long first_difference(const std::vector<float>& x, const std::vector<float>& y) {
  if (x.size() != y.size()) return -2;
  for (std::size_t i = 0; i < x.size(); ++i)
    if (std::memcmp(&x[i], &y[i], sizeof(float)) != 0) return long(i);
  return -1;
}

struct Shape {
  int dk, dv;
};
// The models' sizes (64, 128); groups of rows (8 on AVX-512, 4 elsewhere) with rows left over
// (5, 7, 33, 6, 3); rows of 1 to 32 vectors of 16, and d_k 48, which is no power of two.
const Shape kShapes[] = {{64, 64}, {128, 128}, {16, 5}, {32, 7}, {48, 33}, {64, 6}, {512, 3}};

std::string describe(const Shape& sh) {
  return "d_k " + std::to_string(sh.dk) + ", d_v " + std::to_string(sh.dv);
}

}  // namespace

TEST_CASE("the delta walk follows the float64 recurrence over thousands of tokens", "[delta]") {
  for (const bool gdn : {false, true}) {
    for (const Shape sh : {Shape{64, 64}, Shape{128, 128}, Shape{32, 7}}) {
      const int T = sh.dk == 128 ? 2000 : 4000;
      INFO((gdn ? "Gated DeltaNet, " : "RWKV-7, ") << describe(sh) << ", T " << T);
      const Stream s = gdn ? gdn_stream(T, 2, 1, sh.dk, sh.dv, 11, false)
                           : rwkv_stream(T, 2, 1, sh.dk, sh.dv, 11);
      std::vector<double> S64(std::size_t(sh.dk) * std::size_t(sh.dv), 0.0);
      const auto ref = reference(s, S64);
      auto S = zero_state(s);
      const auto y = walk_all(s, S);
      const double err = relative_error(y, ref);
      INFO("relative error " << err);
      CHECK(err < kReferenceTolerance);
    }
  }
}

TEST_CASE("the delta kernel computes the canonical order, and other trees and update orders "
          "give other bytes", "[delta][exactness]") {
  for (const Shape& sh : kShapes) {
    INFO(describe(sh));
    const Stream s = rwkv_stream(300, 3, 2, sh.dk, sh.dv, 5);
    auto S = zero_state(s);
    const auto y = walk_all(s, S);
    auto S_plain = zero_state(s);
    const auto y_plain = plain_walk(s, S_plain, Order::kCanonical);
    CHECK(first_difference(y, y_plain) == -1);
    CHECK(first_difference(S, S_plain) == -1);
    // The negative controls: each agrees closely, none in the bytes.
    std::vector<double> S64(S.size(), 0.0);
    const auto ref = reference(s, S64);
    for (const Order other : {Order::kSequentialTree, Order::kPairTree, Order::kOneChain,
                              Order::kSwappedUpdate}) {
      INFO("order " << int(other));
      auto S_other = zero_state(s);
      const auto y_other = plain_walk(s, S_other, other);
      CHECK(first_difference(y, y_other) != -1);
      CHECK(relative_error(y_other, ref) < kOtherOrderTolerance);
    }
  }
}

TEST_CASE("a walk of T tokens gives the bytes of T steps and of any split into walks",
          "[delta][exactness]") {
  for (const Shape& sh : kShapes) {
    for (const bool gdn : {false, true}) {
      INFO(describe(sh) << (gdn ? ", Gated DeltaNet" : ", RWKV-7"));
      const int T = 257;  // past several token blocks of the walk, and not a multiple of any
      const Stream s = gdn ? gdn_stream(T, 2, 0, sh.dk, sh.dv, 7, false)
                           : rwkv_stream(T, 2, 0, sh.dk, sh.dv, 7);
      auto S_walk = zero_state(s);
      const auto y_walk = walk_all(s, S_walk);
      // One token at a time, through the step entry point.
      auto S_step = zero_state(s);
      std::vector<float> y_step(y_walk.size());
      for (int t = 0; t < T; ++t) {
        const DeltaHeadView h{S_step.data(), s.dk, s.dv};
        float* y = y_step.data() + std::size_t(t) * std::size_t(s.dv);
        recur::kernels::delta_step_head(h, s.inputs(t), y);
      }
      CHECK(first_difference(y_walk, y_step) == -1);
      CHECK(first_difference(S_walk, S_step) == -1);
      // Uneven walks.
      for (const int chunk : {1, 3, 7, 16, 33, 64, 100}) {
        INFO("chunk " << chunk);
        auto S = zero_state(s);
        std::vector<float> y(y_walk.size());
        for (int t0 = 0; t0 < T; t0 += chunk) walk(s, S, y, t0, std::min(chunk, T - t0));
        CHECK(first_difference(y_walk, y) == -1);
        CHECK(first_difference(S_walk, S) == -1);
      }
    }
  }
}

TEST_CASE("a decay given once per token gives the bytes of the same decay written out as a row",
          "[delta][exactness]") {
  for (const Shape sh : {Shape{64, 64}, Shape{128, 128}, Shape{48, 33}, Shape{512, 3}}) {
    INFO(describe(sh));
    const Stream per_token = gdn_stream(100, 3, 1, sh.dk, sh.dv, 9, false);
    const Stream broadcast = gdn_stream(100, 3, 1, sh.dk, sh.dv, 9, true);
    auto S1 = zero_state(per_token), S2 = zero_state(broadcast);
    const auto y1 = walk_all(per_token, S1);
    const auto y2 = walk_all(broadcast, S2);
    CHECK(first_difference(y1, y2) == -1);
    CHECK(first_difference(S1, S2) == -1);
    // And a different decay does change them: the per-token value is read.
    Stream other = per_token;
    other.w[std::size_t(50 * 3 + 1)] *= 0.5f;
    auto S3 = zero_state(other);
    const auto y3 = walk_all(other, S3);
    CHECK(first_difference(y1, y3) == 50 * sh.dv);
  }
}

TEST_CASE("the delta-rule mixer walks each value head through its own w, b and v and its key "
          "head's a, k and r, in any ranges of heads",
          "[delta][layers]") {
  constexpr int kHv = 4, kHk = 2, kDk = 16, kDv = 8, kT = 9;
  std::mt19937 rng(17);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  const auto filled = [&](int width) {
    std::vector<float> x(std::size_t(kT) * std::size_t(width));
    for (auto& e : x) e = unit(rng);
    return x;
  };
  auto w = filled(kHv);  // one decay per head and token, in [0.8, 1]
  for (auto& e : w) e = 0.9f + 0.1f * e;
  const auto a = filled(kHk * kDk), k = filled(kHk * kDk), r = filled(kHk * kDk);
  const auto b = filled(kHv * kDk), v = filled(kHv * kDv);
  const std::int64_t K = kHk * kDk, B = kHv * kDk, V = kHv * kDv;

  // Each head by the kernel alone, its inputs found here.
  std::vector<float> S_expected(std::size_t(kHv * kDv * kDk), 0.0f), y_expected(std::size_t(kT * V));
  for (int h = 0; h < kHv; ++h) {
    const int kh = h / (kHv / kHk);
    const DeltaHeadView view{S_expected.data() + h * kDv * kDk, kDk, kDv};
    const DeltaInputs x{w.data() + h, kHv, true, a.data() + kh * kDk, K, b.data() + h * kDk, B,
                        k.data() + kh * kDk, K, r.data() + kh * kDk, K, v.data() + h * kDv, V};
    recur::kernels::delta_walk_head(view, x, y_expected.data() + h * kDv, V, kT);
  }

  const recur::model::DeltaRuleMixer mixer{kHv, kDk, kDv, kHv / kHk, true};
  REQUIRE(mixer.state_floats() == S_expected.size());
  const DeltaInputs x{w.data(), kHv, true, a.data(), K, b.data(), B,
                      k.data(), K,   r.data(), K,    v.data(), V};
  // All heads at once, and in ranges of heads as threads would take them.
  for (const int split : {kHv, 1, 3}) {
    INFO("heads in ranges of " << split);
    std::vector<float> S(mixer.state_floats(), 0.0f), y(std::size_t(kT * V));
    for (int h = 0; h < kHv; h += split)
      mixer.walk_heads(S.data(), x, y.data(), V, kT, h, std::min(h + split, kHv));
    CHECK(first_difference(S, S_expected) == -1);
    CHECK(first_difference(y, y_expected) == -1);
  }
}

TEST_CASE("the delta walk gives the scalar target's bytes under every instruction set",
          "[delta][isa]") {
  for (const Shape& sh : kShapes) {
    for (const bool gdn : {false, true}) {
      INFO(describe(sh) << (gdn ? ", Gated DeltaNet" : ", RWKV-7"));
      const Stream s = gdn ? gdn_stream(150, 2, 1, sh.dk, sh.dv, 3, false)
                           : rwkv_stream(150, 2, 1, sh.dk, sh.dv, 3);
      // 100 tokens in one walk, then 50 steps; y and S, per instruction set.
      recur::test::require_same_bytes_under_each_isa([&] {
        auto S = zero_state(s);
        std::vector<float> y(std::size_t(s.T) * std::size_t(s.dv));
        walk(s, S, y, 0, 100);
        for (int t = 100; t < s.T; ++t) walk(s, S, y, t, 1);
        std::string bytes;
        recur::test::append_bytes(bytes, y.data(), y.size());
        recur::test::append_bytes(bytes, S.data(), S.size());
        return bytes;
      });
    }
  }
}

TEST_CASE("bad sizes and pointers are refused, naming the call and the sizes, state untouched",
          "[delta][errors]") {
  const Stream s = rwkv_stream(4, 1, 0, 64, 8, 1);
  auto S = zero_state(s);
  std::vector<float> y(std::size_t(4 * 8));
  walk(s, S, y, 0, 2);  // a state that is not all zeros
  const auto S_before = S;
  const auto y_before = y;
  const auto refused = [&](DeltaHeadView h, DeltaInputs x, std::int64_t y_stride, int n,
                           const std::string& want) {
    INFO("expecting: " << want);
    try {
      recur::kernels::delta_walk_head(h, x, y.data(), y_stride, n);
      FAIL("accepted");
    } catch (const recur::Error& e) {
      const std::string what = e.what();
      INFO(what);
      CHECK(what.find("[kernels::delta_walk_head]") != std::string::npos);
      CHECK(what.find(want) != std::string::npos);
    }
    CHECK(first_difference(S, S_before) == -1);
    CHECK(first_difference(y, y_before) == -1);
  };
  const DeltaHeadView good{S.data(), 64, 8};
  const DeltaInputs in = s.inputs(2);
  const DeltaHeadView odd{S.data(), 40, 8};
  CHECK_THROWS_AS(recur::kernels::delta_walk_head(odd, in, y.data(), 8, 2), recur::ShapeError);
  refused({S.data(), 40, 8}, in, 8, 2,
          "d_k is 40 (with d_v 8), expected a positive multiple of 16");
  refused({S.data(), 0, 8}, in, 8, 2, "d_k is 0");
  refused({S.data(), 64, 0}, in, 8, 2, "d_v is 0 (with d_k 64)");
  refused({S.data(), 64, 1 << 20}, in, 8, 2, "d_v is 1048576");
  refused({nullptr, 64, 8}, in, 8, 2, "S is null");
  refused(good, in, 8, -1, "n is -1");
  refused(good, in, 7, 2, "y_stride is 7, expected at least d_v = 8 for 2 tokens");
  DeltaInputs bad = in;
  bad.k = nullptr;
  refused(good, bad, 8, 2, "k is null");
  bad = in;
  bad.v_stride = -8;
  refused(good, bad, 8, 2, "v_stride is -8");
  CHECK_THROWS_AS(recur::kernels::delta_walk_head(good, in, nullptr, 8, 2), recur::ArgumentError);
  // n = 0 does nothing; one token ignores y_stride.
  recur::kernels::delta_walk_head(good, in, y.data(), 8, 0);
  CHECK(first_difference(S, S_before) == -1);
  recur::kernels::delta_walk_head(good, in, y.data() + 16, 0, 1);
  CHECK(first_difference(S, S_before) != -1);
}

// The decay bounds S, so one float32 level should not drift as linear attention's undecayed sums
// do (docs/design.md, "Why the state has two levels"). Over 2^20 tokens of one RWKV-7-like head
// (d 64), the worst relative error of y against the float64 recurrence, per window, printed at
// powers of 4 and bounded at the end.
TEST_CASE("a million tokens of the delta walk stay within the stated error of float64",
          "[.][delta][fidelity]") {
  constexpr int dk = 64, dv = 64, kBlock = 4096;
  constexpr int kBlocks = (1 << 20) / kBlock;
  std::vector<float> S(std::size_t(dk) * dv, 0.0f);
  std::vector<double> S64(S.size(), 0.0);
  double worst = 0;
  for (int blk = 0; blk < kBlocks; ++blk) {
    const Stream s = rwkv_stream(kBlock, 1, 0, dk, dv, std::uint32_t(1000 + blk));
    const auto ref = reference(s, S64);
    const auto y = walk_all(s, S);
    const double err = relative_error(y, ref);
    worst = std::max(worst, err);
    const int tokens = (blk + 1) * kBlock;
    const bool power_of_4 = (tokens & (tokens - 1)) == 0 && (tokens & 0x55555555) != 0;
    if (power_of_4 || blk + 1 == kBlocks)
      WARN("after " << tokens << " tokens: worst relative error " << worst << " (this window "
                    << err << ")");
  }
  CHECK(worst < kDriftTolerance);
}
