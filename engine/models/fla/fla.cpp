// flash-linear-attention's gated models as fla lays them out (fla/models/{gla,retnet,hgrn2},
// fla/layers/{gla,multiscale_retention,hgrn2,attn}.py): the tensor table, loading, and the layer
// stack. Pre-norm blocks x += mixer(RMSNorm(x)); x += GatedMLP(RMSNorm(x)); a final RMSNorm and
// the head. docs/fla-models.md.
#include "models/fla/fla.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/dispatch.h"
#include "recur/error.h"
#include "model/loader.h"
#include "models/registry.h"
#include "recur/causal_attention.h"
#include "recur/gated_attention.h"
#include "recur/short_conv.h"
#include "recur/window_attention.h"  // sincos_fixed

namespace recur::models::fla {
namespace {

using model::Dense;
using model::Norm;
using model::Role;
using model::Shape;
using Init = model::TensorSpec::Init;

std::string prefix(int i) { return fmt::format("model.layers.{}.", i); }

// The output norm's name: FusedRMSNormGated when fla fuses it with the swish gate, else RMSNorm.
std::string out_norm_name(const ModelConfig& c) {
  if (c.architecture == Architecture::kHgrn2) return "attn.g_norm";
  return c.use_output_gate && c.fuse_norm ? "attn.g_norm_swish_gate" : "attn.g_norm";
}

struct Widths {
  int q, k, v;  // the projections' widths (k and v per kv group)
};
Widths gated_widths(const ModelConfig& c) {
  if (c.architecture == Architecture::kHgrn2) return {c.hidden_size, c.hidden_size, c.hidden_size};
  return {c.key_dim, c.key_dim / c.kv_groups, c.value_dim / c.kv_groups};
}

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

struct Layer {
  MixerKind mixer = MixerKind::kGated;
  Norm attn_norm, mlp_norm;
  // q, k, v, o (HGRN2: q, f, i, o); the output gate g_proj, GLA's low-rank gate gk_proj (gk0 then
  // gk1, with a bias); short convolutions on q, k, v (or none); the recurrence; the output norm
  // (per head; HGRN2's over the whole width).
  Dense q, k, v, o, g_proj, gk0, gk1;
  std::unique_ptr<ShortConvolution> conv_q, conv_k, conv_v;
  std::unique_ptr<GatedAttention> gated;
  Norm head_norm;
  std::vector<float> lower_bound;    // HGRN2: (hidden), the forget gate's floor; empty for none
  std::vector<float> rope_inv_freq;  // RetNet: (head_k_dim / 2), rotary on q and k
  std::unique_ptr<CausalAttention> causal;  // the hybrid `attn` layers
  Dense gate, up, down;  // GatedMLP
};

// Widths of the rows a layer's sequence part reads (a: q, b: k, c: v, d: GLA's decay), may use
// as scratch, and writes (out).
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
class GatedLayerState final : public model::LayerState {
 public:
  GatedLayerState(GatedState sums, std::vector<ShortConvState> conv_states)
      : gated(std::move(sums)), convs(std::move(conv_states)) {}
  GatedState gated;
  std::vector<ShortConvState> convs;

  std::unique_ptr<model::LayerState> clone() const override {
    std::vector<ShortConvState> c;
    for (const auto& x : convs) c.push_back(x.clone());
    return std::make_unique<GatedLayerState>(gated.clone(), std::move(c));
  }
  void reset() override {
    gated.reset();
    for (auto& c : convs) c.reset();
  }
  std::int64_t n_tokens() const override { return gated.n_tokens(); }
  std::size_t bytes() const override {
    std::size_t n = gated.bytes();
    for (const auto& c : convs) n += c.bytes();
    return n;
  }
  std::size_t raw_size() const override {
    std::size_t n = gated.raw_size();
    for (const auto& c : convs) n += c.raw_size();
    return n;
  }
  std::vector<unsigned char> raw_bytes() const override {
    std::vector<unsigned char> out = gated.raw_bytes();
    for (const auto& c : convs) {
      const auto r = c.raw_bytes();
      out.insert(out.end(), r.begin(), r.end());
    }
    return out;
  }
  void load_raw_bytes(const unsigned char* data, std::size_t size) override {
    if (size != raw_size())
      throw FormatError(fmt::format("[LayerState] {} bytes given, this layer's state has {}", size,
                                    raw_size()));
    // Into copies first, so that a failure leaves this state as it was.
    GatedState g = gated.clone();
    std::size_t at = g.raw_size();
    g.load_raw_bytes(data, at);
    std::vector<ShortConvState> cs;
    for (const auto& c : convs) {
      ShortConvState copy = c.clone();
      copy.load_raw_bytes(data + at, copy.raw_size());
      if (copy.n_tokens() != g.n_tokens())
        throw FormatError(fmt::format("[LayerState] a convolution has seen {} tokens, the "
                                      "recurrence {}", copy.n_tokens(), g.n_tokens()));
      at += copy.raw_size();
      cs.push_back(std::move(copy));
    }
    gated = std::move(g);
    convs = std::move(cs);
  }
  MixerKind kind() const override { return MixerKind::kGated; }
};

std::vector<model::TensorSpec> tensors_of(const ModelConfig& c) {
  std::vector<model::TensorSpec> out;
  const std::int64_t d = c.hidden_size, I = c.intermediate_size, V = c.vocab_size;
  const std::int64_t K = c.conv_size;
  out.push_back({"model.embeddings.weight", {V, d}, Init::kEmbedding});
  if (c.architecture == Architecture::kHgrn2 && c.use_lower_bound)
    out.push_back({"model.lower_bounds", {c.num_hidden_layers, d}, Init::kUnit});
  for (int i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = prefix(i);
    out.push_back({p + "attn_norm.weight", {d}, Init::kNorm});
    if (c.mixers[std::size_t(i)] == MixerKind::kAttention) {
      const auto& s = c.attn[std::size_t(c.attn_spec[std::size_t(i)])];
      const std::int64_t kv = std::int64_t(s.num_kv_heads) * (d / s.num_heads);
      out.push_back({p + "attn.q_proj.weight", {d, d}});
      if (s.qkv_bias) out.push_back({p + "attn.q_proj.bias", {d}, Init::kBias});
      out.push_back({p + "attn.k_proj.weight", {kv, d}});
      if (s.qkv_bias) out.push_back({p + "attn.k_proj.bias", {kv}, Init::kBias});
      out.push_back({p + "attn.v_proj.weight", {kv, d}});
      if (s.qkv_bias) out.push_back({p + "attn.v_proj.bias", {kv}, Init::kBias});
      out.push_back({p + "attn.o_proj.weight", {d, d}});
    } else if (c.architecture == Architecture::kHgrn2) {
      out.push_back({p + "attn.q_proj.weight", {d, d}});
      out.push_back({p + "attn.f_proj.weight", {d, d}});
      out.push_back({p + "attn.i_proj.weight", {d, d}});
      if (c.use_short_conv)
        for (const char* n : {"q", "f", "i"})
          out.push_back({p + "attn." + n + "_conv1d.weight", {d, 1, K}, Init::kConv});
      if (c.elementwise_affine) out.push_back({p + "attn.g_norm.weight", {d}, Init::kNorm});
      out.push_back({p + "attn.o_proj.weight", {d, d}});
    } else {
      const Widths w = gated_widths(c);
      out.push_back({p + "attn.q_proj.weight", {w.q, d}});
      out.push_back({p + "attn.k_proj.weight", {w.k, d}});
      out.push_back({p + "attn.v_proj.weight", {w.v, d}});
      if (c.use_output_gate) out.push_back({p + "attn.g_proj.weight", {c.value_dim, d}});
      if (c.use_short_conv && c.architecture == Architecture::kGla) {
        out.push_back({p + "attn.q_conv1d.weight", {w.q, 1, K}, Init::kConv});
        out.push_back({p + "attn.k_conv1d.weight", {w.k, 1, K}, Init::kConv});
        out.push_back({p + "attn.v_conv1d.weight", {w.v, 1, K}, Init::kConv});
      }
      if (c.architecture == Architecture::kGla) {
        const std::int64_t r = ModelConfig::kGateLowRankDim;
        out.push_back({p + "attn.gk_proj.0.weight", {r, d}});
        out.push_back({p + "attn.gk_proj.1.weight", {w.k, r}});
        out.push_back({p + "attn.gk_proj.1.bias", {w.k}, Init::kBias});
      }
      out.push_back({p + "attn.o_proj.weight", {d, c.value_dim}});
      if (c.elementwise_affine) out.push_back({p + out_norm_name(c) + ".weight", {c.head_v_dim}, Init::kNorm});
    }
    out.push_back({p + "mlp_norm.weight", {d}, Init::kNorm});
    out.push_back({p + "mlp.gate_proj.weight", {I, d}});
    out.push_back({p + "mlp.up_proj.weight", {I, d}});
    out.push_back({p + "mlp.down_proj.weight", {d, I}});
  }
  out.push_back({"model.norm.weight", {d}, Init::kNorm});
  if (!c.tie_word_embeddings) out.push_back({"lm_head.weight", {V, d}});
  return out;
}

void load_into(const ModelConfig& c, model::Loader& ld, Model::Impl& impl, std::vector<Layer>& layers) {
  const int d = c.hidden_size, I = c.intermediate_size, V = c.vocab_size, L = c.num_hidden_layers;
  const auto eps = static_cast<float>(c.norm_eps);
  const auto norm = [&](const std::string& name, int dim, bool affine, const char* why) {
    Norm n;
    n.dim = dim;
    n.eps = eps;
    if (affine) n.weight = ld.take(name + ".weight", {dim}, why);
    return n;
  };
  const auto conv = [&](const std::string& name, int channels, const char* why) {
    const auto taps = ld.take(name + ".weight", {channels, 1, c.conv_size}, why);
    return std::make_unique<ShortConvolution>(
        Eigen::Map<const RowMatrix>(taps.data(), channels, c.conv_size));
  };
  // A tied embedding is the head's matrix too (quantized with it); an untied one is only
  // gathered, a row per token, and stays as stored.
  model::Dense tied_head;
  if (c.tie_word_embeddings)
  {
    const model::MatrixWeight table = ld.take_matrix("model.embeddings.weight",
                                                     "model.embeddings.weight", V, d, Role::kHead,
                                                     "vocab_size, hidden_size");
    impl.embeddings = table.dense_values();
    ld.accept_tied("lm_head.weight", table, {V, d});
    tied_head.w = table.rows(0, V);
  }
  else
    impl.embeddings = ld.take("model.embeddings.weight", {V, d}, "vocab_size, hidden_size");
  // HGRN2's lower bounds: softmax over the layers per channel, its running sum, minus the first
  // layer's share (so layer 0 has none), in double, as the model computes them once per forward.
  std::vector<double> bounds;
  if (c.architecture == Architecture::kHgrn2 && c.use_lower_bound) {
    const auto raw = ld.take("model.lower_bounds", {L, d}, "num_hidden_layers, hidden_size");
    bounds.assign(std::size_t(L) * std::size_t(d), 0.0);
    for (int j = 0; j < d; ++j) {
      double m = double(raw[std::size_t(j)]);
      for (int l = 1; l < L; ++l) m = std::max(m, double(raw[std::size_t(l) * std::size_t(d) + std::size_t(j)]));
      double sum = 0;
      for (int l = 0; l < L; ++l) sum += std::exp(double(raw[std::size_t(l) * std::size_t(d) + std::size_t(j)]) - m);
      double run = 0, first = 0;
      for (int l = 0; l < L; ++l) {
        const double p = std::exp(double(raw[std::size_t(l) * std::size_t(d) + std::size_t(j)]) - m) / sum;
        if (l == 0) first = p;
        run += p;
        bounds[std::size_t(l) * std::size_t(d) + std::size_t(j)] = run - first;
      }
    }
  }
  for (int i = 0; i < L; ++i) {
    const std::string p = prefix(i);
    Layer layer;
    layer.mixer = c.mixers[std::size_t(i)];
    layer.attn_norm = norm(p + "attn_norm", d, true, "hidden_size");
    if (layer.mixer == MixerKind::kAttention) {
      const auto& s = c.attn[std::size_t(c.attn_spec[std::size_t(i)])];
      const int dh = d / s.num_heads, kv = s.num_kv_heads * dh;
      layer.q = model::dense(ld, p + "attn.q_proj", d, d, s.qkv_bias, "hidden_size");
      layer.k = model::dense(ld, p + "attn.k_proj", kv, d, s.qkv_bias, "attn num_kv_heads * head_dim, hidden_size");
      layer.v = model::dense(ld, p + "attn.v_proj", kv, d, s.qkv_bias, "attn num_kv_heads * head_dim, hidden_size");
      layer.o = model::dense(ld, p + "attn.o_proj", d, d, false, "hidden_size");
      ld.ignore(p + "attn.rotary.inv_freq");
      CausalAttentionConfig ac;
      ac.n_heads = s.num_heads;
      ac.n_kv_heads = s.num_kv_heads;
      ac.d_head = dh;
      ac.window = s.window_size > 0 ? s.window_size - 1 : 0;  // flash-attn's (window_size - 1, 0)
      ac.rope_theta = static_cast<float>(s.rope_theta);
      layer.causal = std::make_unique<CausalAttention>(ac);
    } else if (c.architecture == Architecture::kHgrn2) {
      layer.q = model::dense(ld, p + "attn.q_proj", d, d, false, "hidden_size");
      layer.k = model::dense(ld, p + "attn.f_proj", d, d, false, "hidden_size");
      layer.v = model::dense(ld, p + "attn.i_proj", d, d, false, "hidden_size");
      if (c.use_short_conv) {
        layer.conv_q = conv(p + "attn.q_conv1d", d, "hidden_size, 1, conv_size");
        layer.conv_k = conv(p + "attn.f_conv1d", d, "hidden_size, 1, conv_size");
        layer.conv_v = conv(p + "attn.i_conv1d", d, "hidden_size, 1, conv_size");
      }
      layer.head_norm = norm(p + "attn.g_norm", d, c.elementwise_affine, "hidden_size");
      layer.o = model::dense(ld, p + "attn.o_proj", d, d, false, "hidden_size");
      if (!bounds.empty() && i > 0) {
        layer.lower_bound.resize(std::size_t(d));
        for (int j = 0; j < d; ++j)
          layer.lower_bound[std::size_t(j)] = float(bounds[std::size_t(i) * std::size_t(d) + std::size_t(j)]);
      }
    } else {
      const Widths w = gated_widths(c);
      const bool gla = c.architecture == Architecture::kGla;
      layer.q = model::dense(ld, p + "attn.q_proj", w.q, d, false, "key_dim, hidden_size");
      layer.k = model::dense(ld, p + "attn.k_proj", w.k, d, false, "key_dim / kv groups, hidden_size");
      layer.v = model::dense(ld, p + "attn.v_proj", w.v, d, false, "value_dim / kv groups, hidden_size");
      if (c.use_output_gate) layer.g_proj = model::dense(ld, p + "attn.g_proj", c.value_dim, d, false, "value_dim, hidden_size");
      if (c.use_short_conv && gla) {
        layer.conv_q = conv(p + "attn.q_conv1d", w.q, "key_dim, 1, conv_size");
        layer.conv_k = conv(p + "attn.k_conv1d", w.k, "key_dim / kv groups, 1, conv_size");
        layer.conv_v = conv(p + "attn.v_conv1d", w.v, "value_dim / kv groups, 1, conv_size");
      }
      if (gla) {
        const int rk = ModelConfig::kGateLowRankDim;
        layer.gk0 = model::dense(ld, p + "attn.gk_proj.0", rk, d, false, "gate_low_rank_dim 16, hidden_size");
        layer.gk1 = model::dense(ld, p + "attn.gk_proj.1", w.k, rk, true, "key_dim / kv groups, 16");
      }
      layer.o = model::dense(ld, p + "attn.o_proj", d, c.value_dim, false, "hidden_size, value_dim");
      layer.head_norm = norm(p + out_norm_name(c), c.head_v_dim, c.elementwise_affine, "head_v_dim");
      if (!gla) {
        ld.ignore(p + "attn.rotary.inv_freq");
        const int half = c.head_k_dim / 2;
        for (int j = 0; j < half; ++j)  // fla's RotaryEmbedding(dim=head_k_dim), base 10000, in float
          layer.rope_inv_freq.push_back(static_cast<float>(
              1.0 / std::pow(10000.0, 2.0 * double(j) / double(c.head_k_dim))));
      }
    }
    if (layer.mixer == MixerKind::kGated) {
      GatedAttentionConfig gc;
      gc.n_heads = c.num_heads;
      gc.d_key = c.head_k_dim;
      gc.d_value = c.head_v_dim;
      gc.scale = c.attn_scale;  // head_k_dim^-1/2, the kernels' default
      if (c.architecture == Architecture::kRetNet) {  // gamma_h = 1 - 2^(-5 - h)
        gc.decay = DecayKind::kPerHead;
        gc.head_decay = gates::retnet_decays(c.num_heads);
      }
      layer.gated = std::make_unique<GatedAttention>(gc);
    }
    layer.mlp_norm = norm(p + "mlp_norm", d, true, "hidden_size");
    layer.gate = model::dense(ld, p + "mlp.gate_proj", I, d, false, "intermediate_size, hidden_size");
    layer.up = model::dense(ld, p + "mlp.up_proj", I, d, false, "intermediate_size, hidden_size");
    layer.down = model::dense(ld, p + "mlp.down_proj", d, I, false, "hidden_size, intermediate_size");
    layers.push_back(std::move(layer));
  }
  impl.has_final_norm = true;
  impl.final_norm = norm("model.norm", d, true, "hidden_size");
  impl.lm_head = c.tie_word_embeddings
                     ? std::move(tied_head)
                     : model::dense(ld, "lm_head", V, d, false, "vocab_size, hidden_size", Role::kHead);
}

MixerIo mixer_io(const ModelConfig& c, const Layer& layer) {
  const int d = c.hidden_size;
  if (layer.mixer == MixerKind::kAttention) {
    const int kv = layer.causal->config().n_kv_heads * layer.causal->config().d_head;
    return {d, kv, kv, 0, 0, d};
  }
  if (c.architecture == Architecture::kHgrn2)  // conv outputs, then q, k and alpha
    return {d, d, d, 0, (c.use_short_conv ? 3 * d : 0) + 3 * d, d};
  const Widths w = gated_widths(c);
  const bool gla = c.architecture == Architecture::kGla;
  int scratch = 0;
  if (gla && c.use_short_conv) scratch += w.q + w.k + w.v;
  if (!gla) scratch += w.q + w.k;  // RetNet: q and k after rotary
  if (!c.qk_activation.empty()) scratch += w.q + w.k;
  if (c.kv_groups > 1) scratch += c.key_dim + c.value_dim + (gla ? c.key_dim : 0);
  return {w.q, w.k, w.v, gla ? w.k : 0, scratch, c.value_dim};
}

void run_mixer(const ModelConfig& c, const Layer& layer, model::LayerState& state,
               const MixerRows& rows, int n, int threads) {
  using CMap = Eigen::Map<const RowMatrix>;
  using Map = Eigen::Map<RowMatrix>;
  const MixerIo io = mixer_io(c, layer);
  if (layer.mixer == MixerKind::kAttention) {
    if (n == 1) {
      Eigen::Map<Eigen::VectorXf> o(rows.out, io.out);
      layer.causal->step(model::state_of<CausalState>(state), Eigen::Map<const Eigen::VectorXf>(rows.a, io.a),
                         Eigen::Map<const Eigen::VectorXf>(rows.b, io.b),
                         Eigen::Map<const Eigen::VectorXf>(rows.c, io.c), o);
    } else {
      Map O(rows.out, n, io.out);
      layer.causal->prefill(model::state_of<CausalState>(state), CMap(rows.a, n, io.a), CMap(rows.b, n, io.b),
                            CMap(rows.c, n, io.c), O, PrefillOptions{n, threads});
    }
    return;
  }
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
      if (n == 1) {
        Eigen::Map<Eigen::VectorXf> y(outp[j], width[j]);
        convs[j]->step(gs.convs[std::size_t(j)], Eigen::Map<const Eigen::VectorXf>(in[j], width[j]), y);
      } else {
        Map Y(outp[j], n, width[j]);
        convs[j]->prefill(gs.convs[std::size_t(j)], CMap(in[j], n, width[j]), Y);
      }
      if (c.architecture == Architecture::kGla) gates::silu(outp[j], outp[j], std::int64_t(n) * width[j]);
    }
    q = outp[0];
    k = outp[1];
    v = outp[2];
  }
  if (!c.qk_activation.empty()) {  // fla's feature_map: ACT2FN on q and k, elementwise
    float* qf = take(io.a);
    float* kf = take(io.b);
    const std::int64_t nq = std::int64_t(n) * io.a, nk = std::int64_t(n) * io.b;
    if (c.qk_activation == "relu") {
      for (std::int64_t i = 0; i < nq; ++i) qf[i] = q[i] > 0.0f ? q[i] : 0.0f;
      for (std::int64_t i = 0; i < nk; ++i) kf[i] = k[i] > 0.0f ? k[i] : 0.0f;
    } else {
      gates::silu(q, qf, nq);
      gates::silu(k, kf, nk);
    }
    q = qf;
    k = kf;
  }
  if (c.architecture == Architecture::kHgrn2) {
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
  if (c.architecture == Architecture::kRetNet) {
    float* qr = take(io.a);
    float* kr = take(io.b);
    rotate_rows(q, qr, n, c.num_heads, c.head_k_dim, pos0, layer.rope_inv_freq);
    rotate_rows(k, kr, n, c.num_kv_heads, c.head_k_dim, pos0, layer.rope_inv_freq);
    q = qr;
    k = kr;
  }
  if (c.kv_groups > 1) {
    const int G = c.kv_groups, Hkv = c.num_kv_heads;
    float* kf = take(c.key_dim);
    float* vf = take(c.value_dim);
    repeat_heads(k, kf, n, Hkv, G, c.head_k_dim);
    repeat_heads(v, vf, n, Hkv, G, c.head_v_dim);
    k = kf;
    v = vf;
    if (alpha) {
      float* af = take(c.key_dim);
      repeat_heads(alpha, af, n, Hkv, G, c.head_k_dim);
      alpha = af;
    }
  }
  const int kd = c.key_dim, vd = c.value_dim;
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
    auto w = std::make_unique<Rows>();
    w->cap = rows;
    const auto n = std::size_t(rows);
    const int d = c.hidden_size;
    int width = std::max({d, c.key_dim, c.value_dim});
    int scratch = 0;
    for (const auto& l : layers) {
      const MixerIo io = mixer_io(c, l);
      width = std::max({width, io.a, io.b, io.c, io.out});
      scratch = std::max(scratch, io.scratch);
    }
    for (auto* b : {&w->x, &w->h, &w->a}) b->assign(n * std::size_t(d), 0.0f);
    for (auto* b : {&w->q, &w->k, &w->v, &w->o, &w->gate, &w->alpha})
      b->assign(n * std::size_t(width), 0.0f);
    w->gk.assign(n * std::size_t(ModelConfig::kGateLowRankDim), 0.0f);
    w->mixer.assign(n * std::size_t(scratch), 0.0f);
    w->g.assign(n * std::size_t(c.intermediate_size), 0.0f);
    w->u.assign(n * std::size_t(c.intermediate_size), 0.0f);
    return w;
  }

  void run(model::Scratch& scratch, int n, int threads, model::Attend attend) const override {
    Rows& w = static_cast<Rows&>(scratch);
    const ModelConfig& c = c_;
    const int d = c.hidden_size, I = c.intermediate_size;
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
        const int rk = ModelConfig::kGateLowRankDim;
        L.gk0.apply(w.h.data(), n, d, w.gk.data(), rk, threads);
        L.gk1.apply(w.gk.data(), n, rk, w.alpha.data(), io.d, threads);
        gates::gla_decay(w.alpha.data(), w.alpha.data(), rows * io.d,
                         static_cast<float>(ModelConfig::kGateLogitNormalizer),
                         c.has_clamp_min ? static_cast<float>(c.clamp_min)
                                         : -std::numeric_limits<float>::infinity());
      }
      attend(li, 0, threads);
      if (L.mixer == MixerKind::kGated) {
        if (c.architecture == Architecture::kHgrn2) {
          L.head_norm.apply(w.o.data(), n, d, w.o.data(), d, 1);
        } else {
          L.head_norm.apply(w.o.data(), n, c.value_dim, w.o.data(), c.value_dim, c.num_heads);
          if (c.use_output_gate) {  // norm(o) * swish(g): the swish-gated unit with g as its gate
            L.g_proj.apply(w.h.data(), n, d, w.gate.data(), c.value_dim, threads);
            model::swiglu(w.gate.data(), w.o.data(), w.o.data(), rows * c.value_dim);
          }
        }
      }
      L.o.apply(w.o.data(), n, io.out, w.a.data(), d, threads);
      model::add_inplace(w.x.data(), w.a.data(), rows * d);
      L.mlp_norm.apply(w.x.data(), n, d, w.h.data(), d);
      L.gate.apply(w.h.data(), n, d, w.g.data(), I, threads);
      L.up.apply(w.h.data(), n, d, w.u.data(), I, threads);
      model::swiglu(w.g.data(), w.u.data(), w.g.data(), rows * I);
      L.down.apply(w.g.data(), n, I, w.a.data(), d, threads);
      model::add_inplace(w.x.data(), w.a.data(), rows * d);
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
    return l.mixer == MixerKind::kGated && c_.architecture == Architecture::kGla;
  }
  ModelConfig c_;
};

class Family final : public model::Family {
 public:
  const char* name() const override { return "fla gated"; }
  const char* model_type(const ModelConfig& c) const override {
    return c.architecture == Architecture::kGla ? "gla"
           : c.architecture == Architecture::kRetNet ? "retnet" : "hgrn2";
  }
  bool has(Architecture a) const override {
    return a == Architecture::kGla || a == Architecture::kRetNet || a == Architecture::kHgrn2;
  }
  bool reads(const std::string& type, const json::Value&) const override {
    return type == "gla" || type == "retnet" || type == "hgrn2";
  }
  void read_config(const std::string& type, const json::Value& root, model::Fields& f,
                   ModelConfig& c) const override {
    fla::read_config(root, type, f, c);
  }
  void resolve(ModelConfig& c, const std::string& source) const override { fla::resolve(c, source); }
  std::string config_fields(const ModelConfig& c) const override { return fla::config_fields(c); }
  std::vector<model::TensorSpec> tensors(const ModelConfig& c) const override {
    return tensors_of(c);
  }
  void load(const ModelConfig& c, const WeightSource&, model::Loader& L,
            Model::Impl& impl) const override {
    auto net = std::make_unique<Network>(c);
    load_into(c, L, impl, net->layers);
    impl.network = std::move(net);
  }

  std::vector<std::string> make_model_archs() const override { return {"gla", "retnet", "hgrn2"}; }
  std::vector<model::MakeOption> make_model_options() const override {
    const std::vector<std::string> heads = {"gla", "retnet"}, hgrn2 = {"hgrn2"},
                                   conv = {"gla", "hgrn2"};
    return {{"kv-heads", "", "key/value heads (default: as many as heads)", false, heads},
            {"expand-k", "", "key width / hidden size (default: the model type's)", false, heads},
            {"expand-v", "", "value width / hidden size (default: the model type's)", false, heads},
            {"no-affine", nullptr, "no weight in the output norm", true},
            {"expand-ratio", "", "the forget gate's width per head (default 128)", false, hgrn2},
            {"attn-layers", "", "softmax attention layers, e.g. 1,3 (attn.layers)"},
            {"attn-heads", "", "the attention layers' heads (default: --heads)"},
            {"attn-kv-heads", "", "their kv heads (default: as many as heads)"},
            {"attn-window", "", "attn.window_size (default: full attention)"},
            {"short-conv", nullptr, "short convolutions on q, k, v (use_short_conv)", true, conv},
            {"no-output-gate", nullptr, "no output gate (use_output_gate false)", true, heads},
            {"no-lower-bound", nullptr, "no lower bounds on the forget gate (use_lower_bound "
                                        "false)", true, hgrn2}};
  }
  std::string make_model_config(const std::string& arch, const model::MakeOptions& o) const override {
    const bool hgrn2 = arch == "hgrn2";
    std::string json = "{";
    const auto add = [&](const std::string& k, const std::string& v) {
      json += (json.size() > 1 ? ", " : "") + fmt::format("\"{}\": {}", k, v);
    };
    const auto heads = o.integer("heads", 1, 1 << 16);
    add("model_type", fmt::format("\"{}\"", arch));
    add("vocab_size", std::to_string(o.integer("vocab", 1, 1 << 24)));
    add("hidden_size", std::to_string(o.integer("hidden", 1, 1 << 20)));
    add("num_hidden_layers", std::to_string(o.integer("layers", 1, 4096)));
    add("tie_word_embeddings", o.flag("tie-embeddings") ? "true" : "false");
    add("elementwise_affine", o.flag("no-affine") ? "false" : "true");
    if (const auto inter = o.integer("intermediate", 0, 1 << 20); inter > 0)
      add("intermediate_size", std::to_string(inter));
    if (hgrn2) {
      if (o.given("expand-ratio")) add("expand_ratio", std::to_string(o.integer("expand-ratio", 1, 1 << 20)));
      add("use_lower_bound", o.flag("no-lower-bound") ? "false" : "true");
    } else {
      add("num_heads", std::to_string(heads));
      if (o.given("kv-heads")) add("num_kv_heads", std::to_string(o.integer("kv-heads", 1, 1 << 16)));
      if (o.given("expand-k")) add("expand_k", fmt::format("{}", o.real("expand-k", 1e-6, 1e6)));
      if (o.given("expand-v")) add("expand_v", fmt::format("{}", o.real("expand-v", 1e-6, 1e6)));
      add("use_output_gate", o.flag("no-output-gate") ? "false" : "true");
    }
    if (arch != "retnet") add("use_short_conv", o.flag("short-conv") ? "true" : "false");
    if (o.given("attn-layers")) {
      const std::string v = o.str("attn-layers");
      if (v.empty() || v.find_first_not_of("0123456789,") != std::string::npos ||
          v.find(",,") != std::string::npos || v.front() == ',' || v.back() == ',' || v.size() > 4096)
        throw ArgumentError(fmt::format("--attn-layers is {}, expected layer indices such as 1,3",
                                        json::quote(v)));
      const auto ah = o.given("attn-heads") ? o.integer("attn-heads", 1, 1 << 16) : heads;
      std::string spec = fmt::format("{{\"layers\": [{}], \"num_heads\": {}", v, ah);
      if (o.given("attn-kv-heads"))
        spec += fmt::format(", \"num_kv_heads\": {}", o.integer("attn-kv-heads", 1, 1 << 16));
      if (o.given("attn-window"))
        spec += fmt::format(", \"window_size\": {}", o.integer("attn-window", 1, 1 << 24));
      add("attn", spec + "}");
    } else if (o.given("attn-heads") || o.given("attn-kv-heads") || o.given("attn-window")) {
      throw ArgumentError("--attn-heads, --attn-kv-heads and --attn-window need --attn-layers");
    }
    return json + "}";
  }

  std::string describe(const Model& m, const std::string& label) const override {
    const ModelConfig& c = m.config();
    const auto n_attn = std::count(c.mixers.begin(), c.mixers.end(), MixerKind::kAttention);
    // A full layer's KV cache: a key and a value per kv head per token (the rest is constant).
    std::size_t grow = 0;
    for (const auto& s : c.attn)
      if (s.window_size == 0)
        grow += s.layers.size() * 2 * std::size_t(s.num_kv_heads) *
                std::size_t(c.hidden_size / s.num_heads) * sizeof(float);
    return fmt::format(
        "model: {}: {}, {} layers ({} gated recurrence, {} softmax attention), hidden {}, {} "
        "heads{}, vocab {}, {:.2f}M parameters\nstate: {:.2f} MiB{}\n",
        label, model_type(c),
        c.num_hidden_layers, c.num_hidden_layers - n_attn, n_attn, c.hidden_size, c.num_heads,
        c.num_kv_heads != c.num_heads ? fmt::format(" ({} kv)", c.num_kv_heads) : "",
        c.vocab_size, double(m.parameters()) / 1e6,
        double(model::new_state_bytes(*m.impl().network)) / double(1 << 20),
        grow ? fmt::format(" at the start, and the full-attention layers' KV cache adds {} bytes "
                           "every token (conversations' memory counts it)", grow)
             : std::string(" at any length"));
  }
};

}  // namespace
}  // namespace recur::models::fla

namespace recur::models {

const model::Family& fla_family() {
  static const fla::Family family;
  return family;
}

}  // namespace recur::models
