// flash-linear-attention's gated models: the layer stack. Pre-norm blocks x += mixer(RMSNorm(x));
// x += GatedMLP(RMSNorm(x)); the mixer (GLA, RetNet, HGRN2 recurrences with their short
// convolutions, or softmax attention) over each sequence's rows. docs/fla-models.md.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "attention/rotary.h"
#include "kernels/dispatch.h"
#include "layers/mlp.h"
#include "layers/output_gate.h"
#include "layers/sequence.h"
#include "model/declared_state.h"
#include "models/gla/gla_layers.h"
#include "recur/error.h"

namespace recur::models::gla {
namespace {

// Rows (n, heads * width) of src repeated so that head j reads group j / G: fla's repeat of each
// kv head G times ('... (h d) -> ... (h g) d').
void repeat_heads(const float* src, float* dst, int n, int groups_in, int G, int width) {
  const std::size_t in = std::size_t(groups_in) * std::size_t(width);
  for (int t = 0; t < n; ++t)
    for (int j = 0; j < groups_in * G; ++j)
      std::memcpy(dst + std::size_t(t) * in * std::size_t(G) + std::size_t(j) * std::size_t(width),
                  src + std::size_t(t) * in + std::size_t(j / G) * std::size_t(width),
                  sizeof(float) * std::size_t(width));
}

// fla's RotaryEmbedding (GPT-NeoX halves, not interleaved) on `heads` heads of each row, at
// positions pos0 + t; cos and sin from the double routine WindowAttention uses.
void rotate_rows(const float* x, float* y, int n, int heads, int d, std::int64_t pos0,
                 const std::vector<float>& inv_freq) {
  const int half = d / 2;
  for (int t = 0; t < n; ++t) {
    for (int i = 0; i < half; ++i) {
      const double angle = double(pos0 + t) * double(inv_freq[std::size_t(i)]);
      double sd = 0.0, cd = 0.0;
      sincos_fixed(angle, &sd, &cd);
      const float c = float(cd), s = float(sd);
      for (int h = 0; h < heads; ++h) {
        const std::size_t at = std::size_t(t) * std::size_t(heads * d) + std::size_t(h * d);
        const float x1 = x[at + std::size_t(i)], x2 = x[at + std::size_t(i + half)];
        y[at + std::size_t(i)] = x1 * c - x2 * s;
        y[at + std::size_t(i + half)] = x2 * c + x1 * s;
      }
    }
  }
}

struct MixerIo {
  int a = 0, b = 0, c = 0, d = 0, scratch = 0, out = 0;
};

// The rows one sequence's part reads and writes (null when unused); row r of each starts at r
// times its width in mixer_io().
struct MixerRows {
  const float* a = nullptr;
  const float* b = nullptr;
  const float* c = nullptr;
  const float* d = nullptr;
  float* scratch = nullptr;
  float* out = nullptr;
};

struct Rows : model::Scratch {
  // a: a sublayer's output (cap, hidden); q, k, v: the projections, o: the mixer's output,
  // gate: g_proj's output, alpha: GLA's decays (cap, the widest of them); gk: GLA's low-rank
  // gate (cap, 16); mixer: the sequence part's scratch (cap, mixer_io().scratch); g, u: the
  // MLP's (cap, intermediate).
  std::vector<float> a, q, k, v, o, gate, alpha, gk, mixer, g, u;
  std::size_t bytes() const override {
    return Scratch::bytes() + model::buffer_bytes({&a, &q, &k, &v, &o, &gate, &alpha, &gk, &mixer, &g, &u});
  }
};

// A gated layer's state: the recurrence's sums and the short convolutions' past inputs (q, k,
// v, when the layer has them), saved in that order.
struct GatedLayerState final : model::DeclaredState<GatedLayerState> {
  static constexpr std::uint32_t kFormat = 0;  // no frame: the recurrence's record carries one
  static constexpr const char* kCall = "LayerState";
  static constexpr const char* kWhat = "this layer's state";
  GatedLayerState(GlaState sums, std::vector<ShortConvState> conv_states)
      : gated(std::move(sums)), convs(model::copyable(std::move(conv_states))) {}
  model::Copyable<GlaState> gated;
  std::vector<model::Copyable<ShortConvState>> convs;

  template <class Self, class F>
  static void parts(Self& s, F&& f) {
    f("recurrence", s.gated);
    f("convolutions", s.convs);
  }
  MixerKind kind() const override { return MixerKind::kDecayedRecurrence; }
};

MixerIo mixer_io(const ModelConfig& c, const Layer& layer) {
  const GlaConfig& fc = config_of(c);
  const int d = c.hidden_size;
  if (layer.mixer == MixerKind::kAttention) {
    const int kv = layer.causal->config().n_kv_heads * layer.causal->config().d_head;
    return {d, kv, kv, 0, 0, d};
  }
  if (fc.kind == GlaConfig::Kind::kHgrn2)  // conv outputs, then q, k and alpha
    return {d, d, d, 0, (fc.use_short_conv ? 3 * d : 0) + 3 * d, d};
  const Widths w = gated_widths(c);
  const bool gla = fc.kind == GlaConfig::Kind::kGla;
  int scratch = 0;
  if (gla && fc.use_short_conv) scratch += w.q + w.k + w.v;
  if (!gla) scratch += w.q + w.k;  // RetNet: q and k after rotary
  if (!fc.qk_activation.empty()) scratch += w.q + w.k;
  if (fc.kv_groups > 1) scratch += fc.key_dim + fc.value_dim + (gla ? fc.key_dim : 0);
  return {w.q, w.k, w.v, gla ? w.k : 0, scratch, fc.value_dim};
}

void run_mixer(const ModelConfig& c, const Layer& layer, model::LayerState& state,
               const MixerRows& rows, int n, int threads) {
  const GlaConfig& fc = config_of(c);
  using CMap = Eigen::Map<const RowMatrix>;
  using Map = Eigen::Map<RowMatrix>;
  const MixerIo io = mixer_io(c, layer);
  if (layer.mixer == MixerKind::kAttention)
    return model::attend(*layer.causal, model::state_of<CausalState>(state), rows.a, rows.b, rows.c,
                         rows.out, n, threads);
  const auto rn = std::size_t(n);
  float* scratch = rows.scratch;
  const auto take = [&](int width) {
    float* p = scratch;
    scratch += rn * std::size_t(width);
    return p;
  };
  const float* q = rows.a;
  const float* k = rows.b;
  const float* v = rows.c;
  const float* alpha = rows.d;
  GatedLayerState& gs = static_cast<GatedLayerState&>(state);
  const std::int64_t pos0 = gs.gated.n_tokens();
  // Short convolutions (GLA: then silu; HGRN2: none), each with its own state.
  if (layer.conv_q) {
    const ShortConvolution* convs[3] = {layer.conv_q.get(), layer.conv_k.get(), layer.conv_v.get()};
    const float* in[3] = {q, k, v};
    const int width[3] = {io.a, io.b, io.c};
    float* outp[3];
    for (int j = 0; j < 3; ++j) {
      outp[j] = take(width[j]);
      model::convolve(*convs[j], gs.convs[std::size_t(j)], in[j], outp[j], n);
      if (fc.kind == GlaConfig::Kind::kGla) gates::silu(outp[j], outp[j], std::int64_t(n) * width[j]);
    }
    q = outp[0];
    k = outp[1];
    v = outp[2];
  }
  if (!fc.qk_activation.empty()) {  // fla's feature_map: ACT2FN on q and k, elementwise
    float* qf = take(io.a);
    float* kf = take(io.b);
    const std::int64_t nq = std::int64_t(n) * io.a, nk = std::int64_t(n) * io.b;
    if (fc.qk_activation == "relu") {
      for (std::int64_t i = 0; i < nq; ++i) qf[i] = q[i] > 0.0f ? q[i] : 0.0f;
      for (std::int64_t i = 0; i < nk; ++i) kf[i] = k[i] > 0.0f ? k[i] : 0.0f;
    } else {
      gates::silu(q, qf, nq);
      gates::silu(k, kf, nk);
    }
    q = qf;
    k = kf;
  }
  if (fc.kind == GlaConfig::Kind::kHgrn2) {
    const int d = c.hidden_size;
    const auto total = std::int64_t(n) * d;
    float* qa = take(d);
    float* ka = take(d);
    float* al = take(d);
    // q = swish(q); the forget gate exp(logaddexp(log lb, log1p(-lb) + logsigmoid(f))) =
    // lb + (1 - lb) sigmoid(f) (layer 0, or no bounds: lb = 0), and the key 1 - alpha.
    gates::silu(q, qa, total);
    for (int t = 0; t < n; ++t) {
      const std::size_t at = std::size_t(t) * std::size_t(d);
      gates::hgrn2_gates(k + at, layer.lower_bound.empty() ? nullptr : layer.lower_bound.data(),
                         al + at, ka + at, d);
    }
    q = qa;
    k = ka;
    alpha = al;
  }
  if (fc.kind == GlaConfig::Kind::kRetNet) {
    float* qr = take(io.a);
    float* kr = take(io.b);
    rotate_rows(q, qr, n, c.num_heads, fc.head_k_dim, pos0, layer.rope_inv_freq);
    rotate_rows(k, kr, n, c.num_kv_heads, fc.head_k_dim, pos0, layer.rope_inv_freq);
    q = qr;
    k = kr;
  }
  if (fc.kv_groups > 1) {
    const int G = fc.kv_groups, Hkv = c.num_kv_heads;
    float* kf = take(fc.key_dim);
    float* vf = take(fc.value_dim);
    repeat_heads(k, kf, n, Hkv, G, fc.head_k_dim);
    repeat_heads(v, vf, n, Hkv, G, fc.head_v_dim);
    k = kf;
    v = vf;
    if (alpha) {
      float* af = take(fc.key_dim);
      repeat_heads(alpha, af, n, Hkv, G, fc.head_k_dim);
      alpha = af;
    }
  }
  const int kd = fc.key_dim, vd = fc.value_dim;
  if (n == 1) {
    Eigen::Map<Eigen::VectorXf> o(rows.out, vd);
    const Eigen::VectorXf empty;
    layer.gated->step(gs.gated, Eigen::Map<const Eigen::VectorXf>(q, kd),
                      Eigen::Map<const Eigen::VectorXf>(k, kd), Eigen::Map<const Eigen::VectorXf>(v, vd),
                      alpha ? ConstVectorRef(Eigen::Map<const Eigen::VectorXf>(alpha, kd)) : ConstVectorRef(empty),
                      o);
  } else {
    Map O(rows.out, n, vd);
    const RowMatrix empty(n, 0);
    layer.gated->prefill(gs.gated, CMap(q, n, kd), CMap(k, n, kd), CMap(v, n, vd),
                         alpha ? ConstMatrixRef(CMap(alpha, n, kd)) : ConstMatrixRef(empty), O,
                         PrefillOptions{n, threads});
  }
}


class Network final : public model::Network {
 public:
  explicit Network(const ModelConfig& c) : c_(c) {}
  std::vector<Layer> layers;

  std::size_t n_layers() const override { return layers.size(); }

  std::unique_ptr<model::LayerState> make_state(std::size_t layer) const override {
    const Layer& l = layers[layer];
    if (l.mixer == MixerKind::kAttention)
      return std::make_unique<model::MixerState<CausalState>>(l.causal->make_state(), l.mixer);
    std::vector<ShortConvState> convs;
    for (const auto* conv : {&l.conv_q, &l.conv_k, &l.conv_v})
      if (*conv) convs.push_back((*conv)->make_state());
    return std::make_unique<GatedLayerState>(l.gated->make_state(), std::move(convs));
  }

  std::unique_ptr<model::Scratch> make_scratch(int rows) const override {
    const ModelConfig& c = c_;
    const GlaConfig& fc = config_of(c);
    auto w = std::make_unique<Rows>();
    w->cap = rows;
    const auto n = std::size_t(rows);
    const int d = c.hidden_size;
    int width = std::max({d, fc.key_dim, fc.value_dim});
    int scratch = 0;
    for (const auto& l : layers) {
      const MixerIo io = mixer_io(c, l);
      width = std::max({width, io.a, io.b, io.c, io.out});
      scratch = std::max(scratch, io.scratch);
    }
    for (auto* b : {&w->x, &w->h, &w->a}) b->assign(n * std::size_t(d), 0.0f);
    for (auto* b : {&w->q, &w->k, &w->v, &w->o, &w->gate, &w->alpha})
      b->assign(n * std::size_t(width), 0.0f);
    w->gk.assign(n * std::size_t(GlaConfig::kGateLowRankDim), 0.0f);
    w->mixer.assign(n * std::size_t(scratch), 0.0f);
    w->g.assign(n * std::size_t(c.intermediate_size), 0.0f);
    w->u.assign(n * std::size_t(c.intermediate_size), 0.0f);
    return w;
  }

  void run(model::Scratch& scratch, int n, int threads, model::Attend attend) const override {
    Rows& w = static_cast<Rows&>(scratch);
    const ModelConfig& c = c_;
    const GlaConfig& fc = config_of(c);
    const int d = c.hidden_size;
    const auto rows = std::int64_t(n);
    for (std::size_t li = 0; li < layers.size(); ++li) {
      const auto& L = layers[li];
      const MixerIo io = mixer_io(c, L);
      L.attn_norm.apply(w.x.data(), n, d, w.h.data(), d);
      L.q.apply(w.h.data(), n, d, w.q.data(), io.a, threads);
      L.k.apply(w.h.data(), n, d, w.k.data(), io.b, threads);
      L.v.apply(w.h.data(), n, d, w.v.data(), io.c, threads);
      if (gla_gate(L)) {
        // gk = gk_proj(h): the low-rank pair; then exp(max(logsigmoid(gk) / 16, clamp_min)).
        const int rk = GlaConfig::kGateLowRankDim;
        L.gk0.apply(w.h.data(), n, d, w.gk.data(), rk, threads);
        L.gk1.apply(w.gk.data(), n, rk, w.alpha.data(), io.d, threads);
        gates::gla_decay(w.alpha.data(), w.alpha.data(), rows * io.d,
                         static_cast<float>(GlaConfig::kGateLogitNormalizer),
                         fc.clamp_min ? static_cast<float>(*fc.clamp_min)
                                      : -std::numeric_limits<float>::infinity());
      }
      attend(li, 0, threads);
      if (L.mixer == MixerKind::kDecayedRecurrence) {
        if (fc.kind == GlaConfig::Kind::kHgrn2) {
          L.head_norm.apply(w.o.data(), n, d, w.o.data(), d, 1);
        } else {
          if (fc.use_output_gate)
            L.g_proj.apply(w.h.data(), n, d, w.gate.data(), fc.value_dim, threads);
          model::norm_then_gate(L.head_norm, w.o.data(), fc.use_output_gate ? w.gate.data() : nullptr,
                                n, fc.value_dim, c.num_heads);
        }
      }
      L.o.apply(w.o.data(), n, io.out, w.a.data(), d, threads);
      model::add_inplace(w.x.data(), w.a.data(), rows * d);
      model::swiglu_mlp(L.mlp_norm, L.gate, L.up, L.down, w.x.data(), w.h.data(), w.g.data(),
                        w.u.data(), w.a.data(), n, d, threads);
    }
  }

  // The mixer over the sequence's rows of q, k, v (and GLA's decays), into o.
  void run_sequence(std::size_t layer, int stage, model::Scratch& scratch, model::LayerState& state,
                    int first, int count, int threads) const override {
    (void)stage;
    Rows& w = static_cast<Rows&>(scratch);
    const Layer& L = layers[layer];
    const MixerIo io = mixer_io(c_, L);
    const auto at = [&](std::vector<float>& b, int width) {
      return b.data() + std::size_t(first) * std::size_t(width);
    };
    // Each sequence's scratch is its own rows' share, so sequences on other threads never meet.
    const MixerRows rows{at(w.q, io.a), at(w.k, io.b), at(w.v, io.c),
                         gla_gate(L) ? at(w.alpha, io.d) : nullptr,
                         io.scratch ? at(w.mixer, io.scratch) : nullptr, at(w.o, io.out)};
    run_mixer(c_, L, state, rows, count, threads);
  }

  void clear_sequence(std::size_t layer, int, model::Scratch& scratch, int first,
                      int count) const override {
    Rows& w = static_cast<Rows&>(scratch);
    const auto width = std::size_t(mixer_io(c_, layers[layer]).out);
    std::fill(w.o.data() + std::size_t(first) * width,
              w.o.data() + std::size_t(first + count) * width, 0.0f);
  }

  std::size_t weight_bytes() const override {
    std::size_t bytes = 0;
    for (const auto& l : layers)
      for (const auto* d : {&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down, &l.g_proj, &l.gk0, &l.gk1})
        bytes += model::dense_bytes(*d);
    return bytes;
  }

 private:
  bool gla_gate(const Layer& l) const {
    return l.mixer == MixerKind::kDecayedRecurrence && config_of(c_).kind == GlaConfig::Kind::kGla;
  }
  ModelConfig c_;
};

}  // namespace

std::unique_ptr<model::Network> make_network(const ModelConfig& c, std::vector<Layer> layers) {
  auto net = std::make_unique<Network>(c);
  net->layers = std::move(layers);
  return net;
}

}  // namespace recur::models::gla
