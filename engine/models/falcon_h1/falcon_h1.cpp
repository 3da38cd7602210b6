// Falcon-H1's layer stack, loader and family (falcon_h1.h). Per layer, as transformers'
// FalconH1DecoderLayer:
//   h = rmsnorm(x)
//   x += ssm_out * mamba(ssm_in * h) + attn_out * attention(attn_in * h)
//   x += down_mult * down(silu(gate_mult * gate(rmsnorm(x))) * up(rmsnorm(x)))
// mamba's in_proj output times the mup_vector (z, x, B, C, dt: ssm_multipliers), the keys times
// key_multiplier, the embeddings times embedding_multiplier, the logits times
// lm_head_multiplier.
//
// The Network's layers are the mixers, two per decoder layer (2 i: the Mamba-2 mixer, 2 i + 1:
// the attention), so that each keeps its own state: a saved state holds, per decoder layer, the
// Mamba-2 record and then the attention's keys and values.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "layers/attention.h"
#include "layers/gqa.h"
#include "layers/dense.h"
#include "layers/mlp.h"
#include "layers/sequence.h"
#include "layers/ssd_mixer.h"
#include "model/loader.h"
#include "model/model_impl.h"
#include "models/falcon_h1/falcon_h1.h"
#include "models/registry.h"
#include "recur/causal_attention.h"
#include "recur/error.h"

namespace recur::models::falcon_h1 {
namespace {

using model::Dense;
using model::Norm;

using Attention = model::GqaLayer;

struct Layer {
  Norm input_norm, ff_norm;
  model::SsdMixer mamba;
  Attention attn;
  Dense gate, up, down;
};

// The multipliers the stack applies to activations (the embeddings', the logits' and the keys'
// are folded into weights or the attention's scale at load).
struct Multipliers {
  float ssm_in = 1, ssm_out = 1, attn_in = 1, attn_out = 1, gate = 1, down = 1;
};

struct Rows : model::Scratch {
  std::vector<float> hs, ha, a, b, q, k, v, o, g, u;
  model::SsdRows ssd;
  std::size_t bytes() const override {
    return Scratch::bytes() + model::buffer_bytes({&hs, &ha, &a, &b, &q, &k, &v, &o, &g, &u}) +
           ssd.bytes();
  }
};

// out = m * in over n floats; in itself when m is 1 (no copy).
const float* scaled(const float* in, float m, float* out, std::int64_t n) {
  if (m == 1.0f) return in;
  for (std::int64_t i = 0; i < n; ++i) out[i] = m * in[i];
  return out;
}

class Network final : public model::Network {
 public:
  Network(int hidden, int ff, Multipliers mult, std::vector<Layer> layers)
      : hidden_(hidden), ff_(ff), mult_(mult), layers_(std::move(layers)) {}

  std::size_t n_layers() const override { return 2 * layers_.size(); }

  std::unique_ptr<model::LayerState> make_state(std::size_t layer) const override {
    const Layer& l = layers_[layer / 2];
    if (layer % 2 == 0) return model::make_ssd_state(l.mamba);
    return std::make_unique<model::MixerState<CausalState>>(l.attn.attention->make_state(),
                                                            MixerKind::kAttention);
  }

  std::unique_ptr<model::Scratch> make_scratch(int rows) const override {
    auto w = std::make_unique<Rows>();
    w->cap = rows;
    const auto n = std::size_t(rows), d = std::size_t(hidden_);
    for (auto* b : {&w->x, &w->h, &w->hs, &w->ha, &w->a, &w->b}) b->assign(n * d, 0.0f);
    for (auto* b : {&w->g, &w->u}) b->assign(n * std::size_t(ff_), 0.0f);
    const Attention& A = layers_.front().attn;
    for (auto* b : {&w->q, &w->o}) b->assign(n * std::size_t(A.H * A.d), 0.0f);
    for (auto* b : {&w->k, &w->v}) b->assign(n * std::size_t(A.Hkv * A.d), 0.0f);
    w->ssd.grow(rows, layers_.front().mamba.spec);
    return w;
  }

  void run(model::Scratch& scratch, int n, int threads, model::Attend attend) const override {
    Rows& w = static_cast<Rows&>(scratch);
    const int d = hidden_;
    const std::int64_t total = std::int64_t(n) * d;
    for (std::size_t li = 0; li < layers_.size(); ++li) {
      const Layer& L = layers_[li];
      L.input_norm.apply(w.x.data(), n, d, w.h.data(), d);
      // The Mamba-2 branch and the attention branch read the same normed rows (each times its
      // multiplier) and wait for each other nowhere: their projections in, then out, run as
      // one job each.
      const Attention& A = L.attn;
      const int hd = A.H * A.d, kv = A.Hkv * A.d;
      const float* hs = scaled(w.h.data(), mult_.ssm_in, w.hs.data(), total);
      const float* ha = scaled(w.h.data(), mult_.attn_in, w.ha.data(), total);
      model::apply_all({model::ssd_in_call(L.mamba, hs, n, w.ssd),
                        {&A.q, ha, n, d, w.q.data(), hd}, {&A.k, ha, n, d, w.k.data(), kv},
                        {&A.v, ha, n, d, w.v.data(), kv}}, threads);
      model::ssd_scale(L.mamba, w.ssd, n, threads);
      attend(2 * li, 0, threads);
      attend(2 * li + 1, 0, threads);
      model::ssd_gate(L.mamba, w.ssd, n, threads);
      model::apply_all({model::ssd_out_call(L.mamba, w.ssd, n, w.a.data()),
                        {&A.o, w.o.data(), n, hd, w.b.data(), d}}, threads);
      // Both add to the residual, each times its multiplier (transformers sums them first).
      for (std::int64_t i = 0; i < total; ++i)
        w.x[std::size_t(i)] += mult_.ssm_out * w.a[std::size_t(i)] + mult_.attn_out * w.b[std::size_t(i)];
      model::swiglu_mlp(L.ff_norm, L.gate, L.up, L.down, w.x.data(), w.h.data(), w.g.data(),
                        w.u.data(), w.a.data(), n, d, threads, mult_.gate, mult_.down);
    }
  }

  void run_sequence(std::size_t layer, int, model::Scratch& scratch, model::LayerState& state,
                    int first, int count, int threads) const override {
    Rows& w = static_cast<Rows&>(scratch);
    const Layer& L = layers_[layer / 2];
    if (layer % 2 == 0)
      return model::ssd_sequence(L.mamba, static_cast<model::SsdState&>(state), w.ssd, first,
                                 count, threads);
    const Attention& A = L.attn;
    const std::size_t r = std::size_t(first), hd = std::size_t(A.H * A.d),
                      kv = std::size_t(A.Hkv * A.d);
    model::attend(*A.attention, model::state_of<CausalState>(state), w.q.data() + r * hd,
                  w.k.data() + r * kv, w.v.data() + r * kv, w.o.data() + r * hd, count, threads);
  }

  void clear_sequence(std::size_t layer, int, model::Scratch& scratch, int first,
                      int count) const override {
    Rows& w = static_cast<Rows&>(scratch);
    const Layer& L = layers_[layer / 2];
    if (layer % 2 == 0) return model::ssd_clear(L.mamba, w.ssd, first, count);
    const auto width = std::size_t(L.attn.H) * std::size_t(L.attn.d);
    std::fill(w.o.data() + std::size_t(first) * width,
              w.o.data() + std::size_t(first + count) * width, 0.0f);
  }

  std::size_t weight_bytes() const override {
    std::size_t bytes = 0;
    for (const auto& L : layers_) {
      for (const auto* d : {&L.gate, &L.up, &L.down, &L.attn.q, &L.attn.k, &L.attn.v, &L.attn.o})
        bytes += model::dense_bytes(*d);
      bytes += model::ssd_weight_bytes(L.mamba);
    }
    return bytes;
  }

 private:
  int hidden_, ff_;
  Multipliers mult_;
  std::vector<Layer> layers_;
};

Attention load_attention(model::Loader& L, const std::string& p, const ModelConfig& c,
                         const FalconH1Config& g) {
  CausalAttentionConfig ac;
  ac.n_heads = g.n_heads;
  ac.n_kv_heads = g.n_kv_heads;
  ac.d_head = g.attn_head_dim(c);
  ac.rope_theta = float(g.rope_theta);
  // The keys times key_multiplier, folded into the scores' scale (rotary and q . k are linear
  // in k), rounded once.
  ac.scale = float(g.key_multiplier / std::sqrt(double(ac.d_head)));
  return model::load_gqa(L, p, c.hidden_size, g.attention_bias, ac);
}

void load(const ModelConfig& c, model::Loader& L, Model::Impl& impl) {
  const FalconH1Config& g = config_of(c);
  const int V = c.vocab_size, d = c.hidden_size, F = c.intermediate_size;
  const auto rms = [&](const std::string& name) {
    Norm n;
    n.dim = d;
    n.eps = float(c.norm_eps);
    n.weight = L.take(name, {d}, "hidden_size", model::TensorSpec::Init::kNorm);
    return n;
  };
  model::Ends ends;
  ends.embedding = "model.embed_tokens.weight";
  ends.rows = V;
  const model::MatrixWeight table = model::take_embedding(L, c, impl, ends);
  // embedding_multiplier, rounded once per entry (the reference multiplies the looked-up rows).
  if (g.embedding_multiplier != 1.0)
    for (float& e : impl.embeddings) e = float(double(e) * g.embedding_multiplier);
  std::vector<Layer> layers;
  for (int i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    Layer l;
    l.input_norm = rms(p + "input_layernorm.weight");
    l.mamba = model::load_ssd_mixer(L, p + "mamba.", g.ssd(c));
    l.attn = load_attention(L, p + "self_attn.", c, g);
    l.ff_norm = rms(p + "pre_ff_layernorm.weight");
    const std::string f = p + "feed_forward.";
    l.gate = model::dense(L, f + "gate_proj", F, d, g.mlp_bias, "intermediate_size, hidden_size");
    l.up = model::dense(L, f + "up_proj", F, d, g.mlp_bias, "intermediate_size, hidden_size");
    l.down = model::dense(L, f + "down_proj", d, F, g.mlp_bias, "hidden_size, intermediate_size");
    layers.push_back(std::move(l));
  }
  impl.has_final_norm = true;
  impl.final_norm = rms("model.final_layernorm.weight");
  // The logits times lm_head_multiplier: folded into the final norm's weight (the head is
  // linear), each weight multiplied once.
  if (g.lm_head_multiplier != 1.0)
    for (float& w : impl.final_norm.weight) w = float(double(w) * g.lm_head_multiplier);
  model::take_head(L, c, impl, ends, table);
  Multipliers m;
  m.ssm_in = float(g.ssm_in_multiplier);
  m.ssm_out = float(g.ssm_out_multiplier);
  m.attn_in = float(g.attention_in_multiplier);
  m.attn_out = float(g.attention_out_multiplier);
  m.gate = float(g.mlp_multipliers[0]);
  m.down = float(g.mlp_multipliers[1]);
  impl.network = std::make_unique<Network>(d, F, m, std::move(layers));
}

class Family final : public model::Family {
 public:
  const char* name() const override { return "falcon_h1"; }
  const char* model_type(const ModelConfig&) const override { return "falcon_h1"; }
  std::vector<std::string> model_types() const override { return {"falcon_h1"}; }
  void read_config(const std::string&, const json::Value& root, model::Fields& f,
                   ModelConfig& c) const override {
    falcon_h1::read_config(root, f, c);
  }
  void resolve(ModelConfig& c, const std::string& source) const override {
    falcon_h1::resolve(c, source);
  }
  std::string config_fields(const ModelConfig& c) const override {
    return falcon_h1::config_fields(c);
  }
  void load(const ModelConfig& c, const WeightSource&, model::Loader& L,
            Model::Impl& impl) const override {
    falcon_h1::load(c, L, impl);
  }
  std::vector<std::string> make_model_archs() const override { return {"falcon_h1"}; }
  std::vector<model::MakeOption> make_model_options() const override {
    return falcon_h1::make_model_options();
  }
  std::string make_model_config(const std::string&, const model::MakeOptions& o) const override {
    return falcon_h1::make_model_config(o);
  }
  std::string missing_tokenizer(const std::string& dir) const override {
    return model::tokenizer_json_needed(dir);
  }
  std::string describe(const Model& m, const std::string& label) const override {
    const ModelConfig& c = m.config();
    const FalconH1Config& g = config_of(c);
    const std::size_t grow =
        model::kv_cache_growth(std::size_t(c.num_hidden_layers), g.n_kv_heads, g.attn_head_dim(c));
    return model::describe_lines(
        m, label,
        fmt::format("falcon_h1, {} layers of Mamba-2 ({} heads of {}, state {}) beside attention "
                    "({} heads ({} kv) of {}, rotary)",
                    c.num_hidden_layers, g.m_heads, g.m_head_dim, g.m_state, g.n_heads,
                    g.n_kv_heads, g.attn_head_dim(c)),
        fmt::format(", MLP {}", c.intermediate_size),
        fmt::format(", growing by {} bytes a token (the attention's KV cache)", grow));
  }
};

}  // namespace
}  // namespace recur::models::falcon_h1

namespace recur::models {

const model::Family& falcon_h1_family() {
  static const falcon_h1::Family family;
  return family;
}

}  // namespace recur::models
