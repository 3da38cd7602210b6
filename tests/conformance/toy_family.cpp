// A toy family, written the way docs/adding-a-model.md says a new family is written, and
// registered beside the built-in ones: the conformance suite then checks it like any other.
// It keeps the guide honest: if a step the guide names stops being enough, this file stops
// passing. Each layer is a pre-norm block with a short causal convolution between two
// projections, then a SwiGLU MLP:
//
//   x += out_proj(conv(in_proj(norm(x))))      x += mlp(mlp_norm(x))
//
// model_type "toy_conv"; no published checkpoint has it.
#include <fmt/format.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "layers/mlp.h"
#include "layers/sequence.h"
#include "model/config_schema.h"
#include "model/family.h"
#include "model/loader.h"
#include "model/model_impl.h"
#include "recur/short_conv.h"

namespace recur::toy {
namespace {

// The family's own fields (the guide's "The configuration").
struct ToyConfig final : FamilyConfig {
  int conv_kernel = 4;
};

const ToyConfig& config_of(const ModelConfig& c) {
  const auto* t = dynamic_cast<const ToyConfig*>(c.family.get());
  if (!t) throw std::logic_error("[Model] internal: a toy_conv configuration without its fields");
  return *t;
}

const model::Schema<ToyConfig>& schema() {
  static const model::Schema<ToyConfig> s = [] {
    model::Schema<ToyConfig> t;
    t.written("model_type", "\"toy_conv\"")
        .integer("vocab_size", &ModelConfig::vocab_size, 256, 1, 1 << 24)
        .integer("hidden_size", &ModelConfig::hidden_size, 64, 1, model::kMaxDim)
        .integer("num_hidden_layers", &ModelConfig::num_hidden_layers, 2, 1, 4096)
        .integer("conv_kernel", &ToyConfig::conv_kernel, 4, 1, 64)
        .integer("intermediate_size", &ModelConfig::intermediate_size, 128, 1, model::kMaxDim)
        .number("norm_eps", &ModelConfig::norm_eps, 1e-6, 0.0, 1.0)
        .boolean("tie_word_embeddings", &ModelConfig::tie_word_embeddings, false).not_written();
    return t;
  }();
  return s;
}

// The layer stack (the guide's `model::Network`).
struct Layer {
  model::Norm norm, mlp_norm;
  model::Dense in_proj, out_proj, gate, up, down;
  std::unique_ptr<ShortConvolution> conv;
};

struct Rows : model::Scratch {
  std::vector<float> c, b, a, g, u;  // in_proj's and the convolution's outputs; the MLP's rows
  std::size_t bytes() const override {
    return Scratch::bytes() + model::buffer_bytes({&c, &b, &a, &g, &u});
  }
};

class Network final : public model::Network {
 public:
  Network(int hidden, int inner, std::vector<Layer> layers)
      : d_(hidden), inner_(inner), layers_(std::move(layers)) {}

  std::size_t n_layers() const override { return layers_.size(); }

  std::unique_ptr<model::LayerState> make_state(std::size_t layer) const override {
    return std::make_unique<model::MixerState<ShortConvState>>(layers_[layer].conv->make_state(),
                                                               MixerKind::kShortConv);
  }

  std::unique_ptr<model::Scratch> make_scratch(int rows) const override {
    auto w = std::make_unique<Rows>();
    w->cap = rows;
    const auto n = std::size_t(rows) * std::size_t(d_), m = std::size_t(rows) * std::size_t(inner_);
    for (auto* v : {&w->x, &w->h, &w->c, &w->b, &w->a}) v->assign(n, 0.0f);
    for (auto* v : {&w->g, &w->u}) v->assign(m, 0.0f);
    return w;
  }

  void run(model::Scratch& scratch, int n, int threads, model::Attend attend) const override {
    Rows& w = static_cast<Rows&>(scratch);
    for (std::size_t li = 0; li < layers_.size(); ++li) {
      const Layer& L = layers_[li];
      L.norm.apply(w.x.data(), n, d_, w.h.data(), d_);
      L.in_proj.apply(w.h.data(), n, d_, w.c.data(), d_, threads);
      attend(li, 0, threads);  // the convolution: c -> b, per sequence
      L.out_proj.apply(w.b.data(), n, d_, w.a.data(), d_, threads);
      model::add_inplace(w.x.data(), w.a.data(), std::int64_t(n) * d_);
      model::swiglu_mlp(L.mlp_norm, L.gate, L.up, L.down, w.x.data(), w.h.data(), w.g.data(),
                        w.u.data(), w.a.data(), n, d_, threads);
    }
  }

  void run_sequence(std::size_t layer, int, model::Scratch& scratch, model::LayerState& state,
                    int first, int count, int) const override {
    Rows& w = static_cast<Rows&>(scratch);
    const std::size_t at = std::size_t(first) * std::size_t(d_);
    model::convolve(*layers_[layer].conv, model::state_of<ShortConvState>(state), w.c.data() + at,
                    w.b.data() + at, count);
  }

  void clear_sequence(std::size_t, int, model::Scratch& scratch, int first,
                      int count) const override {
    Rows& w = static_cast<Rows&>(scratch);
    std::fill_n(w.b.begin() + std::ptrdiff_t(first) * d_, std::size_t(count) * std::size_t(d_),
                0.0f);
  }

  std::size_t weight_bytes() const override {
    std::size_t bytes = 0;
    for (const auto& L : layers_)
      for (const auto* dense : {&L.in_proj, &L.out_proj, &L.gate, &L.up, &L.down})
        bytes += model::dense_bytes(*dense);
    return bytes;
  }

 private:
  int d_, inner_;
  std::vector<Layer> layers_;
};

// The one place the tensors are named (the guide's "The tensor table").
void load(const ModelConfig& c, model::Loader& L, Model::Impl& impl) {
  const int d = c.hidden_size, inner = c.intermediate_size, K = config_of(c).conv_kernel;
  const auto eps = float(c.norm_eps);
  const auto rms = [&](const std::string& name) {
    return model::norm(L, name, d, eps, false, true, "hidden_size");
  };
  model::Ends ends;
  ends.embedding = "model.embed_tokens.weight";
  ends.rows = c.vocab_size;
  const model::MatrixWeight table = model::take_embedding(L, c, impl, ends);
  std::vector<Layer> layers;
  for (int i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = fmt::format("model.layers.{}.", i);
    Layer l;
    l.norm = rms(p + "norm");
    l.in_proj = model::dense(L, p + "in_proj", d, d, false, "hidden_size");
    const std::vector<float> taps =
        L.take(p + "conv.weight", {d, 1, K}, "hidden_size, conv_kernel", model::Init::kConv);
    l.conv = std::make_unique<ShortConvolution>(
        Eigen::Map<const RowMatrix>(taps.data(), d, K));
    l.out_proj = model::dense(L, p + "out_proj", d, d, false, "hidden_size");
    l.mlp_norm = rms(p + "mlp_norm");
    l.gate = model::dense(L, p + "mlp.gate_proj", inner, d, false, "intermediate_size, hidden_size");
    l.up = model::dense(L, p + "mlp.up_proj", inner, d, false, "intermediate_size, hidden_size");
    l.down = model::dense(L, p + "mlp.down_proj", d, inner, false, "hidden_size, intermediate_size");
    layers.push_back(std::move(l));
  }
  impl.has_final_norm = true;
  impl.final_norm = rms("model.norm");
  model::take_head(L, c, impl, ends, table);
  impl.network = std::make_unique<Network>(d, inner, std::move(layers));
}

// The family (the guide's `model::Family`).
class Family final : public model::Family {
 public:
  const char* name() const override { return "toy"; }
  std::vector<std::string> model_types() const override { return {"toy_conv"}; }
  const char* model_type(const ModelConfig&) const override { return "toy_conv"; }

  void read_config(const std::string& type, const json::Value&, model::Fields& f,
                   ModelConfig& c) const override {
    ToyConfig t;
    c.type = type;
    schema().read(f, c, t);
    c.family = std::make_shared<ToyConfig>(t);
  }
  void resolve(ModelConfig& c, const std::string& source) const override {
    if (!c.family) c.family = std::make_shared<ToyConfig>();
    (void)source;  // the table's ranges are every check this family needs
    c.mixers.assign(std::size_t(c.num_hidden_layers), MixerKind::kShortConv);
  }
  std::string config_fields(const ModelConfig& c) const override {
    model::FieldWriter w;
    schema().write(w, c, config_of(c));
    return w.text();
  }
  void load(const ModelConfig& c, const WeightSource&, model::Loader& L,
            Model::Impl& impl) const override {
    toy::load(c, L, impl);
  }
  std::string describe(const Model& m, const std::string& label) const override {
    const ModelConfig& c = m.config();
    return model::describe_lines(m, label,
                                 fmt::format("toy_conv, {} layers of a {}-tap convolution",
                                             c.num_hidden_layers, config_of(c).conv_kernel),
                                 "", " at any length");
  }
};

// The registry's line, for a family kept outside engine/models/.
[[maybe_unused]] const bool kRegistered = [] {
  static const Family family;
  model::register_family(family);
  return true;
}();

}  // namespace
}  // namespace recur::toy
