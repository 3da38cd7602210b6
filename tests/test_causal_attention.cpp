// The hybrids' causal softmax attention (CausalAttention): a full layer's blocked prefill (tiles
// of queries against each page of keys) and a windowed layer's walk give, for every split into
// calls, every thread count and every instruction set, the bytes of step() token by token, in
// the outputs and in the state; and both agree with a float64 softmax.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "recur/causal_attention.h"
#include "support/each_isa.h"

using recur::CausalAttention;
using recur::CausalAttentionConfig;
using recur::RowMatrix;

namespace {

constexpr double kTolerance = 1e-5;  // relative to max |o|, against float64

// The inputs of T tokens. `norm` makes each head's q and k rows of RMS 1, as Qwen3.5's q_norm and
// k_norm leave them (then times `q_scale`: large scales make most weights underflow to 0).
struct Inputs {
  RowMatrix Q, K, V;
};
Inputs random_inputs(const CausalAttentionConfig& c, Eigen::Index T, std::uint32_t seed,
                     bool norm, float q_scale) {
  const int kv = c.n_kv_heads > 0 ? c.n_kv_heads : c.n_heads;
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Inputs in{RowMatrix(T, c.n_heads * c.d_head), RowMatrix(T, kv * c.d_head),
            RowMatrix(T, kv * c.d_head)};
  for (RowMatrix* m : {&in.Q, &in.K, &in.V})
    for (Eigen::Index i = 0; i < m->size(); ++i) m->data()[i] = normal(rng);
  if (norm)
    for (RowMatrix* m : {&in.Q, &in.K})
      for (Eigen::Index t = 0; t < T; ++t)
        for (Eigen::Index h = 0; h < m->cols() / c.d_head; ++h) {
          auto x = m->row(t).segment(h * c.d_head, c.d_head);
          x /= std::sqrt(x.squaredNorm() / float(c.d_head));
        }
  in.Q *= q_scale;
  return in;
}

struct Run {
  RowMatrix O;
  std::vector<unsigned char> state;
};

// Every token through step().
Run stepped(const CausalAttention& layer, const Inputs& in) {
  recur::CausalState s = layer.make_state();
  Run r{RowMatrix(in.Q.rows(), in.Q.cols()), {}};
  Eigen::VectorXf o(in.Q.cols());
  for (Eigen::Index t = 0; t < in.Q.rows(); ++t) {
    layer.step(s, in.Q.row(t).transpose(), in.K.row(t).transpose(), in.V.row(t).transpose(), o);
    r.O.row(t) = o.transpose();
  }
  r.state = s.raw_bytes();
  return r;
}

// The tokens in calls of the given sizes, in turn (the last repeated until every token is in).
Run prefilled(const CausalAttention& layer, const Inputs& in, const std::vector<int>& calls,
              int threads) {
  recur::CausalState s = layer.make_state();
  Run r{RowMatrix(in.Q.rows(), in.Q.cols()), {}};
  const Eigen::Index T = in.Q.rows();
  std::size_t k = 0;
  for (Eigen::Index a = 0; a < T;) {
    const Eigen::Index n = std::min<Eigen::Index>(calls[std::min(k++, calls.size() - 1)], T - a);
    Eigen::Map<RowMatrix, 0, Eigen::OuterStride<>> O(r.O.data() + a * r.O.cols(), n, r.O.cols(),
                                                     Eigen::OuterStride<>(r.O.cols()));
    layer.prefill(s, in.Q.middleRows(a, n), in.K.middleRows(a, n), in.V.middleRows(a, n), O,
                  recur::PrefillOptions{int(std::max<Eigen::Index>(1, n / 3)), threads});
    a += n;
  }
  r.state = s.raw_bytes();
  return r;
}

bool same_bytes(const RowMatrix& a, const RowMatrix& b) {
  return a.size() == b.size() &&
         std::memcmp(a.data(), b.data(), std::size_t(a.size()) * sizeof(float)) == 0;
}

// Causal softmax with rotary in float64, the textbook way: the check that the bytes compared
// are those of softmax attention, not of some other function both paths share.
double error_against_float64(const CausalAttention& layer, const Inputs& in, const RowMatrix& O) {
  const CausalAttentionConfig& c = layer.config();
  const int d = c.d_head, G = c.n_heads / layer.config().n_kv_heads;
  const int rot = c.rotary_dim > 0 ? c.rotary_dim : d, half = rot / 2;
  const Eigen::Index T = in.Q.rows();
  auto turned = [&](const float* x, Eigen::Index pos) {
    Eigen::VectorXd y(d);
    for (int i = 0; i < d; ++i) y[i] = x[i];
    for (int i = 0; i < half; ++i) {
      const double inv = std::pow(double(c.rope_theta), -2.0 * i / rot);
      const double a = double(pos) * double(float(inv)), x1 = x[i], x2 = x[i + half];
      y[i] = x1 * std::cos(a) - x2 * std::sin(a);
      y[i + half] = x2 * std::cos(a) + x1 * std::sin(a);
    }
    return y;
  };
  double worst = 0, largest = 0;
  for (int h = 0; h < c.n_heads; ++h) {
    const int g = h / G;
    for (Eigen::Index t = 0; t < T; ++t) {
      const Eigen::Index first = c.window > 0 ? std::max<Eigen::Index>(0, t - c.window) : 0;
      const Eigen::VectorXd q = turned(in.Q.row(t).data() + h * d, t) * double(layer.scale());
      Eigen::VectorXd s(t - first + 1);
      for (Eigen::Index j = first; j <= t; ++j)
        s[j - first] = q.dot(turned(in.K.row(j).data() + g * d, j));
      s = (s.array() - s.maxCoeff()).exp();
      Eigen::VectorXd o = Eigen::VectorXd::Zero(d);
      for (Eigen::Index j = first; j <= t; ++j)
        o += s[j - first] * in.V.row(j).segment(g * d, d).cast<double>().transpose();
      o /= s.sum();
      for (int i = 0; i < d; ++i) {
        worst = std::max(worst, std::abs(double(O(t, h * d + i)) - o[i]));
        largest = std::max(largest, std::abs(o[i]));
      }
    }
  }
  return worst / largest;
}

struct Case {
  const char* name;
  int n_heads, n_kv_heads, d_head, rotary_dim, window;
  bool norm;
  float q_scale;
};

// Qwen3.5's layer in small (GQA 4:1, partial rotary, q and k normed), fla's (every head its own
// kv head, all of d rotary), a head width off the 16-float vectors, a tile of 10 positions (6
// heads per kv head), scores large enough that most weights underflow, and windows shorter and
// longer than a page.
const Case kCases[] = {
    {"Qwen3.5's gated attention: 8 heads over 2, partial rotary, q and k normed", 8, 2, 32, 8, 0,
     true, 1.0f},
    {"fla's attn: 4 heads, rotary over all of d", 4, 4, 16, 0, 0, false, 1.0f},
    {"6 heads over 1, d_head 20", 6, 1, 20, 0, 0, false, 1.0f},
    {"scores so large that most weights are 0", 4, 2, 16, 0, 0, true, 12.0f},
    {"a window of 5 with kv groups", 4, 2, 16, 0, 5, false, 1.0f},
    {"a window of 70, across pages", 2, 1, 32, 16, 70, true, 1.0f},
};

}  // namespace

TEST_CASE("causal attention's prefill gives step's bytes for every split into calls, thread count "
          "and instruction set", "[causal][exactness]") {
  constexpr Eigen::Index T = 203;  // past three pages of 64
  // Calls cutting tiles and pages at odd places: whole, single tokens then larger, a call ending
  // one short of a page, one ending one past it.
  const std::vector<std::vector<int>> splits = {{203}, {1, 2, 61, 1, 65, 7}, {63, 66}, {13}};
  for (const Case& k : kCases) {
    INFO(k.name);
    CausalAttentionConfig c;
    c.n_heads = k.n_heads;
    c.n_kv_heads = k.n_kv_heads;
    c.d_head = k.d_head;
    c.rotary_dim = k.rotary_dim;
    c.window = k.window;
    c.rope_theta = 1e4f;
    const CausalAttention layer(c);
    const Inputs in = random_inputs(c, T, 7, k.norm, k.q_scale);
    recur::test::for_each_isa([&](const std::string& isa) {
      INFO("isa " << isa);
      const Run want = stepped(layer, in);
      if (k.q_scale == 1.0f) CHECK(error_against_float64(layer, in, want.O) < kTolerance);
      for (const auto& split : splits)
        for (const int threads : {1, 2, 3}) {
          INFO("first call " << split[0] << " tokens, " << split.size() << " sizes, threads "
                             << threads);
          const Run got = prefilled(layer, in, split, threads);
          CHECK(same_bytes(got.O, want.O));
          CHECK(got.state == want.state);
        }
    });
  }
}

TEST_CASE("a prefilled causal state continues under step with the bytes of one stepped run",
          "[causal][exactness]") {
  CausalAttentionConfig c;
  c.n_heads = 8;
  c.n_kv_heads = 2;
  c.d_head = 32;
  c.rotary_dim = 8;
  const CausalAttention layer(c);
  const Inputs in = random_inputs(c, 150, 11, true, 1.0f);
  const Run want = stepped(layer, in);
  recur::CausalState s = layer.make_state();
  RowMatrix O(100, in.Q.cols());
  layer.prefill(s, in.Q.topRows(100), in.K.topRows(100), in.V.topRows(100), O, {100, 2});
  CHECK(same_bytes(O, want.O.topRows(100)));
  Eigen::VectorXf o(in.Q.cols());
  bool same = true;
  for (Eigen::Index t = 100; t < 150; ++t) {
    layer.step(s, in.Q.row(t).transpose(), in.K.row(t).transpose(), in.V.row(t).transpose(), o);
    same = same && std::memcmp(o.data(), want.O.row(t).data(), sizeof(float) * std::size_t(o.size())) == 0;
  }
  CHECK(same);
  CHECK(s.raw_bytes() == want.state);
}
