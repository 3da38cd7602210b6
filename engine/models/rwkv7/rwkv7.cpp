// RWKV-7 as a family of recur: reading either layout's tensors into one Stack (rwkv7_network.h)
// and the Family interface (config.json, .pth, tensor table, description).
#include "models/rwkv7/rwkv7.h"

#include <fmt/format.h>

#include <algorithm>

#include "model/loader.h"
#include "models/registry.h"
#include "models/rwkv7/rwkv7_network.h"
#include "recur/error.h"

namespace recur::models::rwkv7 {
namespace {

using model::Dense;
using model::Norm;
using Init = model::TensorSpec::Init;
using Layout = Rwkv7Config::Layout;

// The transpose of a (rows, cols) row-major matrix.
std::vector<float> transposed(const std::vector<float>& m, int rows, int cols) {
  std::vector<float> out(m.size());
  for (int i = 0; i < rows; ++i)
    for (int j = 0; j < cols; ++j)
      out[std::size_t(j) * std::size_t(rows) + std::size_t(i)] =
          m[std::size_t(i) * std::size_t(cols) + std::size_t(j)];
  return out;
}

class Reader {
 public:
  Reader(const ModelConfig& c, model::Loader& L)
      : c_(c), rc_(config_of(c)), n_(names_of(rc_)), L_(L), C_(c.hidden_size) {}

  // A per-channel vector: [1, 1, C] in BlinkDL's layout (and fla's lerps), [C] otherwise.
  std::vector<float> vec(const std::string& name, bool three_d, Init init = Init::kBias) {
    return L_.take(name, three_d ? model::Shape{1, 1, C_} : model::Shape{C_}, "hidden_size", init);
  }

  Norm layer_norm(const std::string& name, bool stored, bool bias) {
    Norm n;
    n.layer_norm = true;
    n.dim = C_;
    n.eps = float(c_.norm_eps);
    if (stored) {
      n.weight = vec(name + ".weight", false, Init::kNorm);
      if (bias) n.bias = vec(name + ".bias", false);
    }
    return n;
  }

  // A LoRA factor as a Linear (out, in): fla stores it so; BlinkDL stores its transpose.
  Dense factor(const std::string& name, int out, int in, const char* why) {
    const model::Shape stored = n_.blink ? model::Shape{in, out} : model::Shape{out, in};
    std::vector<float> v = L_.take(name, stored, why, Init::kMatrix);
    if (n_.blink) v = transposed(v, in, out);
    Dense d;
    d.w = kernels::PackedMatrix(v.data(), out, in, L_.dtype(name));
    return d;
  }

  // LoRA `which` of layer prefix p: first (rank, C), second (C, rank) with its bias.
  void lora(const std::string& p, char which, int rank, bool bias, Dense& first, Dense& second) {
    const char* why = "hidden_size and the LoRA's rank";
    if (n_.blink) {
      const std::string a = p + "att." + which;
      if (bias) second.bias = vec(a + "0", true);
      first = factor(a + "1", rank, C_, why);
      std::vector<float> b = std::move(second.bias);
      second = factor(a + "2", C_, rank, why);
      second.bias = std::move(b);
    } else {
      const std::string q = p + "attn." + which + "_lora.lora.";
      first = factor(q + "0.weight", rank, C_, why);
      second = factor(q + "2.weight", C_, rank, why);
      if (bias) second.bias = vec(q + "2.bias", false);
    }
  }

  Layer layer(int i) {
    const std::string p = n_.layer(i), a = p + n_.att, f = p + n_.ffn;
    const int F = c_.intermediate_size, H = rc_.n_heads, N = rc_.head_size;
    Layer l;
    l.ln1 = layer_norm(p + n_.ln1, true, rc_.norm_bias);
    l.ln2 = layer_norm(p + n_.ln2, true, rc_.norm_bias);
    if (rc_.fused_lerps) {
      l.mix = L_.take(a + "x_x", {6, C_}, "6 lerps of hidden_size", Init::kBias);
    } else {
      for (const char* x : {"x_r", "x_w", "x_k", "x_v", "x_a", "x_g"}) {
        const auto v = vec(a + x, true);
        l.mix.insert(l.mix.end(), v.begin(), v.end());
      }
    }
    lora(p, 'w', rc_.rank_w, true, l.w1, l.w2);
    lora(p, 'a', rc_.rank_a, true, l.a1, l.a2);
    if (i > 0) {
      lora(p, 'v', rc_.rank_v, true, l.v1, l.v2);
      l.value_residual = true;
    } else if (n_.blink) {
      // Saved by the training code on layer 0 too, absent from some published files; never
      // used (layer 0 only sets v_first), as every published reader does.
      for (const char* x : {"v0", "v1", "v2"}) L_.ignore(a + x);
    }
    lora(p, 'g', rc_.rank_g, false, l.g1, l.g2);
    l.k_k = vec(a + "k_k", n_.blink);
    l.k_a = vec(a + "k_a", n_.blink);
    l.r_k = L_.take(a + "r_k", {H, N}, "heads, head_dim", Init::kBias);
    const auto proj = [&](const std::string& name) {
      return model::dense(L_, a + name, C_, C_, false, "hidden_size");
    };
    l.r = proj(n_.r);
    l.k = proj(n_.k);
    l.v = proj(n_.v);
    l.o = proj(n_.o);
    l.lnx_w = vec(a + n_.lnx + ".weight", false, Init::kNorm);
    l.lnx_b = vec(a + n_.lnx + ".bias", false);
    l.ffn_x_k = vec(f + "x_k", n_.blink);
    l.ffn_key = model::dense(L_, f + "key", F, C_, false, "intermediate_size, hidden_size");
    l.ffn_value = model::dense(L_, f + "value", C_, F, false, "hidden_size, intermediate_size");
    return l;
  }

  void load(Model::Impl& impl) {
    Stack s;
    s.C = C_;
    s.H = rc_.n_heads;
    s.N = rc_.head_size;
    s.F = c_.intermediate_size;
    s.max_rank = std::max({rc_.rank_w, rc_.rank_a, rc_.rank_v, rc_.rank_g});
    s.lnx_eps = rc_.lnx_eps;
    s.fla_l2 = rc_.fla_l2;
    s.ln0 = rc_.ln0;
    const model::Ends ends{n_.emb, n_.head, c_.vocab_size};
    const model::MatrixWeight table = model::take_embedding(L_, c_, impl, ends);
    if (rc_.ln0) s.ln0_norm = layer_norm(n_.ln0, rc_.ln0_stored, rc_.norm_bias);
    for (int i = 0; i < c_.num_hidden_layers; ++i) s.layers.push_back(layer(i));
    impl.has_final_norm = true;
    impl.final_norm = layer_norm(n_.ln_out, true, rc_.norm_bias);
    model::take_head(L_, c_, impl, ends, table);
    impl.network = make_network(std::move(s));
  }

 private:
  const ModelConfig& c_;
  const Rwkv7Config& rc_;
  Names n_;
  model::Loader& L_;
  int C_;
};

class Family final : public model::Family {
 public:
  const char* name() const override { return "rwkv7"; }
  const char* model_type(const ModelConfig&) const override { return "rwkv7"; }
  std::vector<std::string> model_types() const override { return {"rwkv7"}; }
  void read_config(const std::string&, const json::Value& root, model::Fields& f,
                   ModelConfig& c) const override {
    rwkv7::read_config(root, f, c);
  }
  void resolve(ModelConfig& c, const std::string& source) const override {
    rwkv7::resolve(c, source);
  }
  std::optional<ModelConfig> config_from_weights(const WeightSource& w,
                                                 const std::string& source) const override {
    return rwkv7::config_from_weights(w, source);
  }
  void fit_to_weights(ModelConfig& c, const WeightSource& w) const override {
    rwkv7::fit_to_weights(c, w);
  }
  std::string config_fields(const ModelConfig& c) const override { return rwkv7::config_fields(c); }
  void load(const ModelConfig& c, const WeightSource&, model::Loader& L,
            Model::Impl& impl) const override {
    Reader(c, L).load(impl);
  }
  std::vector<std::string> make_model_archs() const override { return {"rwkv7"}; }
  std::vector<model::MakeOption> make_model_options() const override {
    return rwkv7::make_model_options();
  }
  std::string make_model_config(const std::string&, const model::MakeOptions& o) const override {
    return rwkv7::make_model_config(o);
  }
  // Published RWKV-7 models read RWKV's world vocabulary (65,536 ids) or, the Pile ones, GPT-NeoX's
  // tokenizer.json: bytes as ids would be another model's input.
  std::string missing_tokenizer(const std::string& dir) const override {
    return fmt::format(
        "{} holds neither rwkv_vocab_v20230424.txt (RWKV's world vocabulary) nor tokenizer.json: "
        "pass --tokenizer FILE|DIR, or give and take token ids (--prompt-ids and --ids, "
        "--token-ids)", dir);
  }
  std::string describe(const Model& m, const std::string& label) const override {
    const ModelConfig& c = m.config();
    const Rwkv7Config& rc = config_of(c);
    return model::describe_lines(
        m, label,
        fmt::format("rwkv7 ({} layout), {} layers", rc.layout == Layout::kBlink ? "BlinkDL" : "fla",
                    c.num_hidden_layers),
        fmt::format(", {} heads of {}, FFN {}, LoRA ranks w {} a {} v {} g {}", rc.n_heads,
                    rc.head_size, c.intermediate_size, rc.rank_w, rc.rank_a, rc.rank_v, rc.rank_g),
        fmt::format(" at any length (per layer two shifted rows and {} matrices of {}x{})",
                    rc.n_heads, rc.head_size, rc.head_size));
  }
};

}  // namespace
}  // namespace recur::models::rwkv7

namespace recur::models {

const model::Family& rwkv7_family() {
  static const rwkv7::Family family;
  return family;
}

}  // namespace recur::models
