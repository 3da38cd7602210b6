// The Gated DeltaNet models' forward pass over rows (docs/qwen35.md): pre-norm blocks
// x += mixer(norm(x)); x += mlp(norm(x)), the mixer a Gated DeltaNet or (Qwen3.5) gated full
// attention. Each layer has one stage that depends on the sequence: the Gated DeltaNet's
// convolution and recurrence (through kernels::delta_walk_head, token by token in its one order),
// with the per-head stages around them, or the attention's KV cache. Everything else is a function of one row, its sums through the
// canonical kernels, so no byte depends on the chunking, the threads or the instruction set.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "attention/short_conv_channels.h"
#include "kernels/delta_kernels.h"
#include "kernels/dispatch.h"
#include "layers/mlp.h"
#include "layers/output_gate.h"
#include "layers/sequence.h"
#include "model/declared_state.h"
#include "models/gdn/gdn_network.h"
#include "recur/error.h"
#include "recur/gla_recurrence.h"
#include "util/parallel.h"

namespace recur::models::gdn {
namespace {

constexpr int kStageMixer = 0;

// A Gated DeltaNet layer's state for one sequence: the convolutions' past inputs and S per value
// head, (d_v, d_kp) row-major (row i: what value channel i remembers; the padding columns stay
// zero), and the tokens seen.
struct GdnState final : model::DeclaredState<GdnState> {
  static constexpr std::uint32_t kFormat = 1;
  static constexpr const char* kCall = "GdnState::load_raw_bytes";
  static constexpr const char* kWhat = "this Gated DeltaNet layer's state";
  GdnState(std::vector<ShortConvState> conv_states, std::size_t s_floats)
      : convs(model::copyable(std::move(conv_states))), S(s_floats, 0.0f) {}
  std::vector<model::Copyable<ShortConvState>> convs;
  std::vector<float> S;  // (Hv, d_v, d_kp)

  // Saved in this order, inside the frame.
  template <class Self, class F>
  static void parts(Self& s, F&& f) {
    f("convolutions", s.convs);
    f("S", s.S);
  }
  MixerKind kind() const override { return MixerKind::kDeltaRule; }
};

struct Rows : model::Scratch {
  // a: a sublayer's output (cap, hidden); g, u: the MLP's (cap, intermediate).
  // Gated DeltaNet: qkv, conv (cap, 2K + V); z, vb (beta v), y (the read-out) (cap, V);
  // ba: b then a (cap, 2 Hv); alpha (cap, Hv); qn, kn (cap, Hk d_kp); bb: -alpha beta k
  // (cap, Hv d_kp).
  std::vector<float> a, g, u, qkv, conv, z, vb, y, ba, alpha, qn, kn, bb;
  model::GqaRows attn;
  std::size_t bytes() const override {
    return Scratch::bytes() + model::buffer_bytes({&a, &g, &u, &qkv, &conv, &z, &vb, &y, &ba,
                                                   &alpha, &qn, &kn, &bb}) +
           attn.bytes();
  }
};

float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

// torch's softplus (beta 1, threshold 20), in double.
double softplus(double x) { return x > 20.0 ? x : std::log1p(std::exp(x)); }

// One head's q or k (d_k floats) into y, times scale: delta_net's activation (relu, elu + 1)
// first, then x / sqrt(|x|^2 + 1e-6) (fla's and transformers' l2norm) or x / sum(x).
void normalise(const GdnMixer& m, const float* x, float* y, float scale) {
  const int n = m.d_k;
  if (m.qk_activation == 1) {
    for (int j = 0; j < n; ++j) y[j] = x[j] > 0.0f ? x[j] : 0.0f;
  } else if (m.qk_activation == 2) {  // torch's elu (expm1 below 0), then + 1
    for (int j = 0; j < n; ++j) y[j] = (x[j] > 0.0f ? x[j] : float(std::expm1(double(x[j])))) + 1.0f;
  } else {
    std::memcpy(y, x, std::size_t(n) * sizeof(float));
  }
  if (m.sum_norm) {
    const float sum = kernels::active().sum(y, n);
    for (int j = 0; j < n; ++j) y[j] = y[j] / sum * scale;
    return;
  }
  const float ss = kernels::active().sum_squares(y, n, 0.0f);
  const float inv = 1.0f / std::sqrt(ss + 1e-6f);
  for (int j = 0; j < n; ++j) y[j] = y[j] * inv * scale;
}

class Network final : public model::Network {
 public:
  explicit Network(Stack stack) : s_(std::move(stack)) {}

  std::size_t n_layers() const override { return s_.layers.size(); }

  std::unique_ptr<model::LayerState> make_state(std::size_t layer) const override {
    const Layer& l = s_.layers[layer];
    if (l.attention) return model::make_gqa_state(l.attn);
    const GdnMixer& m = l.gdn;
    std::vector<ShortConvState> convs;
    for (const auto& c : m.convs) convs.push_back(c->make_state());
    return std::make_unique<GdnState>(
        std::move(convs), m.delta().state_floats());
  }

  std::unique_ptr<model::Scratch> make_scratch(int rows) const override {
    auto w = std::make_unique<Rows>();
    w->cap = rows;
    const auto n = std::size_t(rows);
    const auto sized = [&](std::vector<float>& b, std::size_t width) {
      if (b.size() < n * width) b.assign(n * width, 0.0f);
    };
    for (auto* b : {&w->x, &w->h, &w->a}) sized(*b, std::size_t(s_.hidden));
    sized(w->g, std::size_t(s_.intermediate));
    sized(w->u, std::size_t(s_.intermediate));
    for (const auto& l : s_.layers) {
      if (l.attention) {
        w->attn.grow(rows, l.attn);
        continue;
      }
      const GdnMixer& m = l.gdn;
      const auto V = std::size_t(m.Hv) * std::size_t(m.d_v);
      sized(w->qkv, std::size_t(m.conv_width()));
      sized(w->conv, std::size_t(m.conv_width()));
      for (auto* b : {&w->z, &w->vb, &w->y}) sized(*b, V);
      sized(w->ba, 2 * std::size_t(m.Hv));
      sized(w->alpha, std::size_t(m.Hv));
      sized(w->qn, std::size_t(m.Hk) * std::size_t(m.d_kp));
      sized(w->kn, std::size_t(m.Hk) * std::size_t(m.d_kp));
      sized(w->bb, std::size_t(m.Hv) * std::size_t(m.d_kp));
    }
    return w;
  }

  void run(model::Scratch& scratch, int n, int threads, model::Attend attend) const override {
    Rows& w = static_cast<Rows&>(scratch);
    const int d = s_.hidden;
    const auto rows = std::int64_t(n);
    for (std::size_t li = 0; li < s_.layers.size(); ++li) {
      const Layer& L = s_.layers[li];
      L.mixer_norm.apply(w.x.data(), n, d, w.h.data(), d);
      if (L.attention) {
        model::gqa_project(L.attn, w.h.data(), n, d, w.attn, threads);
        attend(li, kStageMixer, threads);
        model::gqa_output(L.attn, w.attn, n, w.a.data(), d, threads);
      } else {
        const GdnMixer& m = L.gdn;
        const int W = m.conv_width(), V = m.Hv * m.d_v;
        // Every projection of the normed rows in one job.
        model::DenseCall calls[kernels::kMaxProducts];
        int c = 0;
        for (std::size_t j = 0; j < m.in_proj.size(); ++j)
          calls[c++] = {&m.in_proj[j], w.h.data(), n, d, w.qkv.data() + m.in_col[j], W};
        if (m.gate) calls[c++] = {&m.z, w.h.data(), n, d, w.z.data(), V};
        if (m.use_beta) calls[c++] = {&m.b, w.h.data(), n, d, w.ba.data(), 2 * m.Hv};
        if (m.decay) calls[c++] = {&m.a, w.h.data(), n, d, w.ba.data() + m.Hv, 2 * m.Hv};
        model::apply_all(calls, c, threads);
        attend(li, kStageMixer, threads);  // y: normed per value head and gated (gated_delta)
        m.out.apply(w.y.data(), n, V, w.a.data(), d, threads);
      }
      model::add_inplace(w.x.data(), w.a.data(), rows * d);
      model::swiglu_mlp(L.mlp_norm, L.gate, L.up, L.down, w.x.data(), w.h.data(), w.g.data(),
                        w.u.data(), w.a.data(), n, d, threads);
    }
  }

  void run_sequence(std::size_t layer, int stage, model::Scratch& scratch,
                    model::LayerState& state, int first, int count, int threads) const override {
    (void)stage;
    Rows& w = static_cast<Rows&>(scratch);
    const Layer& L = s_.layers[layer];
    if (L.attention) return model::gqa_sequence(L.attn, state, w.attn, first, count, threads);
    gated_delta(L.gdn, static_cast<GdnState&>(state), w, first, count, threads);
  }

  void clear_sequence(std::size_t layer, int, model::Scratch& scratch, int first,
                      int count) const override {
    Rows& w = static_cast<Rows&>(scratch);
    const Layer& L = s_.layers[layer];
    if (L.attention) return model::gqa_clear(L.attn, w.attn, first, count);
    const auto width = std::size_t(L.gdn.Hv) * std::size_t(L.gdn.d_v);
    std::fill(w.y.data() + std::size_t(first) * width,
              w.y.data() + std::size_t(first + count) * width, 0.0f);
  }

  std::size_t weight_bytes() const override {
    std::size_t bytes = 0;
    for (const auto& L : s_.layers) {
      for (const auto* d : {&L.gate, &L.up, &L.down, &L.attn.q, &L.attn.k, &L.attn.v, &L.attn.o,
                            &L.gdn.z, &L.gdn.b, &L.gdn.a, &L.gdn.out})
        bytes += model::dense_bytes(*d);
      for (const auto& d : L.gdn.in_proj) bytes += model::dense_bytes(d);
    }
    return bytes;
  }

 private:
  // The Gated DeltaNet over one sequence's rows, its threads splitting the key heads: each range
  // convolves its heads' q, k and v channels, computes their inputs of the delta rule, walks its
  // value heads and norms and gates their read-out, so that a token crosses the pool once for
  // all of it. Every stage works per channel or per head, so no byte depends on the ranges.
  void gated_delta(const GdnMixer& m, GdnState& st, Rows& w, int first, int count,
                   int threads) const {
    check_inputs(m, w, first, count);
    const int G = m.Hv / m.Hk;
    detail::parallel_ranges(m.Hk, detail::ranges_for(m.Hk, threads), threads,
                            [&](int k0, int k1, int) {
      convolve(m, st, w, first, count, k0, k1);
      delta_inputs(m, w, first, count, k0, k1);
      walk(m, st, w, first, count, k0 * G, k1 * G);
      norm_and_gate(m, w, first, count, k0 * G, k1 * G);
    });
    for (auto& c : st.convs) detail::ShortConvChannels::count_tokens(c, count);
    st.tokens += count;
  }

  // What the convolutions' own step() and prefill() check, before any range changes the state:
  // their inputs are finite.
  void check_inputs(const GdnMixer& m, const Rows& w, int first, int count) const {
    const int W = m.conv_width();
    const float* in = w.qkv.data() + std::size_t(first) * std::size_t(W);
    for (std::size_t j = 0; j < m.convs.size(); ++j)
      detail::ShortConvChannels::check_input(*m.convs[j], in + m.conv_col[j], W, count);
  }

  // The conv columns of key heads [k0, k1): their q and k, and their value heads' v.
  void convolve(const GdnMixer& m, GdnState& st, Rows& w, int first, int count, int k0,
                int k1) const {
    const int K = m.Hk * m.d_k, G = m.Hv / m.Hk;
    convolve_columns(m, st, w, first, count, k0 * m.d_k, k1 * m.d_k);
    convolve_columns(m, st, w, first, count, K + k0 * m.d_k, K + k1 * m.d_k);
    convolve_columns(m, st, w, first, count, 2 * K + k0 * G * m.d_v, 2 * K + k1 * G * m.d_v);
  }

  // conv rows = SiLU(the convolutions of the qkv rows) over columns [begin, end) of q, of k or of
  // v, each convolution over the columns it holds with its own past (or, without convolutions,
  // SiLU alone where the layer applies it).
  void convolve_columns(const GdnMixer& m, GdnState& st, Rows& w, int first, int count,
                        int begin, int end) const {
    const int W = m.conv_width();
    const float* in = w.qkv.data() + std::size_t(first) * std::size_t(W);
    float* conv = w.conv.data() + std::size_t(first) * std::size_t(W);
    const auto silu = [&](int a, int b) {
      for (int t = 0; t < count; ++t) {
        float* x = conv + std::size_t(t) * std::size_t(W) + std::size_t(a);
        gates::silu(x, x, b - a);
      }
    };
    if (m.convs.empty()) {
      for (int t = 0; t < count; ++t) {
        const std::size_t at = std::size_t(t) * std::size_t(W) + std::size_t(begin);
        std::memcpy(conv + at, in + at, std::size_t(end - begin) * sizeof(float));
      }
      if (m.qk_activation == 0 || begin >= 2 * m.Hk * m.d_k) silu(begin, end);
      return;
    }
    for (std::size_t j = 0; j < m.convs.size(); ++j) {
      const int col = m.conv_col[j];
      const int a = std::max(begin, col), b = std::min(end, col + m.convs[j]->channels());
      if (a >= b) continue;
      detail::ShortConvChannels::convolve(*m.convs[j], st.convs[j], in + col, W, conv + col, W,
                                          count, a - col, b - col);
      if (m.conv_silu[j]) silu(a, b);
    }
  }

  // Per row, from the convolved q, k, v and the projections b, a, for key heads [k0, k1) and
  // their value heads: q and k normalised (q scaled) into rows padded to d_kp; per value head
  // beta, alpha = exp(g), b = -alpha beta k and beta v.
  void delta_inputs(const GdnMixer& m, Rows& w, int first, int count, int k0, int k1) const {
    const int W = m.conv_width(), K = m.Hk * m.d_k, V = m.Hv * m.d_v;
    const int Kp = m.Hk * m.d_kp, Vp = m.Hv * m.d_kp, G = m.Hv / m.Hk;
    const float q_scale = float(1.0 / std::sqrt(double(m.d_k)));
    for (int t = 0; t < count; ++t) {
      const std::size_t r = std::size_t(first) + std::size_t(t);
      const float* row = w.conv.data() + r * std::size_t(W);
      float* qn = w.qn.data() + r * std::size_t(Kp);
      float* kn = w.kn.data() + r * std::size_t(Kp);
      for (int h = k0; h < k1; ++h) {
        normalise(m, row + h * m.d_k, qn + h * m.d_kp, q_scale);
        normalise(m, row + K + h * m.d_k, kn + h * m.d_kp, 1.0f);
      }
      const float* ba = w.ba.data() + r * std::size_t(2 * m.Hv);
      const float* v = row + 2 * K;
      float* vb = w.vb.data() + r * std::size_t(V);
      float* bb = w.bb.data() + r * std::size_t(Vp);
      float* alpha = w.alpha.data() + r * std::size_t(m.Hv);
      for (int h = k0 * G; h < k1 * G; ++h) {
        float beta = m.use_beta ? sigmoid(ba[h]) : 1.0f;
        if (m.neg_eigval) beta *= 2.0f;
        // g = -exp(A_log) softplus(a + dt_bias); alpha = exp(g), in double, rounded once.
        if (m.decay) {
          const double g = double(m.neg_A[std::size_t(h)]) *
                           softplus(double(ba[m.Hv + h]) + double(m.dt_bias[std::size_t(h)]));
          alpha[h] = float(std::exp(g));
        } else {
          alpha[h] = 1.0f;
        }
        const float c = -(alpha[h] * beta);
        const float* k = kn + (h / G) * m.d_kp;
        for (int j = 0; j < m.d_k; ++j) bb[h * m.d_kp + j] = c * k[j];
        for (int j = 0; j < m.d_v; ++j) vb[h * m.d_v + j] = beta * v[h * m.d_v + j];
      }
    }
  }

  // S_h = alpha S_h + (S_h k) b^T + (beta v) k^T, y = S_h q, per value head h in [v0, v1) over
  // the rows, its key head h / G's q and k. A single token's walk is split too: a head's state
  // (d_v x d_kp floats, 64 KiB in Qwen3.5) is read from memory and written back, which is worth
  // a second core's bandwidth.
  void walk(const GdnMixer& m, GdnState& st, Rows& w, int first, int count, int v0,
            int v1) const {
    const std::int64_t V = m.Hv * m.d_v, Kp = m.Hk * m.d_kp, Vp = m.Hv * m.d_kp;
    const auto row0 = std::size_t(first);
    const float* kn = w.kn.data() + row0 * std::size_t(Kp);
    const kernels::DeltaInputs x{w.alpha.data() + row0 * std::size_t(m.Hv), m.Hv, true,
                                 kn, Kp,
                                 w.bb.data() + row0 * std::size_t(Vp), Vp,
                                 kn, Kp,
                                 w.qn.data() + row0 * std::size_t(Kp), Kp,
                                 w.vb.data() + row0 * std::size_t(V), V};
    m.delta().walk_heads(st.S.data(), x, w.y.data() + row0 * std::size_t(V), V, count, v0, v1);
  }

  // The read-out of value heads [v0, v1) normed per head, then times silu(z) with the gate.
  void norm_and_gate(const GdnMixer& m, Rows& w, int first, int count, int v0, int v1) const {
    const auto V = std::size_t(m.Hv) * std::size_t(m.d_v);
    for (int t = 0; t < count; ++t) {
      const std::size_t at = (std::size_t(first) + std::size_t(t)) * V + std::size_t(v0 * m.d_v);
      model::norm_then_gate(m.out_norm, w.y.data() + at, m.gate ? w.z.data() + at : nullptr, 1,
                            (v1 - v0) * m.d_v, v1 - v0);
    }
  }

  Stack s_;
};

}  // namespace

std::unique_ptr<model::Network> make_network(Stack stack) {
  return std::make_unique<Network>(std::move(stack));
}

}  // namespace recur::models::gdn
