// The Gated DeltaNet models as a family of recur: reading Qwen3.5's and fla's tensors into one
// Stack (gdn_network.h), and the Family interface (config.json, tensor table, make-model,
// description). docs/qwen35.md.
#include "models/gdn/gdn.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "model/loader.h"
#include "models/gdn/gdn_network.h"
#include "models/registry.h"
#include "recur/error.h"

namespace recur::models::gdn {
namespace {

using model::Dense;
using model::Norm;
using Init = model::TensorSpec::Init;
using Layout = GdnConfig::Layout;

int round16(int n) { return (n + 15) / 16 * 16; }

class Reader {
 public:
  Reader(const ModelConfig& c, model::Loader& L)
      : c_(c), g_(config_of(c)), n_(names_of(g_)), L_(L), d_(c.hidden_size) {}

  // An RMSNorm over `dim`: Qwen's zero-centred ones (`zero_centred`) multiply by 1 + w, which
  // is rounded to float once here, as the reference rounds 1.0 + w.float().
  Norm rms(const std::string& name, int dim, bool zero_centred, const char* why) {
    Norm n;
    n.dim = dim;
    n.eps = float(c_.norm_eps);
    // Random zero-centred weights are near 0 (of 1 + w), the others near 1.
    n.weight = L_.take(name, {dim}, why, zero_centred ? Init::kBias : Init::kNorm);
    if (zero_centred)
      for (float& w : n.weight) w = 1.0f + w;
    return n;
  }

  Dense dense(const std::string& name, int n_out, int k_in, const char* why) {
    return model::dense(L_, name, n_out, k_in, false, why);
  }

  std::unique_ptr<ShortConvolution> conv(const std::string& name, int channels) {
    const auto taps = L_.take(name, {channels, 1, g_.conv_size},
                              "the convolution's channels, 1, its kernel size", Init::kConv);
    return std::make_unique<ShortConvolution>(
        Eigen::Map<const RowMatrix>(taps.data(), channels, g_.conv_size));
  }

  GdnMixer mixer(const std::string& a) {
    GdnMixer m;
    m.Hk = g_.n_k_heads;
    m.Hv = g_.n_v_heads;
    m.d_k = g_.d_k;
    m.d_v = g_.d_v;
    m.d_kp = round16(g_.d_k);
    const int K = m.Hk * m.d_k, V = m.Hv * m.d_v, W = m.conv_width();
    m.gate = g_.use_gate;
    m.neg_eigval = g_.allow_neg_eigval;
    m.decay = g_.decay();
    m.use_beta = g_.use_beta;
    m.qk_activation = int(g_.qk_activation);
    m.sum_norm = g_.qk_sum_norm;
    if (g_.qwen()) {
      m.in_proj.push_back(dense(a + "in_proj_qkv", W, d_, "2 key widths + value width, hidden_size"));
      m.in_col = {0};
      m.z = dense(a + "in_proj_z", V, d_, "value heads * value head size, hidden_size");
      m.b = dense(a + "in_proj_b", m.Hv, d_, "value heads, hidden_size");
      m.a = dense(a + "in_proj_a", m.Hv, d_, "value heads, hidden_size");
      m.convs.push_back(conv(a + "conv1d.weight", W));
      m.conv_col = {0};
      m.conv_silu = {true};
      // The table lists dt_bias before A_log, which are read below (the fingerprint's order).
      if (m.decay) L_.declare(a + "dt_bias", {m.Hv}, Init::kBias);
    } else {
      m.in_proj.push_back(dense(a + "q_proj", K, d_, "num_heads * head_dim, hidden_size"));
      m.in_proj.push_back(dense(a + "k_proj", K, d_, "num_heads * head_dim, hidden_size"));
      m.in_proj.push_back(dense(a + "v_proj", V, d_, "value heads * head_v_dim, hidden_size"));
      m.in_col = {0, K, 2 * K};
      if (m.decay) m.a = dense(a + "a_proj", m.Hv, d_, "value heads, hidden_size");
      if (m.use_beta) m.b = dense(a + "b_proj", m.Hv, d_, "value heads, hidden_size");
      // The table lists the decay's parameters here, which are read below (the fingerprint's
      // order).
      if (m.decay)
        for (const char* x : {"A_log", "dt_bias"}) L_.declare(a + x, {m.Hv}, Init::kBias);
      if (g_.use_conv) {
        m.convs.push_back(conv(a + "q_conv1d.weight", K));
        m.convs.push_back(conv(a + "k_conv1d.weight", K));
        m.convs.push_back(conv(a + "v_conv1d.weight", V));
        m.conv_col = {0, K, 2 * K};
        const bool qk_silu = m.qk_activation == 0;
        m.conv_silu = {qk_silu, qk_silu, true};
      }
      if (m.gate) m.z = dense(a + "g_proj", V, d_, "value heads * head_v_dim, hidden_size");
      // fla's layers of early 2025 kept a parameter D that their forward pass never read.
      L_.ignore(a + "D");
    }
    if (m.decay) {
      const auto A_log = L_.take(a + "A_log", {m.Hv}, "value heads", Init::kBias);
      m.dt_bias = L_.take(a + "dt_bias", {m.Hv}, "value heads", Init::kBias);
      for (const float x : A_log) m.neg_A.push_back(float(-std::exp(double(x))));
    }
    m.out_norm = rms(a + (g_.qwen() ? "norm.weight" : "o_norm.weight"), m.d_v, false,
                     "the value head size");
    m.out = dense(a + (g_.qwen() ? "out_proj" : "o_proj"), d_, V, "hidden_size, value width");
    return m;
  }

  // fla's softmax attention layer (fla/layers/attn.py), loaded as the GLA family loads it
  // (layers/attention.h): head_dim = hidden / num_heads, rotary over all of it, the window
  // as flash-attn's (window_size - 1, 0); no norms, no output gate.
  model::GqaLayer fla_attention(const std::string& a, const model::HybridAttentionSpec& s) {
    return model::load_hybrid_attention(L_, a, d_, s);
  }

  model::GqaLayer attention(const std::string& a) {
    model::GqaLayer A;
    A.qk_norm = true;
    A.output_gate = true;
    A.H = g_.n_heads;
    A.Hkv = g_.n_kv_heads;
    A.d = g_.head_dim;
    const int hd = A.H * A.d, kv = A.Hkv * A.d;
    A.q = dense(a + "q_proj", 2 * hd, d_, "2 * num_attention_heads * head_dim, hidden_size");
    A.k = dense(a + "k_proj", kv, d_, "num_key_value_heads * head_dim, hidden_size");
    A.v = dense(a + "v_proj", kv, d_, "num_key_value_heads * head_dim, hidden_size");
    A.o = dense(a + "o_proj", d_, hd, "hidden_size, num_attention_heads * head_dim");
    A.q_norm = rms(a + "q_norm.weight", A.d, true, "head_dim");
    A.k_norm = rms(a + "k_norm.weight", A.d, true, "head_dim");
    CausalAttentionConfig ac;
    ac.n_heads = A.H;
    ac.n_kv_heads = A.Hkv;
    ac.d_head = A.d;
    ac.rope_theta = float(g_.rope_theta);
    ac.rotary_dim = g_.rotary_dim();
    A.attention = std::make_unique<CausalAttention>(ac);
    return A;
  }

  void load(const WeightSource& weights, Model::Impl& impl) {
    const int V = c_.vocab_size, I = c_.intermediate_size;
    const bool qwen = g_.qwen();
    Stack s;
    s.hidden = d_;
    s.intermediate = I;
    const model::Ends ends{n_.emb, n_.head, V};
    const model::MatrixWeight table = model::take_embedding(L_, c_, impl, ends);
    for (int i = 0; i < c_.num_hidden_layers; ++i) {
      const std::string p = n_.layer(i);
      Layer l;
      l.attention = c_.mixers[std::size_t(i)] == MixerKind::kAttention;
      l.mixer_norm = rms(p + (qwen ? "input_layernorm.weight" : "attn_norm.weight"), d_, qwen,
                         "hidden_size");
      if (l.attention && qwen) l.attn = attention(p + "self_attn.");
      else if (l.attention)
        l.attn = fla_attention(p + "attn.", g_.attn.at(i));
      else l.gdn = mixer(p + (qwen ? "linear_attn." : "attn."));
      l.mlp_norm = rms(p + (qwen ? "post_attention_layernorm.weight" : "mlp_norm.weight"), d_,
                       qwen, "hidden_size");
      l.gate = dense(p + "mlp.gate_proj", I, d_, "intermediate_size, hidden_size");
      l.up = dense(p + "mlp.up_proj", I, d_, "intermediate_size, hidden_size");
      l.down = dense(p + "mlp.down_proj", d_, I, "hidden_size, intermediate_size");
      s.layers.push_back(std::move(l));
    }
    impl.has_final_norm = true;
    impl.final_norm = rms(n_.final_norm, d_, qwen, "hidden_size");
    model::take_head(L_, c_, impl, ends, table);
    // The multimodal checkpoint's vision tower and multi-token-prediction head: skipped by
    // name; any other tensor the table does not list is refused by the loader.
    if (g_.layout == Layout::kQwen35)
      for (const auto& name : weights.names())
        if (name.rfind("model.visual.", 0) == 0 || name.rfind("mtp.", 0) == 0) L_.ignore(name);
    if (g_.layout == Layout::kQwen35Text)
      for (const auto& name : weights.names())
        if (name.rfind("mtp.", 0) == 0) L_.ignore(name);
    impl.network = make_network(std::move(s));
  }

 private:
  const ModelConfig& c_;
  const GdnConfig& g_;
  Names n_;
  model::Loader& L_;
  int d_;
};

class Family final : public model::Family {
 public:
  const char* name() const override { return "gated deltanet"; }
  const char* model_type(const ModelConfig& c) const override {
    switch (config_of(c).layout) {
      case Layout::kQwen35: return "qwen3_5";
      case Layout::kQwen35Text: return "qwen3_5_text";
      case Layout::kFlaDelta: return "delta_net";
      default: return "gated_deltanet";
    }
  }
  std::vector<std::string> model_types() const override {
    return {"qwen3_5", "qwen3_5_text", "gated_deltanet", "delta_net"};
  }
  void read_config(const std::string& type, const json::Value& root, model::Fields& f,
                   ModelConfig& c) const override {
    gdn::read_config(type, root, f, c);
  }
  void resolve(ModelConfig& c, const std::string& source) const override { gdn::resolve(c, source); }
  std::string config_fields(const ModelConfig& c) const override { return gdn::config_fields(c); }
  void load(const ModelConfig& c, const WeightSource& weights, model::Loader& L,
            Model::Impl& impl) const override {
    Reader(c, L).load(weights, impl);
  }

  std::vector<std::string> make_model_archs() const override { return {"qwen35", "gated_deltanet"}; }
  std::vector<model::MakeOption> make_model_options() const override {
    return gdn::make_model_options();
  }
  std::string make_model_config(const std::string& arch, const model::MakeOptions& o) const override {
    return gdn::make_model_config(arch, o);
  }

  // Qwen3.5 reads its byte-level BPE (tokenizer.json, 248,320 ids), fla's hub checkpoints
  // Llama's or Mistral's: bytes as ids would be another model's input.
  std::string missing_tokenizer(const std::string& dir) const override {
    return model::tokenizer_json_needed(dir);
  }

  std::string describe(const Model& m, const std::string& label) const override {
    const ModelConfig& c = m.config();
    const GdnConfig& g = config_of(c);
    const auto n_attn = std::count(c.mixers.begin(), c.mixers.end(), MixerKind::kAttention);
    // Qwen3.5's full-attention layers, or fla's `attn` block, grow a KV cache.
    const std::size_t grow =
        (g.qwen() ? model::kv_cache_growth(std::size_t(n_attn), g.n_kv_heads, g.head_dim) : 0) +
        model::hybrid_attention_growth(g.attn, c.hidden_size);
    return model::describe_lines(
        m, label,
        fmt::format("{}, {} layers ({} Gated DeltaNet: {} key heads of {}, {} value heads of {}; "
                    "{} {}attention{})",
                    model_type(c), c.num_hidden_layers, c.num_hidden_layers - n_attn, g.n_k_heads,
                    g.d_k, g.n_v_heads, g.d_v, n_attn, g.qwen() ? "gated full " : "softmax ",
                    n_attn && g.qwen() ? fmt::format(": {} heads ({} kv) of {}, rotary {}",
                                                     g.n_heads, g.n_kv_heads, g.head_dim,
                                                     g.rotary_dim())
                                       : std::string()),
        fmt::format(", MLP {}", c.intermediate_size), model::state_growth_note(grow));
  }
};

}  // namespace
}  // namespace recur::models::gdn

namespace recur::models {

const model::Family& gdn_family() {
  static const gdn::Family family;
  return family;
}

}  // namespace recur::models
