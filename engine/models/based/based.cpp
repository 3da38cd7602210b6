// Based's tensors (named as its checkpoints name them, after the "model." prefix the training
// code's state dict adds is taken off), loading, and the layer stack: x += mixer(RMSNorm(x));
// x += fc2(value * silu(gate)) of RMSNorm(x). The fused projections of the checkpoint (BaseConv's
// in_proj, the window's Wqkv, the MLP's fc1) are split into their parts.
#include "models/based/based.h"

#include <algorithm>
#include <memory>

#include "layers/mlp.h"
#include "layers/sequence.h"
#include "model/loader.h"
#include "models/registry.h"
#include "recur/linear_attention.h"
#include "recur/short_conv.h"
#include "recur/window_attention.h"

namespace recur::models::based {
namespace {

constexpr float kLinearEps = 1e-12f;  // the Taylor layer's denominator eps in the published code

using model::Dense;
using model::Norm;
using model::Role;
using model::Shape;
using Init = model::TensorSpec::Init;

struct Layer {
  MixerKind mixer = MixerKind::kShortConv;
  Norm attn_norm, mlp_norm;  // norm1, norm2
  // kShortConv: in_proj's two halves, the convolution of the first, the gate silu(conv(u1)) * u2,
  // out_proj. kLinearAttention: proj_q, proj_k, proj_v; kWindowAttention: Wqkv's three thirds.
  Dense q, k, v, in_u1, in_u2, out_proj;
  std::unique_ptr<ShortConvolution> conv;
  std::unique_ptr<LinearAttention> attention;
  std::unique_ptr<WindowAttention> window;
  Dense gate, up, down;  // GatedMlp: fc1's two halves, fc2
};

struct Rows : model::Scratch {
  // a: a sublayer's output (cap, hidden); q, k: linear attention's (cap, heads * feature_dim) or
  // the window's (cap, hidden); v (cap, hidden); u1, u2: BaseConv's halves (cap, d_inner); o: the
  // mixer's output, attention's or conv(u1) (cap, max(hidden, d_inner)); g, u: the MLP's gate
  // and value (cap, intermediate).
  std::vector<float> a, q, k, v, u1, u2, o, g, u;
  std::size_t bytes() const override {
    return Scratch::bytes() + model::buffer_bytes({&a, &q, &k, &v, &u1, &u2, &o, &g, &u});
  }
};

class Network final : public model::Network {
 public:
  explicit Network(const ModelConfig& c) : c_(c) {}
  std::vector<Layer> layers;

  std::size_t n_layers() const override { return layers.size(); }

  std::unique_ptr<model::LayerState> make_state(std::size_t layer) const override {
    const Layer& l = layers[layer];
    switch (l.mixer) {
      case MixerKind::kShortConv:
        return std::make_unique<model::MixerState<ShortConvState>>(l.conv->make_state(), l.mixer);
      case MixerKind::kLinearAttention:
        return std::make_unique<model::MixerState<LinearState>>(l.attention->make_state(), l.mixer);
      default:
        return std::make_unique<model::MixerState<WindowState>>(l.window->make_state(), l.mixer);
    }
  }

  std::unique_ptr<model::Scratch> make_scratch(int rows) const override {
    auto w = std::make_unique<Rows>();
    const ModelConfig& c = c_;
    w->cap = rows;
    const auto n = static_cast<std::size_t>(rows);
    const auto sz = [](int width) { return static_cast<std::size_t>(width); };
    const int d = c.hidden_size, di = d_inner();
    const int qk = std::max(config_of(c).key_dim, d);
    for (auto* b : {&w->x, &w->h, &w->a, &w->v}) b->assign(n * sz(d), 0.0f);
    w->q.assign(n * sz(qk), 0.0f);
    w->k.assign(n * sz(qk), 0.0f);
    w->u1.assign(n * sz(di), 0.0f);
    w->u2.assign(n * sz(di), 0.0f);
    w->o.assign(n * sz(std::max(d, di)), 0.0f);
    w->g.assign(n * sz(c.intermediate_size), 0.0f);
    w->u.assign(n * sz(c.intermediate_size), 0.0f);
    return w;
  }

  void run(model::Scratch& scratch, int n, int threads, model::Attend attend) const override {
    Rows& w = static_cast<Rows&>(scratch);
    const ModelConfig& c = c_;
    const int d = c.hidden_size, di = d_inner();
    const auto rows = std::int64_t(n);
    for (std::size_t li = 0; li < layers.size(); ++li) {
      const auto& L = layers[li];
      L.attn_norm.apply(w.x.data(), n, d, w.h.data(), d);
      switch (L.mixer) {
        case MixerKind::kShortConv:
          L.in_u1.apply(w.h.data(), n, d, w.u1.data(), di, threads);
          L.in_u2.apply(w.h.data(), n, d, w.u2.data(), di, threads);
          attend(li, 0, threads);
          // silu(conv(u1)) * u2, the swish-gated unit with the convolution as its gate.
          model::swiglu(w.o.data(), w.u2.data(), w.o.data(), rows * di);
          L.out_proj.apply(w.o.data(), n, di, w.a.data(), d, threads);
          break;
        case MixerKind::kLinearAttention:
          L.q.apply(w.h.data(), n, d, w.q.data(), config_of(c).key_dim, threads);
          L.k.apply(w.h.data(), n, d, w.k.data(), config_of(c).key_dim, threads);
          L.v.apply(w.h.data(), n, d, w.v.data(), d, threads);
          attend(li, 0, threads);
          L.out_proj.apply(w.o.data(), n, d, w.a.data(), d, threads);
          break;
        default:  // kWindowAttention
          L.q.apply(w.h.data(), n, d, w.q.data(), d, threads);
          L.k.apply(w.h.data(), n, d, w.k.data(), d, threads);
          L.v.apply(w.h.data(), n, d, w.v.data(), d, threads);
          attend(li, 0, threads);
          L.out_proj.apply(w.o.data(), n, d, w.a.data(), d, threads);
          break;
      }
      model::add_inplace(w.x.data(), w.a.data(), rows * d);
      model::swiglu_mlp(L.mlp_norm, L.gate, L.up, L.down, w.x.data(), w.h.data(), w.g.data(),
                        w.u.data(), w.a.data(), n, d, threads);
    }
  }

  // The mixer over its inputs (BaseConv: u1; the attentions: q, k, v before rotary) into o.
  void run_sequence(std::size_t layer, int stage, model::Scratch& scratch, model::LayerState& state,
                    int first, int count, int threads) const override {
    (void)stage;
    Rows& w = static_cast<Rows&>(scratch);
    const Layer& L = layers[layer];
    using CVec = Eigen::Map<const Eigen::VectorXf>;
    using Vec = Eigen::Map<Eigen::VectorXf>;
    using CMap = Eigen::Map<const RowMatrix>;
    using Map = Eigen::Map<RowMatrix>;
    const auto at = [&](const std::vector<float>& b, int width) {
      return b.data() + std::size_t(first) * std::size_t(width);
    };
    const int d = c_.hidden_size;
    switch (L.mixer) {
      case MixerKind::kShortConv: {
        const int di = d_inner();
        model::convolve(*L.conv, model::state_of<ShortConvState>(state), at(w.u1, di),
                        w.o.data() + std::size_t(first) * std::size_t(di), count);
        return;
      }
      case MixerKind::kLinearAttention: {
        const int kd = config_of(c_).key_dim;
        float* out = w.o.data() + std::size_t(first) * std::size_t(d);
        LinearState& s = model::state_of<LinearState>(state);
        if (count == 1) {
          Vec o(out, d);
          L.attention->step(s, CVec(at(w.q, kd), kd), CVec(at(w.k, kd), kd), CVec(at(w.v, d), d), o);
        } else {
          Map O(out, count, d);
          L.attention->prefill(s, CMap(at(w.q, kd), count, kd), CMap(at(w.k, kd), count, kd),
                               CMap(at(w.v, d), count, d), O, PrefillOptions{count, threads});
        }
        return;
      }
      default: {  // kWindowAttention
        float* out = w.o.data() + std::size_t(first) * std::size_t(d);
        WindowState& s = model::state_of<WindowState>(state);
        if (count == 1) {
          Vec o(out, d);
          L.window->step(s, CVec(at(w.q, d), d), CVec(at(w.k, d), d), CVec(at(w.v, d), d), o);
        } else {
          Map O(out, count, d);
          L.window->prefill(s, CMap(at(w.q, d), count, d), CMap(at(w.k, d), count, d),
                            CMap(at(w.v, d), count, d), O, PrefillOptions{count, threads});
        }
        return;
      }
    }
  }

  void clear_sequence(std::size_t layer, int, model::Scratch& scratch, int first,
                      int count) const override {
    Rows& w = static_cast<Rows&>(scratch);
    const auto width = std::size_t(layers[layer].mixer == MixerKind::kShortConv ? d_inner()
                                                                               : c_.hidden_size);
    std::fill(w.o.data() + std::size_t(first) * width, w.o.data() + std::size_t(first + count) * width,
              0.0f);
  }

  std::size_t weight_bytes() const override {
    std::size_t bytes = 0;
    for (const auto& l : layers)
      for (const auto* d : {&l.q, &l.k, &l.v, &l.gate, &l.up, &l.down, &l.in_u1, &l.in_u2, &l.out_proj})
        bytes += model::dense_bytes(*d);
    return bytes;
  }

 private:
  int d_inner() const { return config_of(c_).conv_expand * c_.hidden_size / 2; }
  ModelConfig c_;
};

using model::rows_of;

class Family final : public model::Family {
 public:
  const char* name() const override { return "Based"; }
  std::vector<std::string> model_types() const override { return {"based"}; }
  const char* also_reads() const override { return "gpt2 with Based's mixer fields"; }
  const char* model_type(const ModelConfig&) const override { return "based"; }
  bool reads(const std::string& type, const json::Value& root) const override {
    return type == "based" || (type == "gpt2" && (root.find("alt_mixer") || root.find("mixer")));
  }
  void read_config(const std::string&, const json::Value&, model::Fields& f,
                   ModelConfig& c) const override {
    based::read_config(f, c);
  }
  void resolve(ModelConfig& c, const std::string& source) const override { based::resolve(c, source); }
  std::string config_fields(const ModelConfig& c) const override { return based::config_fields(c); }

  // The head is the embedding; a checkpoint may store it as lm_head.weight alone.
  std::string table_name(const ModelConfig& c, const std::string& name) const override {
    (void)c;
    return name == "lm_head.weight" ? "transformer.embeddings.word_embeddings.weight" : name;
  }

  void load(const ModelConfig& c, const WeightSource&, model::Loader& L,
            Model::Impl& impl) const override {
    const BasedConfig& bc = config_of(c);
    const int d = c.hidden_size, Hm = c.intermediate_size;
    const int di = bc.conv_expand * d / 2;
    const auto eps = static_cast<float>(c.norm_eps);
    auto net = std::make_unique<Network>(c);
    // The head is tied to the embedding; a checkpoint holds it under either name, or both (with
    // neither, the embedding's name is the one said missing).
    model::Ends ends{"transformer.embeddings.word_embeddings.weight", "lm_head.weight",
                     bc.embedding_rows, "vocab_size padded, n_embd", true};
    const model::MatrixWeight table = model::take_embedding(L, c, impl, ends);
    L.ignore("transformer.decay.decay");  // based-1b's fixed_decay buffer: no layer reads it
    for (int i = 0; i < c.num_hidden_layers; ++i) {
      const std::string p = fmt::format("transformer.layers.{}.", i);
      Layer layer;
      layer.mixer = c.mixers[std::size_t(i)];
      layer.attn_norm = model::norm(L, p + "norm1", d, eps, false, true, "n_embd");
      switch (layer.mixer) {
        case MixerKind::kShortConv: {
          const std::string in = p + "mixer.in_proj.weight";
          const auto w = L.take_matrix(in, in, 2 * di, d, Role::kMatrix, "expand_proj * n_embd, n_embd");
          std::vector<float> b;
          if (bc.conv_bias)
            b = L.take(p + "mixer.in_proj.bias", {2 * di}, "expand_proj * n_embd", Init::kBias);
          layer.in_u1 = rows_of(w, b, 0, di);
          layer.in_u2 = rows_of(w, b, di, di);
          const auto taps = L.take(p + "mixer.conv.conv.weight", {di, 1, bc.conv_kernel},
                                   "expand_proj * n_embd / 2, 1, kernel_size", Init::kConv);
          layer.conv = std::make_unique<ShortConvolution>(
              Eigen::Map<const RowMatrix>(taps.data(), di, bc.conv_kernel));
          layer.out_proj = model::dense(L, p + "mixer.out_proj", d, di, bc.conv_bias,
                                        "n_embd, expand_proj * n_embd / 2");
          break;
        }
        case MixerKind::kLinearAttention: {
          layer.q = model::dense(L, p + "mixer.proj_q", bc.key_dim, d, false, "num_heads * feature_dim, n_embd");
          layer.k = model::dense(L, p + "mixer.proj_k", bc.key_dim, d, false, "num_heads * feature_dim, n_embd");
          layer.v = model::dense(L, p + "mixer.proj_v", d, d, false, "n_embd");
          layer.out_proj = model::dense(L, p + "mixer.out_proj", d, d, false, "n_embd");
          LinearAttentionConfig ac;
          ac.n_heads = bc.la_heads;
          ac.d_key = bc.la_feature_dim;
          ac.d_value = d / bc.la_heads;
          ac.feature_map = FeatureMapKind::kTaylor;
          ac.normalized = true;
          ac.scale = 1.0f;
          ac.eps = kLinearEps;
          layer.attention = std::make_unique<LinearAttention>(ac);
          break;
        }
        default: {  // kWindowAttention
          const std::string qkv = p + "mixer.Wqkv.weight";
          const auto w = L.take_matrix(qkv, qkv, 3 * d, d, Role::kMatrix, "3 n_embd, n_embd");
          layer.q = rows_of(w, {}, 0, d);
          layer.k = rows_of(w, {}, d, d);
          layer.v = rows_of(w, {}, 2 * d, d);
          layer.out_proj = model::dense(L, p + "mixer.out_proj", d, d, false, "n_embd");
          WindowAttentionConfig wc;
          wc.n_heads = bc.window_heads;
          wc.d_head = d / bc.window_heads;
          wc.window = bc.window_size / 2;  // flash-attn's window (window_size // 2, 0)
          wc.rope_theta = static_cast<float>(bc.rope_theta);
          layer.window = std::make_unique<WindowAttention>(wc);
          break;
        }
      }
      layer.mlp_norm = model::norm(L, p + "norm2", d, eps, false, true, "n_embd");
      // GatedMlp: fc1's first half is the value, its second half the gate: fc2(y * silu(gate)).
      const std::string fc1_name = p + "mlp.fc1.weight";
      const auto fc1 = L.take_matrix(fc1_name, fc1_name, 2 * Hm, d, Role::kMatrix, "2 n_inner, n_embd");
      layer.up = rows_of(fc1, {}, 0, Hm);
      layer.gate = rows_of(fc1, {}, Hm, Hm);
      layer.down = model::dense(L, p + "mlp.fc2", d, Hm, false, "n_embd, n_inner");
      net->layers.push_back(std::move(layer));
    }
    impl.has_final_norm = true;
    impl.final_norm = model::norm(L, "transformer.ln_f", d, eps, false, true, "n_embd");
    model::take_head(L, c, impl, ends, table);
    impl.network = std::move(net);
  }

  std::vector<std::string> make_model_archs() const override { return {"based"}; }
  std::vector<model::MakeOption> make_model_options() const override {
    return gpt2_schema().make_options();
  }
  // The published layout from the table, with the mixers' defaults (a bias, expand_proj 4, 3
  // taps) and the published embedding's padding to a multiple of 8.
  std::string make_model_config(const std::string&, const model::MakeOptions& o) const override {
    if (o.given("tie-embeddings"))
      throw ArgumentError("--tie-embeddings does not apply to --arch based (its head is always tied)");
    return "{\"model_type\": \"gpt2\", " + gpt2_schema().make_fields(o) + "}";
  }

  std::string describe(const Model& m, const std::string& label) const override {
    const ModelConfig& c = m.config();
    const BasedConfig& bc = config_of(c);
    const auto count = [&](MixerKind k) { return std::count(c.mixers.begin(), c.mixers.end(), k); };
    const model::Network& net = *model::impl_of(m).network;
    const auto mib = [&](MixerKind k) { return double(model::new_state_bytes(net, &k)) / double(1 << 20); };
    return fmt::format("model: {}: based, {} layers ({} BaseConv, {} Taylor linear attention, {} "
                       "sliding window of {} tokens), hidden {}, vocab {}, {:.2f}M parameters\n"
                       "state: {:.2f} MiB in the convolutions, {:.2f} MiB in linear attention, "
                       "{:.2f} MiB in the windows: {:.2f} MiB at any length\n",
                       label, c.num_hidden_layers, count(MixerKind::kShortConv),
                       count(MixerKind::kLinearAttention), count(MixerKind::kWindowAttention),
                       bc.window_size / 2 + 1, c.hidden_size, c.vocab_size,
                       double(m.parameters()) / 1e6, mib(MixerKind::kShortConv),
                       mib(MixerKind::kLinearAttention), mib(MixerKind::kWindowAttention),
                       double(model::new_state_bytes(net)) / double(1 << 20));
  }

  // Based's checkpoints ship no tokenizer: they were trained on GPT-2's ids, not bytes.
  std::string missing_tokenizer(const std::string& dir) const override {
    return fmt::format(
        "{} holds no tokenizer.json, and this Based model was trained on GPT-2's tokenizer: pass "
        "--tokenizer FILE|DIR (GPT-2's tokenizer.json), or give and take token ids "
        "(--prompt-ids and --ids, --token-ids)", dir);
  }
};

}  // namespace
}  // namespace recur::models::based

namespace recur::models {

const model::Family& based_family() {
  static const based::Family family;
  return family;
}

}  // namespace recur::models
