// The linear-attention family's tensors, loading and layer stack (linear_attn and the paper's
// model). Each block: attention over φ(q), φ(k) and v, then the MLP; pre-norm (linear_attn) or
// post-norm (transformers_are_rnns).
#include "models/linear/linear.h"

#include <cstring>
#include <memory>

#include "layers/mlp.h"
#include "model/loader.h"
#include "models/registry.h"
#include "recur/feature_map.h"
#include "recur/linear_attention.h"

namespace recur::models::linear {
namespace {

using model::Dense;
using model::Norm;
using model::Role;
using model::Shape;
using Init = model::TensorSpec::Init;

// Names of one feature map's parameters (under attn.feature_map_q / _k), with shapes.
void feature_map_tensors(const ModelConfig& c, const std::string& prefix,
                         std::vector<model::TensorSpec>& out) {
  const LinearConfig& lc = config_of(c);
  const std::int64_t d = lc.head_k_dim;
  switch (lc.feature_map) {
    case ModelFeatureMap::kHedgehog:
      out.push_back({prefix + "layer.weight", {d, d}, Init::kIdentity});  // the library's identity
      out.push_back({prefix + "layer.bias", {d}, Init::kBias});
      break;
    case ModelFeatureMap::kT2R:
      out.push_back({prefix + "layer.weight", {d, d}});
      break;
    case ModelFeatureMap::kElementwiseProduct:
      out.push_back({prefix + "layer1.weight", {d, d}});
      out.push_back({prefix + "layer1.bias", {d}, Init::kBias});
      out.push_back({prefix + "layer2.weight", {d, d}});
      out.push_back({prefix + "layer2.bias", {d}, Init::kBias});
      break;
    default:
      break;
  }
}

std::string layer_prefix(int i) { return fmt::format("model.layers.{}.", i); }

struct Layer {
  Norm attn_norm;  // pre-norm: before attention; post-norm: after the attention residual
  Norm mlp_norm;
  Dense q, k, v, o;
  // q's and k's maps, per head: head_k_dim floats to d_feature (tied maps share parameters;
  // norm_q / norm_k wrap them).
  std::shared_ptr<const FeatureMap> phi_q, phi_k;
  bool has_head_norm = false;
  Norm head_norm;               // per head, over head_v_dim
  Dense gate, up, down;         // SwiGLU (linear_attn)
  Dense fc1, fc2;               // ReLU / GELU MLP (transformers_are_rnns)
  bool gelu = false;            // fc1's activation: GELU, else ReLU (read once, at load)
  std::unique_ptr<LinearAttention> attention;
};

struct Rows : model::Scratch {
  // a: a sublayer's output (cap, hidden); q, k, v: the projections (cap, key_dim) and per kv
  // group; fq, fk: after the feature maps (cap, heads * d_feature); fk_full, v_full: kv heads
  // repeated for grouped heads; o: attention's output (cap, value_dim); g, u: the MLP's
  // (cap, intermediate); map_scratch: the learned maps' scratch.
  std::vector<float> a, q, k, v, fq, fk, fk_full, v_full, o, g, u, map_scratch;
  std::size_t bytes() const override {
    return Scratch::bytes() + model::buffer_bytes({&a, &q, &k, &v, &fq, &fk, &fk_full, &v_full,
                                                   &o, &g, &u, &map_scratch});
  }
};

class Network final : public model::Network {
 public:
  explicit Network(const ModelConfig& c) : c_(c) {}
  std::vector<Layer> layers;

  std::size_t n_layers() const override { return layers.size(); }

  std::unique_ptr<model::LayerState> make_state(std::size_t layer) const override {
    return std::make_unique<model::MixerState<LinearState>>(layers[layer].attention->make_state(),
                                                            MixerKind::kLinearAttention);
  }

  std::unique_ptr<model::Scratch> make_scratch(int rows) const override {
    auto w = std::make_unique<Rows>();
    const ModelConfig& c = c_;
    const LinearConfig& lc = config_of(c);
    w->cap = rows;
    const auto n = static_cast<std::size_t>(rows);
    const auto sz = [](int width) { return static_cast<std::size_t>(width); };
    const int H = c.num_heads, Hkv = c.num_kv_heads, D = lc.d_feature, dv = lc.head_v_dim;
    w->x.assign(n * sz(c.hidden_size), 0.0f);
    w->h.assign(n * sz(c.hidden_size), 0.0f);
    w->a.assign(n * sz(c.hidden_size), 0.0f);
    w->q.assign(n * sz(lc.key_dim), 0.0f);
    w->k.assign(n * sz(lc.key_dim / lc.kv_groups), 0.0f);
    w->v.assign(n * sz(lc.value_dim / lc.kv_groups), 0.0f);
    w->fq.assign(n * sz(H * D), 0.0f);
    w->fk.assign(n * sz(Hkv * D), 0.0f);
    w->o.assign(n * sz(lc.value_dim), 0.0f);
    if (lc.kv_groups > 1) {
      w->fk_full.assign(n * sz(H * D), 0.0f);
      w->v_full.assign(n * sz(H * dv), 0.0f);
    }
    w->g.assign(n * sz(c.intermediate_size), 0.0f);
    if (config_of(c).fla_layout) w->u.assign(n * sz(c.intermediate_size), 0.0f);
    std::size_t scratch = 0;
    for (const auto& l : layers)
      scratch = std::max({scratch, l.phi_q->scratch_floats(std::int64_t(rows) * H, lc.head_k_dim),
                          l.phi_k->scratch_floats(std::int64_t(rows) * Hkv, lc.head_k_dim)});
    w->map_scratch.assign(scratch, 0.0f);
    return w;
  }

  void run(model::Scratch& scratch, int n, int threads, model::Attend attend) const override {
    Rows& w = static_cast<Rows&>(scratch);
    const ModelConfig& c = c_;
    const LinearConfig& lc = config_of(c);
    const int d = c.hidden_size, H = c.num_heads, Hkv = c.num_kv_heads, D = lc.d_feature;
    const int dv = lc.head_v_dim, G = lc.kv_groups, I = c.intermediate_size;
    const int kd = lc.key_dim / G, vd = lc.value_dim / G;
    const bool pre_norm = lc.fla_layout;
    for (std::size_t li = 0; li < layers.size(); ++li) {
      const auto& L = layers[li];
      // Attention input: the normed residual (pre-norm) or the residual itself (post-norm).
      const float* in = w.x.data();
      if (pre_norm) {
        L.attn_norm.apply(w.x.data(), n, d, w.h.data(), d);
        in = w.h.data();
      }
      L.q.apply(in, n, d, w.q.data(), lc.key_dim, threads);
      L.k.apply(in, n, d, w.k.data(), kd, threads);
      L.v.apply(in, n, d, w.v.data(), vd, threads);
      // Feature maps after the head split: rows of head_k_dim become rows of d_feature.
      const int dk = lc.head_k_dim;
      L.phi_q->apply_with_scratch(w.q.data(), std::int64_t(n) * H, dk, dk, w.fq.data(), D,
                                  w.map_scratch.data());
      L.phi_k->apply_with_scratch(w.k.data(), std::int64_t(n) * Hkv, dk, dk, w.fk.data(), D,
                                  w.map_scratch.data());
      if (G > 1) {
        // Query head j reads kv head j / G (the library's repeat of each kv head G times).
        for (int t = 0; t < n; ++t)
          for (int j = 0; j < H; ++j) {
            const auto at = [](int row, int width, int col, int size) {
              return std::size_t(row) * std::size_t(width) + std::size_t(col) * std::size_t(size);
            };
            std::memcpy(w.fk_full.data() + at(t, H * D, j, D), w.fk.data() + at(t, Hkv * D, j / G, D),
                        sizeof(float) * std::size_t(D));
            std::memcpy(w.v_full.data() + at(t, H * dv, j, dv), w.v.data() + at(t, vd, j / G, dv),
                        sizeof(float) * std::size_t(dv));
          }
      }
      attend(li, 0, threads);
      if (L.has_head_norm) L.head_norm.apply(w.o.data(), n, lc.value_dim, w.o.data(), lc.value_dim, H);
      L.o.apply(w.o.data(), n, lc.value_dim, w.a.data(), d, threads);
      model::add_inplace(w.x.data(), w.a.data(), std::int64_t(n) * d);
      if (pre_norm) {
        model::swiglu_mlp(L.mlp_norm, L.gate, L.up, L.down, w.x.data(), w.h.data(), w.g.data(),
                          w.u.data(), w.a.data(), n, d, threads);
      } else {
        L.attn_norm.apply(w.x.data(), n, d, w.x.data(), d);
        L.fc1.apply(w.x.data(), n, d, w.g.data(), I, threads);
        if (L.gelu) model::gelu_inplace(w.g.data(), std::int64_t(n) * I);
        else model::relu_inplace(w.g.data(), std::int64_t(n) * I);
        L.fc2.apply(w.g.data(), n, I, w.a.data(), d, threads);
        model::add_inplace(w.x.data(), w.a.data(), std::int64_t(n) * d);
        L.mlp_norm.apply(w.x.data(), n, d, w.x.data(), d);
      }
    }
  }

  // Attention over φ(q) (fq), φ(k) and v (kv heads repeated), into o.
  void run_sequence(std::size_t layer, int stage, model::Scratch& scratch, model::LayerState& state,
                    int first, int count, int threads) const override {
    (void)stage;
    Rows& w = static_cast<Rows&>(scratch);
    const ModelConfig& c = c_;
    const LinearConfig& lc = config_of(c);
    const int fq = c.num_heads * lc.d_feature, v = c.num_heads * lc.head_v_dim;
    const auto at = [&](const std::vector<float>& b, int width) {
      return b.data() + std::size_t(first) * std::size_t(width);
    };
    const float* kf = at(lc.kv_groups > 1 ? w.fk_full : w.fk, fq);
    const float* vf = at(lc.kv_groups > 1 ? w.v_full : w.v, v);
    float* out = w.o.data() + std::size_t(first) * std::size_t(v);
    LinearState& s = model::state_of<LinearState>(state);
    const LinearAttention& attention = *layers[layer].attention;
    if (count == 1) {
      using CVec = Eigen::Map<const Eigen::VectorXf>;
      Eigen::Map<Eigen::VectorXf> o(out, v);
      attention.step(s, CVec(at(w.fq, fq), fq), CVec(kf, fq), CVec(vf, v), o);
    } else {
      using CMap = Eigen::Map<const RowMatrix>;
      Eigen::Map<RowMatrix> O(out, count, v);
      attention.prefill(s, CMap(at(w.fq, fq), count, fq), CMap(kf, count, fq), CMap(vf, count, v),
                        O, PrefillOptions{count, threads});
    }
  }

  void clear_sequence(std::size_t, int, model::Scratch& scratch, int first, int count) const override {
    Rows& w = static_cast<Rows&>(scratch);
    const auto v = std::size_t(c_.num_heads * config_of(c_).head_v_dim);
    std::fill(w.o.data() + std::size_t(first) * v, w.o.data() + std::size_t(first + count) * v, 0.0f);
  }

  std::size_t weight_bytes() const override {
    std::size_t bytes = 0;
    for (const auto& l : layers) {
      for (const auto* d : {&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down, &l.fc1, &l.fc2})
        bytes += model::dense_bytes(*d);
      if (l.phi_q) bytes += l.phi_q->parameter_bytes();
      if (l.phi_k && !config_of(c_).tie_feature_map_qk)  // tied maps share one set of matrices
        bytes += l.phi_k->parameter_bytes();
    }
    return bytes;
  }

 private:
  ModelConfig c_;
};

// q's or k's feature map for layer prefix `prefix` (attn.feature_map_q. or _k.).
std::shared_ptr<const FeatureMap> make_map(const ModelConfig& c, model::Loader& L,
                                           const std::string& prefix) {
  const LinearConfig& lc = config_of(c);
  const int dk = lc.head_k_dim;
  const char* why = "head_k_dim";
  switch (lc.feature_map) {
    case ModelFeatureMap::kElu: return make_feature_map(FeatureMapKind::kEluPlusOne);
    case ModelFeatureMap::kRelu: return make_feature_map(FeatureMapKind::kRelu);
    case ModelFeatureMap::kIdentity: return make_feature_map(FeatureMapKind::kIdentity);
    case ModelFeatureMap::kHedgehog:
      return make_hedgehog_map(dk, model::map_linear(L, prefix + "layer", dk, true, why,
                                                     Init::kIdentity));  // the library's identity
    case ModelFeatureMap::kT2R:
      return make_t2r_map(dk, model::map_linear(L, prefix + "layer", dk, false, why));
    case ModelFeatureMap::kElementwiseProduct: {
      FeatureMapLinear l1 = model::map_linear(L, prefix + "layer1", dk, true, why);
      FeatureMapLinear l2 = model::map_linear(L, prefix + "layer2", dk, true, why);
      return make_elementwise_product_map(dk, std::move(l1), std::move(l2));
    }
    case ModelFeatureMap::kDpfp: return make_dpfp_map(dk);
  }
  throw std::logic_error("[Model] internal: unknown feature map");
}

class Family final : public model::Family {
 public:
  const char* name() const override { return "linear attention"; }
  std::vector<std::string> model_types() const override {
    return {"linear_attn", "transformers_are_rnns"};
  }
  const char* model_type(const ModelConfig& c) const override {
    return model::type_of(c) == "linear_attn" ? "linear_attn" : "transformers_are_rnns";
  }
  void read_config(const std::string& type, const json::Value&, model::Fields& f,
                   ModelConfig& c) const override {
    linear::read_config(type, f, c);
  }
  void resolve(ModelConfig& c, const std::string& source) const override {
    linear::resolve(c, source);
  }
  std::string config_fields(const ModelConfig& c) const override { return linear::config_fields(c); }

  // One learned map serves q and k when they are tied; the table lists it under q's name, and a
  // checkpoint may store it under k's.
  std::string table_name(const ModelConfig& c, const std::string& name) const override {
    const LinearConfig& lc = config_of(c);
    std::string listed = name;
    const std::string k_map = "attn.feature_map_k.", q_map = "attn.feature_map_q.";
    if (const auto at = listed.find(k_map); lc.tie_feature_map_qk && at != std::string::npos)
      listed.replace(at, k_map.size(), q_map);
    return listed;
  }

  void load(const ModelConfig& c, const WeightSource& weights, model::Loader& L,
            Model::Impl& impl) const override {
    const LinearConfig& lc = config_of(c);
    const int d = c.hidden_size, I = c.intermediate_size, V = c.vocab_size;
    const auto eps = static_cast<float>(c.norm_eps);
    const bool fla = lc.fla_layout;
    auto net = std::make_unique<Network>(c);
    const model::Ends ends{"model.embeddings.weight", "lm_head.weight", V};
    const model::MatrixWeight table = model::take_embedding(L, c, impl, ends);
    for (int i = 0; i < c.num_hidden_layers; ++i) {
      const std::string p = layer_prefix(i);
      Layer layer;
      const int kd = lc.key_dim / lc.kv_groups, vd = lc.value_dim / lc.kv_groups;
      if (fla) {
        layer.attn_norm = model::norm(L, p + "attn_norm", d, eps, false, true, "hidden_size");
        layer.q = model::dense(L, p + "attn.q_proj", lc.key_dim, d, false, "key_dim, hidden_size");
        layer.k = model::dense(L, p + "attn.k_proj", kd, d, false, "key_dim / kv groups, hidden_size");
        layer.v = model::dense(L, p + "attn.v_proj", vd, d, false, "value_dim / kv groups, hidden_size");
        // The table (the files make-model writes) lists the feature maps and the output norm
        // here; they are read after the MLP (the fingerprint's order).
        std::vector<model::TensorSpec> later;
        feature_map_tensors(c, p + "attn.feature_map_q.", later);
        if (!lc.tie_feature_map_qk) feature_map_tensors(c, p + "attn.feature_map_k.", later);
        if (lc.elementwise_affine) later.push_back({p + "attn.norm.weight", {lc.head_v_dim}, Init::kNorm});
        for (const auto& t : later) L.declare(t.name, t.shape, t.init);
        layer.o = model::dense(L, p + "attn.o_proj", d, lc.value_dim, false, "hidden_size, value_dim");
        layer.mlp_norm = model::norm(L, p + "mlp_norm", d, eps, false, true, "hidden_size");
        layer.gate = model::dense(L, p + "mlp.gate_proj", I, d, false, "intermediate_size, hidden_size");
        layer.up = model::dense(L, p + "mlp.up_proj", I, d, false, "intermediate_size, hidden_size");
        layer.down = model::dense(L, p + "mlp.down_proj", d, I, false, "hidden_size, intermediate_size");
        layer.has_head_norm = true;  // the library's output_norm is always 'rmsnorm' here
        layer.head_norm = model::norm(L, p + "attn.norm", lc.head_v_dim, eps, false,
                                      lc.elementwise_affine, "head_v_dim");
      } else {
        layer.q = model::dense(L, p + "attn.q_proj", d, d, true, "hidden_size");
        layer.k = model::dense(L, p + "attn.k_proj", d, d, true, "hidden_size");
        layer.v = model::dense(L, p + "attn.v_proj", d, d, true, "hidden_size");
        layer.o = model::dense(L, p + "attn.o_proj", d, d, true, "hidden_size");
        layer.attn_norm = model::norm(L, p + "attn_norm", d, eps, true, true, "hidden_size");
        layer.fc1 = model::dense(L, p + "mlp.fc1", I, d, true, "intermediate_size, hidden_size");
        layer.fc2 = model::dense(L, p + "mlp.fc2", d, I, true, "hidden_size, intermediate_size");
        layer.mlp_norm = model::norm(L, p + "mlp_norm", d, eps, true, true, "hidden_size");
        layer.gelu = lc.hidden_act == "gelu";
      }
      // norm_q / norm_k: the map, then x / (sum(x) + 1e-4).
      const auto normalized = [](std::shared_ptr<const FeatureMap> f, bool normalize_sum) {
        return normalize_sum ? make_sum_normalized(std::move(f)) : f;
      };
      const std::string fq = p + "attn.feature_map_q.", fk = p + "attn.feature_map_k.";
      const bool learned = lc.feature_map == ModelFeatureMap::kHedgehog ||
                           lc.feature_map == ModelFeatureMap::kT2R ||
                           lc.feature_map == ModelFeatureMap::kElementwiseProduct;
      if (lc.tie_feature_map_qk && learned) {
        // One module serves both; checkpoints store it under the q name, the k name, or both.
        std::vector<model::TensorSpec> names;
        feature_map_tensors(c, fq, names);
        const bool under_q = L.has(names.front().name);
        const std::shared_ptr<const FeatureMap> tied = make_map(c, L, under_q ? fq : fk);
        layer.phi_q = normalized(tied, lc.norm_q);
        layer.phi_k = normalized(tied, lc.norm_k);
        if (under_q) {
          for (const auto& t : names) {
            const std::string other = fk + t.name.substr(fq.size());
            if (weights.has(other)) L.accept_tied(other, weights.read(t.name), t.shape);
          }
        }
      } else {
        layer.phi_q = normalized(make_map(c, L, fq), lc.norm_q);
        layer.phi_k = normalized(make_map(c, L, fk), lc.norm_k);
      }
      LinearAttentionConfig ac;
      ac.n_heads = c.num_heads;
      ac.d_key = lc.d_feature;  // the model applies the feature maps itself: q and k may differ
      ac.d_value = lc.head_v_dim;
      ac.feature_map = FeatureMapKind::kIdentity;
      ac.normalized = lc.norm_feature_map;
      ac.scale = lc.attn_scale;
      ac.eps = static_cast<float>(lc.attn_eps);
      try {
        layer.attention = std::make_unique<LinearAttention>(ac);
      } catch (const ArgumentError& e) {  // a bad model is a FormatError, whatever layer finds it
        throw FormatError(fmt::format("[Model] {}: layer {}: {}", weights.describe(), i, e.what()));
      }
      net->layers.push_back(std::move(layer));
    }
    if (fla) {
      impl.has_final_norm = true;
      impl.final_norm = model::norm(L, "model.norm", d, eps, false, true, "hidden_size");
    }
    model::take_head(L, c, impl, ends, table);
    impl.network = std::move(net);
  }

  std::vector<std::string> make_model_archs() const override {
    return {"linear_attn", "transformers_are_rnns"};
  }
  std::vector<model::MakeOption> make_model_options() const override {
    auto out = linear_attn_schema().make_options({"linear_attn"});
    for (auto& o : transformers_are_rnns_schema().make_options({"transformers_are_rnns"}))
      out.push_back(std::move(o));
    return out;
  }
  std::string make_model_config(const std::string& arch, const model::MakeOptions& o) const override {
    const auto& schema = arch == "linear_attn" ? linear_attn_schema() : transformers_are_rnns_schema();
    return fmt::format("{{\"model_type\": \"{}\", {}}}", arch, schema.make_fields(o));
  }

  std::string describe(const Model& m, const std::string& label) const override {
    const ModelConfig& c = m.config();
    const LinearConfig& lc = config_of(c);
    return fmt::format("model: {}: {}, {} layers, hidden {}, {} heads{}, feature map {}, {} form, "
                       "vocab {}, {:.2f}M parameters\n",
                       label, model_type(c),
                       c.num_hidden_layers, c.hidden_size, c.num_heads,
                       c.num_kv_heads != c.num_heads ? fmt::format(" ({} kv)", c.num_kv_heads) : "",
                       feature_map_name(lc.feature_map),
                       lc.norm_feature_map ? "normalized" : "unnormalized", c.vocab_size,
                       double(m.parameters()) / 1e6);
  }
};

}  // namespace
}  // namespace recur::models::linear

namespace recur::models {

const model::Family& linear_family() {
  static const linear::Family family;
  return family;
}

}  // namespace recur::models
