// Nemotron-H's layer stack and loader (nemotron_h.h): per layer x += block(rmsnorm(x)), the
// block a Mamba-2 mixer, softmax attention or a squared-ReLU MLP as hybrid_override_pattern
// says. Tensors as NVIDIA's checkpoints name them: backbone.embeddings, backbone.layers.i.norm,
// backbone.layers.i.mixer.*, backbone.norm_f, lm_head. docs/nemotron_h.md.
#include <fmt/format.h>

#include <algorithm>

#include "layers/attention.h"
#include "layers/gqa.h"
#include "model/loader.h"
#include "model/model_impl.h"
#include "models/nemotron_h/nemotron_h.h"
#include "models/registry.h"
#include "recur/causal_attention.h"
#include "recur/error.h"

namespace recur::models::nemotron_h {
namespace {

using model::Dense;
using model::Norm;

struct Layer {
  Block kind = Block::kMlp;
  Norm norm;
  model::SsdMixer mamba;
  model::GqaLayer attn;
  Dense up, down;  // the MLP: down(relu(up(h))^2)
};

struct Rows : model::Scratch {
  std::vector<float> a, u;
  model::SsdRows ssd;
  model::GqaRows attn;
  std::size_t bytes() const override {
    return Scratch::bytes() + model::buffer_bytes({&a, &u}) + ssd.bytes() + attn.bytes();
  }
};

// relu(x)^2 in place, as transformers' ACT2FN["relu2"] (a NaN stays a NaN, as torch's relu keeps
// it).
void relu_squared(float* x, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) x[i] = x[i] <= 0.0f ? 0.0f : x[i] * x[i];
}

class Network final : public model::Network {
 public:
  Network(int hidden, int intermediate, std::vector<Layer> layers)
      : hidden_(hidden), intermediate_(intermediate), layers_(std::move(layers)) {
    for (std::size_t i = 0; i < layers_.size(); ++i)
      if (layers_[i].kind != Block::kMlp) stateful_.push_back(i);
  }

  // The decoder's layers are the blocks with a state (M and *): the MLP blocks keep none.
  std::size_t n_layers() const override { return stateful_.size(); }

  std::unique_ptr<model::LayerState> make_state(std::size_t layer) const override {
    const Layer& l = layers_[stateful_[layer]];
    if (l.kind == Block::kAttention) return model::make_gqa_state(l.attn);
    return model::make_ssd_state(l.mamba);
  }

  std::unique_ptr<model::Scratch> make_scratch(int rows) const override {
    auto w = std::make_unique<Rows>();
    w->cap = rows;
    const auto n = std::size_t(rows);
    for (auto* b : {&w->x, &w->h, &w->a}) b->assign(n * std::size_t(hidden_), 0.0f);
    for (const auto& l : layers_) {
      if (l.kind == Block::kMlp) {
        w->u.assign(n * std::size_t(intermediate_), 0.0f);
      } else if (l.kind == Block::kMamba) {
        w->ssd.grow(rows, l.mamba.spec);
      } else {
        w->attn.grow(rows, l.attn);
      }
    }
    return w;
  }

  void run(model::Scratch& scratch, int n, int threads, model::Attend attend) const override {
    Rows& w = static_cast<Rows&>(scratch);
    const int d = hidden_;
    std::size_t state = 0;  // the decoder's index of the next block with a state
    for (const Layer& L : layers_) {
      L.norm.apply(w.x.data(), n, d, w.h.data(), d);
      if (L.kind == Block::kMlp) {
        L.up.apply(w.h.data(), n, d, w.u.data(), intermediate_, threads);
        relu_squared(w.u.data(), std::int64_t(n) * intermediate_);
        L.down.apply(w.u.data(), n, intermediate_, w.a.data(), d, threads);
      } else if (L.kind == Block::kAttention) {
        model::gqa_project(L.attn, w.h.data(), n, d, w.attn, threads);
        attend(state++, 0, threads);
        model::gqa_output(L.attn, w.attn, n, w.a.data(), d, threads);
      } else {
        model::ssd_project(L.mamba, w.h.data(), n, w.ssd, threads);
        attend(state++, 0, threads);
        model::ssd_output(L.mamba, w.ssd, n, w.a.data(), threads);
      }
      model::add_inplace(w.x.data(), w.a.data(), std::int64_t(n) * d);
    }
  }

  void run_sequence(std::size_t layer, int, model::Scratch& scratch, model::LayerState& state,
                    int first, int count, int threads) const override {
    Rows& w = static_cast<Rows&>(scratch);
    const Layer& L = layers_[stateful_[layer]];
    if (L.kind == Block::kMamba)
      return model::ssd_sequence(L.mamba, static_cast<model::SsdState&>(state), w.ssd, first,
                                 count, threads);
    model::gqa_sequence(L.attn, state, w.attn, first, count, threads);
  }

  void clear_sequence(std::size_t layer, int, model::Scratch& scratch, int first,
                      int count) const override {
    Rows& w = static_cast<Rows&>(scratch);
    const Layer& L = layers_[stateful_[layer]];
    if (L.kind == Block::kMamba) return model::ssd_clear(L.mamba, w.ssd, first, count);
    model::gqa_clear(L.attn, w.attn, first, count);
  }

  std::size_t weight_bytes() const override {
    std::size_t bytes = 0;
    for (const auto& L : layers_) {
      bytes += model::dense_bytes(L.up) + model::dense_bytes(L.down);
      if (L.kind == Block::kAttention) bytes += model::gqa_weight_bytes(L.attn);
      if (L.kind == Block::kMamba) bytes += model::ssd_weight_bytes(L.mamba);
    }
    return bytes;
  }

 private:
  int hidden_, intermediate_;
  std::vector<Layer> layers_;
  std::vector<std::size_t> stateful_;  // the decoder's layer i is layers_[stateful_[i]]
};

// Attention as NemotronHAttention: grouped kv heads of head_dim (its own size, not hidden /
// heads), scores times head_dim^-1/2, no positions (its forward applies no rotary embedding).
model::GqaLayer load_attention(model::Loader& L, const std::string& p, const NemotronHConfig& g,
                               int hidden) {
  CausalAttentionConfig ac;
  ac.n_heads = g.n_heads;
  ac.n_kv_heads = g.n_kv_heads;
  ac.d_head = g.head_dim;
  ac.rotary = false;
  return model::load_gqa(L, p, hidden, g.attention_bias, ac);
}

void load(const ModelConfig& c, model::Loader& L, Model::Impl& impl) {
  const NemotronHConfig& g = config_of(c);
  const int d = c.hidden_size, I = c.intermediate_size;
  const float eps = float(c.norm_eps);
  model::Ends ends;
  ends.embedding = "backbone.embeddings.weight";
  ends.rows = c.vocab_size;
  const model::MatrixWeight table = model::take_embedding(L, c, impl, ends);
  std::vector<Layer> layers;
  for (int i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = fmt::format("backbone.layers.{}.", i);
    Layer l;
    l.kind = block_of(g.pattern[std::size_t(i)]);
    l.norm = model::norm(L, p + "norm", d, eps, false, true, "hidden_size");
    const std::string m = p + "mixer.";
    if (l.kind == Block::kMamba) {
      l.mamba = model::load_ssd_mixer(L, m, g.ssd(c));
    } else if (l.kind == Block::kAttention) {
      l.attn = load_attention(L, m, g, d);
    } else {
      l.up = model::dense(L, m + "up_proj", I, d, g.mlp_bias, "intermediate_size, hidden_size");
      l.down = model::dense(L, m + "down_proj", d, I, g.mlp_bias, "hidden_size, intermediate_size");
    }
    layers.push_back(std::move(l));
  }
  impl.has_final_norm = true;
  impl.final_norm = model::norm(L, "backbone.norm_f", d, eps, false, true, "hidden_size");
  model::take_head(L, c, impl, ends, table);
  impl.network = std::make_unique<Network>(d, I, std::move(layers));
}

class Family final : public model::Family {
 public:
  const char* name() const override { return "nemotron_h"; }
  const char* model_type(const ModelConfig&) const override { return "nemotron_h"; }
  std::vector<std::string> model_types() const override { return {"nemotron_h"}; }
  void read_config(const std::string&, const json::Value& root, model::Fields& f,
                   ModelConfig& c) const override {
    nemotron_h::read_config(root, f, c);
  }
  void resolve(ModelConfig& c, const std::string& source) const override {
    nemotron_h::resolve(c, source);
  }
  std::string config_fields(const ModelConfig& c) const override {
    return nemotron_h::config_fields(c);
  }
  void load(const ModelConfig& c, const WeightSource&, model::Loader& L,
            Model::Impl& impl) const override {
    nemotron_h::load(c, L, impl);
  }
  std::vector<std::string> make_model_archs() const override { return {"nemotron_h"}; }
  std::vector<model::MakeOption> make_model_options() const override {
    return nemotron_h::make_model_options();
  }
  std::string make_model_config(const std::string&, const model::MakeOptions& o) const override {
    return nemotron_h::make_model_config(o);
  }
  std::string describe(const Model& m, const std::string& label) const override {
    const ModelConfig& c = m.config();
    const NemotronHConfig& g = config_of(c);
    const auto count = [&](char ch) { return std::count(g.pattern.begin(), g.pattern.end(), ch); };
    return model::describe_lines(
        m, label,
        fmt::format("nemotron_h (dense), {} layers {} ({} Mamba-2: {} heads of {}, state {}, "
                    "groups {}; {} attention: {} heads ({} kv) of {}, no positions; {} MLP: "
                    "relu2, {} wide)",
                    c.num_hidden_layers, g.pattern, count('M'), g.m_heads, g.m_head_dim,
                    g.m_state, g.m_groups, count('*'), g.n_heads, g.n_kv_heads, g.head_dim,
                    count('-'), c.intermediate_size),
        "",
        model::state_growth_note(
            model::kv_cache_growth(std::size_t(count('*')), g.n_kv_heads, g.head_dim)));
  }
};

}  // namespace
}  // namespace recur::models::nemotron_h

namespace recur::models {

const model::Family& nemotron_h_family() {
  static const nemotron_h::Family family;
  return family;
}

}  // namespace recur::models
