// LFM2 as a family of recur: reading transformers' Lfm2ForCausalLM tensors into one Stack
// (lfm2_network.h: the reader names the tensors), and the Family interface (config.json,
// make-model, description). docs/lfm2.md.
#include "models/lfm2/lfm2.h"

#include <fmt/format.h>

#include <algorithm>

#include "layers/attention.h"
#include "model/loader.h"
#include "models/lfm2/lfm2_network.h"
#include "models/registry.h"
#include "recur/error.h"

namespace recur::models::lfm2 {
namespace {

using model::Dense;
using model::Norm;
using Init = model::TensorSpec::Init;

class Reader {
 public:
  Reader(const ModelConfig& c, model::Loader& L) : c_(c), g_(config_of(c)), L_(L), d_(c.hidden_size) {}

  Norm rms(const std::string& name, int dim, const char* why) {
    Norm n;
    n.dim = dim;
    n.eps = float(c_.norm_eps);
    n.weight = L_.take(name, {dim}, why, Init::kNorm);
    return n;
  }

  Dense dense(const std::string& name, int n_out, int k_in, bool bias, const char* why) {
    return model::dense(L_, name, n_out, k_in, bias, why);
  }

  ConvBlock conv(const std::string& a) {
    ConvBlock b;
    const bool bias = g_.conv_bias;
    b.in_proj = dense(a + "in_proj", 3 * d_, d_, bias, "3 * hidden_size (B, C, x), hidden_size");
    const auto taps = L_.take(a + "conv.weight", {d_, 1, g_.conv_L},
                              "hidden_size, 1, conv_L_cache", Init::kConv);
    Eigen::VectorXf conv_bias;
    if (bias) {
      const auto b_values = L_.take(a + "conv.bias", {d_}, "hidden_size", Init::kBias);
      conv_bias = Eigen::Map<const Eigen::VectorXf>(b_values.data(), d_);
    }
    b.conv = std::make_unique<ShortConvolution>(
        Eigen::Map<const RowMatrix>(taps.data(), d_, g_.conv_L), conv_bias);
    b.out_proj = dense(a + "out_proj", d_, d_, bias, "hidden_size, hidden_size");
    return b;
  }

  model::GqaLayer attention(const std::string& a) {
    model::GqaLayer A;
    A.qk_norm = true;
    A.H = g_.n_heads;
    A.Hkv = g_.n_kv_heads;
    A.d = g_.head_size(d_);
    const int hd = A.H * A.d, kv = A.Hkv * A.d;
    A.q = dense(a + "q_proj", hd, d_, false, "num_attention_heads * head size, hidden_size");
    A.k = dense(a + "k_proj", kv, d_, false, "num_key_value_heads * head size, hidden_size");
    A.v = dense(a + "v_proj", kv, d_, false, "num_key_value_heads * head size, hidden_size");
    A.o = dense(a + "out_proj", d_, hd, false, "hidden_size, num_attention_heads * head size");
    A.q_norm = rms(a + "q_layernorm.weight", A.d, "the head size");
    A.k_norm = rms(a + "k_layernorm.weight", A.d, "the head size");
    CausalAttentionConfig ac;
    ac.n_heads = A.H;
    ac.n_kv_heads = A.Hkv;
    ac.d_head = A.d;
    ac.rope_theta = float(g_.rope_theta);
    A.attention = std::make_unique<CausalAttention>(ac);
    return A;
  }

  void load(Model::Impl& impl) {
    const int V = c_.vocab_size, I = c_.intermediate_size;
    Stack s;
    s.hidden = d_;
    s.intermediate = I;
    const model::Ends ends{"model.embed_tokens.weight", "lm_head.weight", V};
    const model::MatrixWeight table = model::take_embedding(L_, c_, impl, ends);
    for (int i = 0; i < c_.num_hidden_layers; ++i) {
      const std::string p = fmt::format("model.layers.{}.", i);
      Layer l;
      l.attention = c_.mixers[std::size_t(i)] == MixerKind::kAttention;
      l.operator_norm = rms(p + "operator_norm.weight", d_, "hidden_size");
      if (l.attention) l.attn = attention(p + "self_attn.");
      else l.conv = conv(p + "conv.");
      l.ffn_norm = rms(p + "ffn_norm.weight", d_, "hidden_size");
      l.w1 = dense(p + "feed_forward.w1", I, d_, false, "the MLP's width, hidden_size");
      l.w3 = dense(p + "feed_forward.w3", I, d_, false, "the MLP's width, hidden_size");
      l.w2 = dense(p + "feed_forward.w2", d_, I, false, "hidden_size, the MLP's width");
      s.layers.push_back(std::move(l));
    }
    // transformers names the final norm embedding_norm, and applies it after the last layer.
    impl.has_final_norm = true;
    impl.final_norm = rms("model.embedding_norm.weight", d_, "hidden_size");
    model::take_head(L_, c_, impl, ends, table);
    impl.network = make_network(std::move(s));
  }

 private:
  const ModelConfig& c_;
  const Lfm2Config& g_;
  model::Loader& L_;
  int d_;
};

class Family final : public model::Family {
 public:
  const char* name() const override { return "lfm2"; }
  const char* model_type(const ModelConfig&) const override { return "lfm2"; }
  std::vector<std::string> model_types() const override { return {"lfm2"}; }
  // lfm2_moe is read only to be refused by name (read_config).
  bool reads(const std::string& type, const json::Value&) const override {
    return type == "lfm2" || type == "lfm2_moe";
  }
  void read_config(const std::string& type, const json::Value& root, model::Fields& f,
                   ModelConfig& c) const override {
    lfm2::read_config(type, root, f, c);
  }
  void resolve(ModelConfig& c, const std::string& source) const override { lfm2::resolve(c, source); }
  std::string config_fields(const ModelConfig& c) const override { return lfm2::config_fields(c); }
  std::string fingerprint_fields(const ModelConfig& c) const override {
    return lfm2::config_fields(c, true);
  }
  void load(const ModelConfig& c, const WeightSource&, model::Loader& L,
            Model::Impl& impl) const override {
    Reader(c, L).load(impl);
  }

  std::vector<std::string> make_model_archs() const override { return {"lfm2"}; }
  std::vector<model::MakeOption> make_model_options() const override { return make_options(); }
  std::string make_model_config(const std::string&, const model::MakeOptions& o) const override {
    return make_config(o);
  }

  // LFM2's vocabulary is a byte-level BPE of 65,536 ids: bytes as ids would be another input.
  std::string missing_tokenizer(const std::string& dir) const override {
    return model::tokenizer_json_needed(dir);
  }

  std::string describe(const Model& m, const std::string& label) const override {
    const ModelConfig& c = m.config();
    const Lfm2Config& g = config_of(c);
    const auto n_attn = std::count(c.mixers.begin(), c.mixers.end(), MixerKind::kAttention);
    const int d = g.head_size(c.hidden_size);
    return model::describe_lines(
        m, label,
        fmt::format("lfm2, {} layers ({} gated short convolutions of {} taps; {} attention: {} "
                    "heads ({} kv) of {})",
                    c.num_hidden_layers, c.num_hidden_layers - n_attn, g.conv_L, n_attn, g.n_heads,
                    g.n_kv_heads, d),
        fmt::format(", MLP {}", c.intermediate_size),
        model::state_growth_note(model::kv_cache_growth(std::size_t(n_attn), g.n_kv_heads, d)));
  }
};

}  // namespace
}  // namespace recur::models::lfm2

namespace recur::models {

const model::Family& lfm2_family() {
  static const lfm2::Family family;
  return family;
}

}  // namespace recur::models
