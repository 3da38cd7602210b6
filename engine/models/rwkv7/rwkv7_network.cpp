// RWKV-7's forward pass over rows (docs/rwkv7.md, "The model"), as tests/rwkv7/reference.py
// computes it in float64: every row-wise part is a function of its row alone, and three stages
// depend on the sequence: the time mix's token shift (stage 0), the delta-rule recurrence
// through layers/delta_rule.h's mixer with the gates before it and the read-out's norm after it,
// all per head (stage 1), the channel mix's token shift (stage 2). Every sum
// across channels goes through the canonical sums (kernels::active().sum / sum_squares), the
// products through model::Dense, so no byte depends on the instruction set, the chunking or the
// rows that share a call.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/dispatch.h"
#include "layers/delta_rule.h"
#include "model/declared_state.h"
#include "models/rwkv7/rwkv7_network.h"
#include "recur/error.h"
#include "util/parallel.h"

namespace recur::models::rwkv7 {
namespace {

constexpr int kStageTimeShift = 0, kStageRecurrence = 1, kStageChannelShift = 2;
const double kExpMinusHalf = std::exp(-0.5);  // the decay's scale, e^-0.5

float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

// One sequence's state in one layer: the time mix's and the channel mix's previous normed
// inputs, and S per head, S[h][i][j] with i the value channel and j the key channel (BlinkDL's
// orientation: a row of S is what the read-out and the removal walk).
struct State final : model::DeclaredState<State> {
  static constexpr std::uint32_t kFormat = 1;
  static constexpr const char* kCall = "Rwkv7State::load_raw_bytes";
  static constexpr const char* kWhat = "an RWKV-7 layer's state";
  State(int C, std::size_t s_floats)
      : att_x(std::size_t(C), 0.0f), ffn_x(std::size_t(C), 0.0f), S(s_floats, 0.0f) {}
  std::vector<float> att_x, ffn_x;  // (C) each
  std::vector<float> S;             // (H, N, N)

  // Saved in this order, inside the frame.
  template <class Self, class F>
  static void parts(Self& s, F&& f) {
    f("att_x", s.att_x);
    f("ffn_x", s.ffn_x);
    f("S", s.S);
  }
  MixerKind kind() const override { return MixerKind::kDeltaRule; }
};

struct Rows : model::Scratch {
  // prev: the token-shifted normed rows (cap, C); lerp: the six mixed inputs per row (cap, 6C);
  // r, k, v, w (decay), a (in-context rate), g (gate), kk, neg_kk, b (kk * a), y (the read-out),
  // v_first (layer 0's v), out (a sublayer's output): (cap, C) each; lo: the LoRAs' middles
  // (cap, 4 max rank); ffn: (cap, F). kk, spent once the walk has run, holds the bonus's products.
  std::vector<float> prev, lerp, r, k, v, w, a, g, kk, neg_kk, b, y, v_first, out, lo, ffn;
  std::size_t bytes() const override {
    return Scratch::bytes() + model::buffer_bytes({&prev, &lerp, &r, &k, &v, &w, &a, &g, &kk,
                                                   &neg_kk, &b, &y, &v_first, &out, &lo, &ffn});
  }
};

class Network final : public model::Network {
 public:
  explicit Network(Stack stack) : s_(std::move(stack)), delta_{s_.H, s_.N, s_.N} {}

  std::size_t n_layers() const override { return s_.layers.size(); }

  std::unique_ptr<model::LayerState> make_state(std::size_t) const override {
    return std::make_unique<State>(s_.C, delta_.state_floats());
  }

  std::unique_ptr<model::Scratch> make_scratch(int rows) const override {
    auto w = std::make_unique<Rows>();
    w->cap = rows;
    const auto n = std::size_t(rows), C = std::size_t(s_.C);
    for (auto* b : {&w->x, &w->h, &w->prev, &w->r, &w->k, &w->v, &w->w, &w->a, &w->g, &w->kk,
                    &w->neg_kk, &w->b, &w->y, &w->v_first, &w->out})
      b->assign(n * C, 0.0f);
    w->lerp.assign(n * 6 * C, 0.0f);
    w->lo.assign(n * 4 * std::size_t(s_.max_rank), 0.0f);
    w->ffn.assign(n * std::size_t(s_.F), 0.0f);
    return w;
  }

  void run(model::Scratch& scratch, int n, int threads, model::Attend attend) const override {
    Rows& w = static_cast<Rows&>(scratch);
    const auto C = std::size_t(s_.C);
    if (s_.ln0)
      detail::parallel_rows(n, threads, [&](int r0, int r1) {
        float* rows = w.x.data() + std::size_t(r0) * C;
        s_.ln0_norm.apply(rows, r1 - r0, s_.C, rows, s_.C);
      });
    // x += out, then h = norm(x), over the rows.
    const auto add_then_norm = [&](const model::Norm* norm, bool add) {
      detail::parallel_rows(n, threads, [&](int r0, int r1) {
        const std::size_t at = std::size_t(r0) * C, count = std::size_t(r1 - r0) * C;
        if (add) model::add_inplace(w.x.data() + at, w.out.data() + at, std::int64_t(count));
        if (norm) norm->apply(w.x.data() + at, r1 - r0, s_.C, w.h.data() + at, s_.C);
      });
    };
    for (std::size_t li = 0; li < s_.layers.size(); ++li) {
      const Layer& L = s_.layers[li];
      if (li == 0) add_then_norm(&L.ln1, false);
      attend(li, kStageTimeShift, threads);
      time_mix_inputs(L, w, n, threads);
      attend(li, kStageRecurrence, threads);
      time_mix_output(L, w, n, threads);
      add_then_norm(&L.ln2, true);
      attend(li, kStageChannelShift, threads);
      channel_mix(L, w, n, threads);
      // The residual, and the next layer's ln1 on it in the same pass over the rows.
      add_then_norm(li + 1 < s_.layers.size() ? &s_.layers[li + 1].ln1 : nullptr, true);
    }
  }

  void run_sequence(std::size_t layer, int stage, model::Scratch& scratch,
                    model::LayerState& state, int first, int count, int threads) const override {
    Rows& w = static_cast<Rows&>(scratch);
    State& st = static_cast<State&>(state);
    if (stage == kStageRecurrence)
      return recurrence(s_.layers[layer], layer == 0, st, w, first, count, threads);
    shift(stage == kStageTimeShift ? st.att_x : st.ffn_x, w, first, count);
    if (stage == kStageTimeShift) st.tokens += count;
  }

  void clear_sequence(std::size_t, int stage, model::Scratch& scratch, int first,
                      int count) const override {
    Rows& w = static_cast<Rows&>(scratch);
    std::vector<float>& b = stage == kStageRecurrence ? w.y : w.prev;
    const auto C = std::size_t(s_.C);
    std::fill(b.data() + std::size_t(first) * C, b.data() + std::size_t(first + count) * C, 0.0f);
  }

  std::size_t weight_bytes() const override {
    std::size_t bytes = 0;
    for (const auto& L : s_.layers)
      for (const auto* d : {&L.r, &L.k, &L.v, &L.o, &L.w1, &L.w2, &L.a1, &L.a2, &L.v1, &L.v2,
                            &L.g1, &L.g2, &L.ffn_key, &L.ffn_value})
        bytes += model::dense_bytes(*d);
    return bytes;
  }

 private:
  // prev[t] = h[t - 1] for the sequence's rows; the first row's from the state, the last row
  // into it.
  void shift(std::vector<float>& last, Rows& w, int first, int count) const {
    const auto C = std::size_t(s_.C);
    float* prev = w.prev.data() + std::size_t(first) * C;
    const float* h = w.h.data() + std::size_t(first) * C;
    std::memcpy(prev, last.data(), C * sizeof(float));
    if (count > 1) std::memcpy(prev + C, h, std::size_t(count - 1) * C * sizeof(float));
    std::memcpy(last.data(), h + std::size_t(count - 1) * C, C * sizeof(float));
  }

  // The recurrence over the sequence's rows, its threads splitting the heads: each range
  // computes its heads' gates, walks them (per head: S = S diag(w) + (S (-kk)) (kk a)^T + v k^T,
  // y = S r) and norms their read-out, so that a token crosses the pool once for all three.
  // Each works per channel or per head, so no byte depends on the ranges.
  void recurrence(const Layer& L, bool first_layer, State& st, Rows& w, int first, int count,
                  int threads) const {
    const std::size_t at = std::size_t(first) * std::size_t(s_.C);
    const std::int64_t C = s_.C;
    const kernels::DeltaInputs in{w.w.data() + at, C, false, w.neg_kk.data() + at, C,
                                  w.b.data() + at,  C, w.k.data() + at,           C,
                                  w.r.data() + at,  C, w.v.data() + at,           C};
    detail::parallel_ranges(s_.H, detail::ranges_for(s_.H, threads), threads,
                            [&](int h0, int h1, int) {
      gates(L, first_layer, w, first, first + count, h0, h1);
      delta_.walk_heads(st.S.data(), in, w.y.data() + at, C, count, h0, h1);
      head_norm(L, w, first, first + count, h0, h1);
    });
  }

  // The time mix's products from the mixed inputs xl: r, k, v and the LoRAs (w, a, g and, past
  // layer 0, v's residual mix), y = second(act(first(x))), their middles side by side in lo
  // (max rank apart). Two jobs over the threads: every first product with r, k and v, then the
  // second products.
  void projections(const Layer& L, const float* xl, Rows& w, int n, int threads) const {
    const int C = s_.C, C6 = 6 * C, R4 = 4 * s_.max_rank;
    struct Lora {
      const model::Dense *first, *second;
      const float* x;
      float* y;
      float (*act)(float);
    };
    const Lora loras[] = {
        {&L.w1, &L.w2, xl + C, w.w.data(), [](float x) { return std::tanh(x); }},
        {&L.a1, &L.a2, xl + 4 * C, w.a.data(), [](float x) { return x; }},
        {&L.g1, &L.g2, xl + 5 * C, w.g.data(), sigmoid},
        {&L.v1, &L.v2, xl + 3 * C, w.out.data(), [](float x) { return x; }}};
    // v + (v_first - v) * sigmoid(v0 + xv v1 v2) past layer 0.
    const int n_loras = L.value_residual ? 4 : 3;
    model::DenseCall calls[kernels::kMaxProducts] = {
        {&L.r, xl, n, C6, w.r.data(), C},
        {&L.k, xl + 2 * C, n, C6, w.k.data(), C},
        {&L.v, xl + 3 * C, n, C6, w.v.data(), C}};
    for (int i = 0; i < n_loras; ++i)
      calls[3 + i] = {loras[i].first, loras[i].x, n, C6, w.lo.data() + i * s_.max_rank, R4};
    model::apply_all(calls, 3 + n_loras, threads);
    detail::parallel_rows(n, threads, [&](int r0, int r1) {
      for (int i = 0; i < n_loras; ++i) {
        const int rank = loras[i].first->n_out();
        for (int t = r0; t < r1; ++t) {
          float* lo = w.lo.data() + std::size_t(t) * std::size_t(R4) + std::size_t(i * s_.max_rank);
          for (int j = 0; j < rank; ++j) lo[j] = loras[i].act(lo[j]);
        }
      }
    });
    for (int i = 0; i < n_loras; ++i)
      calls[i] = {loras[i].second, w.lo.data() + i * s_.max_rank, n, R4, loras[i].y, C};
    model::apply_all(calls, n_loras, threads);
  }

  // From the normed rows h and their shifted copies prev: the six mixed inputs and their
  // products (the recurrence's stage computes the gates from them).
  void time_mix_inputs(const Layer& L, Rows& w, int n, int threads) const {
    const int C = s_.C, C6 = 6 * C;
    detail::parallel_rows(n, threads, [&](int r0, int r1) {
      for (int t = r0; t < r1; ++t) {
        const float* x = w.h.data() + std::size_t(t) * std::size_t(C);
        const float* p = w.prev.data() + std::size_t(t) * std::size_t(C);
        float* out = w.lerp.data() + std::size_t(t) * std::size_t(C6);
        for (int m = 0; m < 6; ++m)
          for (int j = 0; j < C; ++j) {
            const float d = p[j] - x[j];
            out[m * C + j] = x[j] + d * L.mix[std::size_t(m * C + j)];
          }
      }
    });
    projections(L, w.lerp.data(), w, n, threads);  // xr, xw, xk, xv, xa, xg at 0, C, ..., 5C
  }

  // Rows [r0, r1) of the gates of heads [h0, h1) from the projections: the decay, a, v's
  // residual, kk and k.
  void gates(const Layer& L, bool first_layer, Rows& w, int r0, int r1, int h0, int h1) const {
    const int C = s_.C, N = s_.N;
    const auto c0 = std::size_t(h0 * N), c1 = std::size_t(h1 * N);
    for (std::size_t row = std::size_t(r0) * std::size_t(C); row < std::size_t(r1) * std::size_t(C);
         row += std::size_t(C)) {
      if (first_layer)
        std::memcpy(w.v_first.data() + row + c0, w.v.data() + row + c0, (c1 - c0) * sizeof(float));
      for (std::size_t j = c0; j < c1; ++j) {
        const std::size_t i = row + j;
        // exp(-e^-0.5 sigmoid(z)), in double from the float z.
        const double z = double(w.w[i]);
        w.w[i] = float(std::exp(-kExpMinusHalf / (1.0 + std::exp(-z))));
        w.a[i] = sigmoid(w.a[i]);
        if (L.value_residual) w.v[i] = w.v[i] + (w.v_first[i] - w.v[i]) * sigmoid(w.out[i]);
        w.kk[i] = w.k[i] * L.k_k[j];
        w.k[i] = w.k[i] * (1.0f + (w.a[i] - 1.0f) * L.k_a[j]);
      }
      // kk normalised per head (BlinkDL: x / max(|x|, 1e-12); fla's fuse_norm: x / sqrt(|x|^2 +
      // 1e-6)).
      for (std::size_t o = row + c0; o < row + c1; o += std::size_t(N)) {
        float* kk = w.kk.data() + o;
        const float ss = kernels::active().sum_squares(kk, N, 0.0f);
        const float den = s_.fla_l2 ? std::sqrt(ss + 1e-6f) : std::max(std::sqrt(ss), 1e-12f);
        for (int j = 0; j < N; ++j) {
          kk[j] = kk[j] / den;
          w.neg_kk[o + std::size_t(j)] = -kk[j];
          w.b[o + std::size_t(j)] = kk[j] * w.a[o + std::size_t(j)];
        }
      }
    }
  }

  // Rows [r0, r1) of heads [h0, h1) of the read-out y: (GroupNorm(y) + (sum_head r k r_k) v) * g.
  void head_norm(const Layer& L, Rows& w, int r0, int r1, int h0, int h1) const {
    const int C = s_.C, N = s_.N;
    const float inv_n = 1.0f / float(N);
    const auto eps = float(s_.lnx_eps);
    for (int t = r0; t < r1; ++t)
      for (int h = h0; h < h1; ++h) {
        const std::size_t c0 = std::size_t(h * N);  // the head's first channel
        const std::size_t o = std::size_t(t) * std::size_t(C) + c0;
        float* y = w.y.data() + o;
        // The bonus's products, in the head's columns of kk (spent once the walk has run).
        float* dot = w.kk.data() + o;
        const float mean = kernels::active().sum(y, N) * inv_n;
        const float var = kernels::active().sum_squares(y, N, mean) * inv_n;
        const float rstd = 1.0f / std::sqrt(var + eps);
        for (int j = 0; j < N; ++j) {
          const std::size_t cj = c0 + std::size_t(j);
          dot[j] = w.r[o + std::size_t(j)] * w.k[o + std::size_t(j)] * L.r_k[cj];
        }
        const float bonus = kernels::active().sum(dot, N);
        for (int j = 0; j < N; ++j) {
          const std::size_t cj = c0 + std::size_t(j);
          const float normed = (y[j] - mean) * rstd * L.lnx_w[cj] + L.lnx_b[cj];
          y[j] = (normed + bonus * w.v[o + std::size_t(j)]) * w.g[o + std::size_t(j)];
        }
      }
  }

  // out = y Wo^T, y normed and gated per head by the recurrence's stage (head_norm).
  void time_mix_output(const Layer& L, Rows& w, int n, int threads) const {
    L.o.apply(w.y.data(), n, s_.C, w.out.data(), s_.C, threads);
  }

  // out = relu(xk Wk^T)^2 Wv^T with xk = h + (prev - h) * x_k.
  void channel_mix(const Layer& L, Rows& w, int n, int threads) const {
    const int C = s_.C, F = s_.F;
    const auto uC = std::size_t(C), uF = std::size_t(F);
    detail::parallel_rows(n, threads, [&](int r0, int r1) {
      for (std::size_t row = std::size_t(r0) * uC; row < std::size_t(r1) * uC; row += uC)
        for (std::size_t j = 0; j < uC; ++j) {
          const float d = w.prev[row + j] - w.h[row + j];
          w.lerp[row + j] = w.h[row + j] + d * L.ffn_x_k[j];
        }
    });
    L.ffn_key.apply(w.lerp.data(), n, C, w.ffn.data(), F, threads);
    detail::parallel_rows(n, threads, [&](int r0, int r1) {
      // relu(x)^2 as x with its bits masked to +0 unless x > 0 (a NaN too), then squared: the
      // bytes of (x > 0 ? x : 0)^2 without a branch. Written as a select of floats, the
      // compiler kept a branch per element (it may not compute x * x where x <= 0 under
      // -ftrapping-math), mispredicted half the time: most of this file's samples.
      float* f = w.ffn.data();
      for (std::size_t i = std::size_t(r0) * uF; i < std::size_t(r1) * uF; ++i) {
        std::uint32_t bits;
        std::memcpy(&bits, &f[i], sizeof bits);
        bits &= f[i] > 0.0f ? ~std::uint32_t(0) : std::uint32_t(0);
        float r;
        std::memcpy(&r, &bits, sizeof r);
        f[i] = r * r;
      }
    });
    L.ffn_value.apply(w.ffn.data(), n, F, w.out.data(), C, threads);
  }

  Stack s_;
  model::DeltaRuleMixer delta_;  // the time mix's recurrence: H heads of N x N
};

}  // namespace

std::unique_ptr<model::Network> make_network(Stack stack) {
  return std::make_unique<Network>(std::move(stack));
}

}  // namespace recur::models::rwkv7
