// The Mamba-2 models as a family of recur: the layer stack (x += mixer(rmsnorm(x)) per layer),
// reading the tensors into it, and the Family interface (docs/mamba2.md).
#include "models/mamba2/mamba2.h"

#include <fmt/format.h>

#include "model/loader.h"
#include "model/model_impl.h"
#include "models/registry.h"
#include "recur/error.h"

namespace recur::models::mamba2 {

const Mamba2Config& config_of(const ModelConfig& c) {
  const auto* g = dynamic_cast<const Mamba2Config*>(c.family.get());
  if (!g) throw std::logic_error("[Model] internal: a Mamba-2 configuration without its fields");
  return *g;
}

namespace {

using model::Norm;

struct Layer {
  Norm norm;  // over hidden
  model::SsdMixer mixer;
};

struct Rows : model::Scratch {
  std::vector<float> a;  // (cap, hidden): the mixer's output
  model::SsdRows ssd;
  std::size_t bytes() const override {
    return Scratch::bytes() + model::buffer_bytes({&a}) + ssd.bytes();
  }
};

class Network final : public model::Network {
 public:
  Network(int hidden, std::vector<Layer> layers) : hidden_(hidden), layers_(std::move(layers)) {}

  std::size_t n_layers() const override { return layers_.size(); }

  std::unique_ptr<model::LayerState> make_state(std::size_t layer) const override {
    return model::make_ssd_state(layers_[layer].mixer);
  }

  std::unique_ptr<model::Scratch> make_scratch(int rows) const override {
    auto w = std::make_unique<Rows>();
    w->cap = rows;
    const auto n = std::size_t(rows) * std::size_t(hidden_);
    for (auto* b : {&w->x, &w->h, &w->a}) b->assign(n, 0.0f);
    for (const auto& l : layers_) w->ssd.grow(rows, l.mixer.spec);
    return w;
  }

  void run(model::Scratch& scratch, int n, int threads, model::Attend attend) const override {
    Rows& w = static_cast<Rows&>(scratch);
    for (std::size_t li = 0; li < layers_.size(); ++li) {
      const Layer& L = layers_[li];
      L.norm.apply(w.x.data(), n, hidden_, w.h.data(), hidden_);
      model::ssd_project(L.mixer, w.h.data(), n, w.ssd, threads);
      attend(li, 0, threads);
      model::ssd_output(L.mixer, w.ssd, n, w.a.data(), threads);
      model::add_inplace(w.x.data(), w.a.data(), std::int64_t(n) * hidden_);
    }
  }

  void run_sequence(std::size_t layer, int stage, model::Scratch& scratch,
                    model::LayerState& state, int first, int count, int threads) const override {
    (void)stage;
    model::ssd_sequence(layers_[layer].mixer, static_cast<model::SsdState&>(state),
                        static_cast<Rows&>(scratch).ssd, first, count, threads);
  }

  void clear_sequence(std::size_t layer, int, model::Scratch& scratch, int first,
                      int count) const override {
    model::ssd_clear(layers_[layer].mixer, static_cast<Rows&>(scratch).ssd, first, count);
  }

  std::size_t weight_bytes() const override {
    std::size_t bytes = 0;
    for (const auto& L : layers_) bytes += model::ssd_weight_bytes(L.mixer);
    return bytes;
  }

 private:
  int hidden_;
  std::vector<Layer> layers_;
};

void load(const ModelConfig& c, const WeightSource& weights, model::Loader& L, Model::Impl& impl) {
  (void)weights;
  const Mamba2Config& g = config_of(c);
  const Names n = names_of(g);
  const int V = c.vocab_size, d = c.hidden_size;
  const model::SsdSpec spec = g.ssd(c);
  const auto rms = [&](const std::string& name) {
    Norm norm;
    norm.dim = d;
    norm.eps = float(c.norm_eps);
    norm.weight = L.take(name, {d}, "hidden_size", model::Init::kNorm);
    return norm;
  };
  model::Ends ends;
  ends.embedding = n.emb;
  ends.head = n.head;
  ends.rows = V;
  const model::MatrixWeight table = model::take_embedding(L, c, impl, ends);
  std::vector<Layer> layers;
  for (int i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = n.layer(i);
    Layer l;
    l.norm = rms(p + "norm.weight");
    l.mixer = model::load_ssd_mixer(L, p + "mixer.", spec);
    layers.push_back(std::move(l));
  }
  impl.has_final_norm = true;
  impl.final_norm = rms(n.final_norm);
  model::take_head(L, c, impl, ends, table);
  impl.network = std::make_unique<Network>(d, std::move(layers));
}

class Family final : public model::Family {
 public:
  const char* name() const override { return "mamba2"; }
  // Both layouts are one type; the layout is the family's own field (Mamba2Config::layout).
  std::vector<std::string> model_types() const override { return {"mamba2"}; }
  const char* also_reads() const override {
    return "mamba_ssm's config.json (ssm_cfg with layer Mamba2)";
  }
  const char* model_type(const ModelConfig&) const override { return "mamba2"; }
  bool reads(const std::string& type, const json::Value& root) const override {
    return mamba2::reads(type, root);
  }
  void read_config(const std::string& type, const json::Value& root, model::Fields& f,
                   ModelConfig& c) const override {
    mamba2::read_config(type, root, f, c);
  }
  void resolve(ModelConfig& c, const std::string& source) const override {
    mamba2::resolve(c, source);
  }
  std::string config_fields(const ModelConfig& c) const override {
    return mamba2::config_fields(c);
  }
  std::string fingerprint_fields(const ModelConfig& c) const override {
    return mamba2::config_fields(c, true);
  }
  void load(const ModelConfig& c, const WeightSource& weights, model::Loader& L,
            Model::Impl& impl) const override {
    mamba2::load(c, weights, L, impl);
  }

  std::vector<std::string> make_model_archs() const override { return {"mamba2"}; }
  std::vector<model::MakeOption> make_model_options() const override { return make_options(); }
  std::string make_model_config(const std::string&, const model::MakeOptions& o) const override {
    return make_config(o);
  }

  std::string missing_tokenizer(const std::string& dir) const override {
    return model::tokenizer_json_needed(dir);
  }

  std::string describe(const Model& m, const std::string& label) const override {
    const ModelConfig& c = m.config();
    const Mamba2Config& g = config_of(c);
    const model::SsdSpec s = g.ssd(c);
    std::string limit;
    if (g.has_dt_limit)
      limit = fmt::format(", dt in [{}, {}]", g.dt_min, g.dt_max);
    return model::describe_lines(
        m, label,
        fmt::format("{}{}, {} Mamba-2 layers ({} heads of {}, state {}, {} group{}, conv {}, norm "
                    "{} the gate per group{})",
                    model_type(c),
                    g.layout == Mamba2Config::Layout::kMambaSsm ? " (mamba_ssm's layout)" : "",
                    c.num_hidden_layers, s.n_heads, s.head_dim, s.d_state, s.n_groups,
                    s.n_groups == 1 ? "" : "s", s.d_conv, s.norm_before_gate ? "before" : "after",
                    limit),
        "", " at any length");
  }
};

}  // namespace
}  // namespace recur::models::mamba2

namespace recur::models {

const model::Family& mamba2_family() {
  static const mamba2::Family family;
  return family;
}

}  // namespace recur::models
