// IBM's Granite 4.0 models as transformers' granitemoehybrid reads them, dense (no experts):
// Granite 4.0-H (Mamba-2 layers with a few softmax attention layers, no positions) and the
// non-hybrid Granite 4.0 (every layer attention, rotary). Per layer, with Granite's multipliers:
//   x += r * mixer(rmsnorm(x));   x += r * shared_mlp(rmsnorm(x))
// the embeddings times embedding_multiplier, attention scores times attention_multiplier (in
// place of 1/sqrt(d)), the logits divided by logits_scaling. docs/mamba2.md, "Granite 4.0".
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "layers/attention.h"
#include "layers/gqa.h"
#include "layers/ssd_mixer.h"
#include "model/config_schema.h"
#include "model/loader.h"
#include "model/model_impl.h"
#include "models/registry.h"
#include "recur/causal_attention.h"
#include "recur/error.h"

namespace recur::models::granite {
namespace {

using model::config_fail;
using model::describe_json;
using model::Dense;
using model::Fields;
using model::kMaxDim;
using model::Norm;
using model::Role;
using Init = model::TensorSpec::Init;

constexpr int kMaxHeads = 1 << 16;

struct GraniteConfig final : FamilyConfig {
  int n_heads = 32, n_kv_heads = 8;
  bool rope = false;
  double rope_theta = 10000;
  bool attention_bias = false;
  double embedding_multiplier = 1, residual_multiplier = 1, attention_multiplier = 1,
         logits_scaling = 1;
  int shared_intermediate = 1024;
  // The Mamba-2 layers.
  int m_heads = 128, m_head_dim = 64, m_state = 256, m_groups = 1, m_conv = 4;
  bool m_conv_bias = true, m_proj_bias = false;
  double dt_min = 0, dt_max = HUGE_VAL;
  bool has_dt_limit = false;
  double expand = 2;
  int max_position_embeddings = 4096;

  int head_dim(const ModelConfig& c) const { return c.hidden_size / n_heads; }
  model::SsdSpec ssd(const ModelConfig& c) const {
    model::SsdSpec s =
        model::ssd_spec(c, {m_heads, m_head_dim, m_state, m_groups, m_conv}, dt_min, dt_max);
    s.proj_bias = m_proj_bias;
    s.conv_bias = m_conv_bias;
    return s;
  }
};

const GraniteConfig& config_of(const ModelConfig& c) {
  const auto* g = dynamic_cast<const GraniteConfig*>(c.family.get());
  if (!g) throw std::logic_error("[Model] internal: a Granite configuration without its fields");
  return *g;
}

constexpr const char* kTraining = "training or initialisation only: the same function at inference";
constexpr const char* kNoExperts = "the experts' routing: no experts in a dense model";

using Schema = model::Schema<GraniteConfig>;

bool has_mamba(const ModelConfig& c) {
  return std::count(c.mixers.begin(), c.mixers.end(), MixerKind::kDecayedRecurrence) > 0;
}

// Experts: refused by name until recur runs them (transformers' default is 8).
void read_experts(Fields& f, ModelConfig&, GraniteConfig&) {
  const int experts = f.integer("num_local_experts", 8, 0, 1 << 16);
  if (experts > 0)
    config_fail(f.source(),
                "num_local_experts is {}: a mixture-of-experts Granite (granite-4.0-h-tiny, "
                "-small), whose experts recur does not run; the dense models (num_local_experts "
                "0) load",
                experts);
}

// The Mamba-2 head size: a number, or "auto" (absent too) for expand * hidden_size / heads,
// which resolve() computes (0 here).
void read_mamba_d_head(Fields& f, ModelConfig&, GraniteConfig& g) {
  const json::Value* dh = f.get("mamba_d_head");
  if (!dh || (dh->is_string() && dh->string() == "auto")) {
    g.m_head_dim = 0;
  } else if (dh->is_integer() && dh->integer() >= 1 && dh->integer() <= model::kMaxHeadDim) {
    g.m_head_dim = int(dh->integer());
  } else {
    config_fail(f.source(), "mamba_d_head is {}, expected a size or \"auto\"", describe_json(*dh));
  }
}

// rope_parameters (transformers 5): the default rotary, whose theta it may give.
void read_rope_parameters(Fields& f, ModelConfig&, GraniteConfig& g) {
  const json::Value* rp = f.get("rope_parameters");
  if (!rp) return;
  if (!rp->is_object())
    config_fail(f.source(), "rope_parameters is {}, expected an object", describe_json(*rp));
  Fields r(*rp, f.source(), "rope_parameters");
  const std::string type = r.string("rope_type", "default");
  if (type != "default")
    config_fail(f.source(), "rope_parameters.rope_type is '{}': recur runs Granite's plain rotary",
                type);
  g.rope_theta = r.number("rope_theta", g.rope_theta, 1.0 + 1e-9, 1e12);
  r.reject_unknown("recur does not know what it changes in the rotary embedding");
}

// make-model's sizes: the layers are --layer-types' letters; the Mamba-2 layers are twice
// hidden wide, in heads of --ssm-head-dim.
double made_layers(const model::MakeOptions& o, const ModelConfig&, const GraniteConfig&) {
  return double(o.str("layer-types").size());
}

double made_mamba_heads(const model::MakeOptions& o, const ModelConfig& c, const GraniteConfig&) {
  const auto P = o.integer("ssm-head-dim", 1, model::kMaxHeadDim);
  if ((2 * c.hidden_size) % P != 0)
    throw ArgumentError(fmt::format("2 * --hidden {} is not heads of --ssm-head-dim {}",
                                    c.hidden_size, P));
  return double(2 * c.hidden_size / P);
}

// transformers' GraniteMoeHybridConfig, dense. The fields recur wrote before it wrote the rest
// of IBM's keys keep their order, which the fingerprint of saved states hashes.
const Schema& schema() {
  static const Schema s = [] {
    const auto number = [](double x) { return model::config_number(x); };
    Schema t;
    t.written("architectures", "[\"GraniteMoeHybridForCausalLM\"]")
        .for_other_tools()
        .written("model_type", "\"granitemoehybrid\"")
        .integer("vocab_size", &ModelConfig::vocab_size, 32000, 1, 1 << 24).common_option("vocab")
        .integer("hidden_size", &ModelConfig::hidden_size, 4096, 1, kMaxDim).common_option("hidden")
        .integer("num_hidden_layers", &ModelConfig::num_hidden_layers, 32, 1, 4096)
        .made_from(made_layers)
        .integer("num_attention_heads", &GraniteConfig::n_heads, 32, 1, kMaxHeads)
        .common_option("heads")
        // 0: as many as num_attention_heads (transformers' default), resolved.
        .integer("num_key_value_heads", &GraniteConfig::n_kv_heads, 0, 1, kMaxHeads)
        .option("attn-kv-heads", "the attention layers' kv heads (default: as many as heads)")
        .accepted("intermediate_size",
                  "an expert's width: no experts in a dense model (its MLP is "
                  "shared_intermediate_size wide, which IBM's dense files repeat here)")
        .written_as([number](const ModelConfig&, const GraniteConfig& g) {
          return number(g.shared_intermediate);
        })
        .for_other_tools()
        .integer("shared_intermediate_size", &GraniteConfig::shared_intermediate, 1024, 1, kMaxDim)
        .common_option("intermediate", true,
                       [](const ModelConfig& c, const GraniteConfig&) { return 2.0 * c.hidden_size; })
        .custom("num_local_experts", read_experts, nullptr)
        .written_as("0")
        .made_as_written()
        .accepted("num_experts_per_tok", kNoExperts)
        .written_as("0")
        .for_other_tools()
        .accepted("output_router_logits", kNoExperts)
        .written_as("false")
        .for_other_tools()
        .accepted("router_aux_loss_coef", kNoExperts)
        .number("rms_norm_eps", &ModelConfig::norm_eps, 1e-6, 0.0, 1.0)
        .boolean("attention_bias", &GraniteConfig::attention_bias, false)
        .accepted("attention_dropout", kTraining)
        .written_as("0.0")
        .for_other_tools()
        .number("embedding_multiplier", &GraniteConfig::embedding_multiplier, 1.0, -1e6, 1e6)
        .flag("multipliers", "Granite's multipliers (embedding 12, residual 0.22, attention "
                             "0.0078125, logits 8) instead of 1")
        .made_as("12")
        .number("residual_multiplier", &GraniteConfig::residual_multiplier, 1.0, -1e6, 1e6)
        .flag("multipliers", "").made_as("0.22")
        .number("attention_multiplier", &GraniteConfig::attention_multiplier, 1.0, 1e-12, 1e6)
        .flag("multipliers", "").made_as("0.0078125")
        .number("logits_scaling", &GraniteConfig::logits_scaling, 1.0, 1e-12, 1e12)
        .flag("multipliers", "").made_as("8")
        // Rotary only where the config asks for it (transformers builds no rotary embedding
        // otherwise).
        .choice("position_embedding_type", &GraniteConfig::rope, false,
                {{true, "rope"}, {false, "nope"}})
        .flag("rope", "rotary positions in the attention layers (position_embedding_type rope)")
        .made_by([](const model::MakeOptions&, const char*) { return std::string("\"rope\""); })
        .number("rope_theta", &GraniteConfig::rope_theta, 10000, 1.0 + 1e-9, 1e12)
        .custom("rope_parameters", read_rope_parameters, nullptr)
        .accepted_when(
            "rope_scaling", [](const json::Value&) { return false; }, "null: no scaling",
            "recur runs Granite's plain rotary")
        .written_as("null")
        .for_other_tools()
        .integer("max_position_embeddings", &GraniteConfig::max_position_embeddings, 2048, 0,
                 1 << 30)
        .list("layer_types", &ModelConfig::mixers,
              {{MixerKind::kDecayedRecurrence, "mamba"}, {MixerKind::kAttention, "attention"}},
              &ModelConfig::num_hidden_layers, "num_hidden_layers")
        .option("layer-types", "one letter a layer: M Mamba-2, A attention", "MAMA")
        .made_by([](const model::MakeOptions& o, const char* name) {
          const std::string letters = o.str(name);
          if (letters.empty() || letters.find_first_not_of("MA") != std::string::npos)
            throw ArgumentError(
                fmt::format("--layer-types '{}': M (Mamba-2) or A (attention) per layer", letters));
          std::string types;
          for (const char ch : letters)
            types += fmt::format("{}\"{}\"", types.empty() ? "" : ", ",
                                 ch == 'M' ? "mamba" : "attention");
          return "[" + types + "]";
        })
        .integer("mamba_n_heads", &GraniteConfig::m_heads, 128, 1, kMaxHeads)
        .made_from(made_mamba_heads)
        // A size, or "auto" (absent too: 0 here) for mamba_expand * hidden_size / mamba_n_heads,
        // resolved.
        .custom("mamba_d_head", read_mamba_d_head, nullptr)
        .written_as(
            [number](const ModelConfig&, const GraniteConfig& g) { return number(g.m_head_dim); })
        .option("ssm-head-dim", "Mamba-2 head size", "16")
        .made_by([](const model::MakeOptions& o, const char* name) {
          return model::config_number(double(o.integer(name, 1, model::kMaxHeadDim)));
        })
        .integer("mamba_d_state", &GraniteConfig::m_state, 256, 1, model::kMaxHeadDim)
        .option("ssm-state", "Mamba-2 state size", "16")
        .integer("mamba_n_groups", &GraniteConfig::m_groups, 1, 1, kMaxHeads)
        .option("ssm-groups", "Mamba-2 groups", "1")
        .integer("mamba_d_conv", &GraniteConfig::m_conv, 4, 1, 64)
        .number("mamba_expand", &GraniteConfig::expand, 2, 1e-6, 1e6)
        .accepted("mamba_chunk_size", "the GPU kernels' chunk length: the same function")
        .written_as("256")
        .for_other_tools()
        .boolean("mamba_conv_bias", &GraniteConfig::m_conv_bias, true)
        .boolean("mamba_proj_bias", &GraniteConfig::m_proj_bias, false)
        .custom(
            "time_step_limit",
            [](Fields& f, ModelConfig&, GraniteConfig& g) {
              g.has_dt_limit = model::read_dt_limit(f, "time_step_limit", g.dt_min, g.dt_max);
            },
            nullptr)
        .written_as([](const ModelConfig&, const GraniteConfig& g) {
          return model::dt_limit_text(g.dt_min, g.dt_max);
        })
        .written_when([](const ModelConfig&, const GraniteConfig& g) { return g.has_dt_limit; })
        .accepted("time_step_min", kTraining)
        .accepted("time_step_max", kTraining)
        .accepted("time_step_floor", kTraining)
        .same_function("hidden_act", {"silu", "swish"}, "silu",
                       "silu and swish name one function, the SwiGLU's")
        .for_other_tools()
        .accepted_when(
            "normalization_function",
            [](const json::Value& v) { return v.is_string() && v.string() == "rmsnorm"; },
            "rmsnorm: the norm recur runs", "Granite 4.0 norms with rmsnorm")
        .written_as("\"rmsnorm\"")
        .for_other_tools()
        .accepted("init_method", kTraining)
        .boolean("tie_word_embeddings", &ModelConfig::tie_word_embeddings, false)
        .not_written()
        .common_flag("tie-embeddings");
    return t;
  }();
  return s;
}

void read_config(Fields& f, ModelConfig& c) {
  c.type = "granitemoehybrid";
  c.mixers.clear();
  GraniteConfig g;
  schema().read(f, c, g);
  if (c.mixers.empty())
    config_fail(f.source(),
                "layer_types is missing: every Granite 4.0 config.json lists its layers' "
                "kinds (mamba or attention)");
  c.family = std::make_shared<GraniteConfig>(g);
}

void resolve(ModelConfig& c, const std::string& source) {
  GraniteConfig g = c.family ? config_of(c) : GraniteConfig{};
  if (c.mixers.size() != std::size_t(c.num_hidden_layers))
    config_fail(source, "{} layer types for {} layers", c.mixers.size(), c.num_hidden_layers);
  if (g.n_kv_heads == 0) g.n_kv_heads = g.n_heads;
  if (c.hidden_size % g.n_heads != 0 || g.head_dim(c) % 2 != 0)
    config_fail(source, "hidden_size {} is not num_attention_heads {} heads of one even size",
                c.hidden_size, g.n_heads);
  if (g.n_heads % g.n_kv_heads != 0)
    config_fail(source, "num_attention_heads {} is not a multiple of num_key_value_heads {}",
                g.n_heads, g.n_kv_heads);
  const double inner = std::floor(g.expand * double(c.hidden_size));
  if (g.m_head_dim == 0 && g.m_heads > 0 && inner <= kMaxDim) g.m_head_dim = int(inner) / g.m_heads;
  if (has_mamba(c)) {
    if (double(g.m_heads) * double(g.m_head_dim) != inner)
      config_fail(source, "mamba_n_heads {} * mamba_d_head {} is not mamba_expand {} * "
                          "hidden_size {} = {}", g.m_heads, g.m_head_dim, g.expand, c.hidden_size,
                  inner);
    model::check_ssd_spec(g.ssd(c), source);
  }
  c.intermediate_size = g.shared_intermediate;
  c.family = std::make_shared<GraniteConfig>(g);
}

std::string config_fields(const ModelConfig& c, bool fingerprint) {
  model::FieldWriter w;
  schema().write(w, c, config_of(c), fingerprint);
  return w.text();
}

std::string layer(int i) { return "model.layers." + std::to_string(i) + "."; }

// ---------------------------------------------------------------------------------------------
// The layer stack.

struct Layer {
  bool attention = false;
  Norm mixer_norm, mlp_norm;
  model::SsdMixer mamba;
  model::GqaLayer attn;
  Dense gate, up, down;  // shared_mlp: input_linear's halves, output_linear
};

struct Rows : model::Scratch {
  std::vector<float> a, g, u;
  model::SsdRows ssd;
  model::GqaRows attn;
  std::size_t bytes() const override {
    return Scratch::bytes() + model::buffer_bytes({&a, &g, &u}) + ssd.bytes() + attn.bytes();
  }
};

class Network final : public model::Network {
 public:
  Network(int hidden, int shared, float residual, std::vector<Layer> layers)
      : hidden_(hidden), shared_(shared), residual_(residual), layers_(std::move(layers)) {}

  std::size_t n_layers() const override { return layers_.size(); }

  std::unique_ptr<model::LayerState> make_state(std::size_t layer) const override {
    const Layer& l = layers_[layer];
    if (l.attention) return model::make_gqa_state(l.attn);
    return model::make_ssd_state(l.mamba);
  }

  std::unique_ptr<model::Scratch> make_scratch(int rows) const override {
    auto w = std::make_unique<Rows>();
    w->cap = rows;
    const auto n = std::size_t(rows);
    for (auto* b : {&w->x, &w->h, &w->a}) b->assign(n * std::size_t(hidden_), 0.0f);
    for (auto* b : {&w->g, &w->u}) b->assign(n * std::size_t(shared_), 0.0f);
    for (const auto& l : layers_) {
      if (l.attention) w->attn.grow(rows, l.attn);
      else w->ssd.grow(rows, l.mamba.spec);
    }
    return w;
  }

  void run(model::Scratch& scratch, int n, int threads, model::Attend attend) const override {
    Rows& w = static_cast<Rows&>(scratch);
    const int d = hidden_;
    const std::int64_t total = std::int64_t(n) * d;
    for (std::size_t li = 0; li < layers_.size(); ++li) {
      const Layer& L = layers_[li];
      L.mixer_norm.apply(w.x.data(), n, d, w.h.data(), d);
      if (L.attention) {
        model::gqa_project(L.attn, w.h.data(), n, d, w.attn, threads);
        attend(li, 0, threads);
        model::gqa_output(L.attn, w.attn, n, w.a.data(), d, threads);
      } else {
        model::ssd_project(L.mamba, w.h.data(), n, w.ssd, threads);
        attend(li, 0, threads);
        model::ssd_output(L.mamba, w.ssd, n, w.a.data(), threads);
      }
      add_scaled(w.x.data(), w.a.data(), total);
      // The shared MLP: silu(first half of input_linear) * second half, output_linear.
      L.mlp_norm.apply(w.x.data(), n, d, w.h.data(), d);
      L.gate.apply(w.h.data(), n, d, w.g.data(), shared_, threads);
      L.up.apply(w.h.data(), n, d, w.u.data(), shared_, threads);
      model::swiglu(w.g.data(), w.u.data(), w.g.data(), std::int64_t(n) * shared_);
      L.down.apply(w.g.data(), n, shared_, w.a.data(), d, threads);
      add_scaled(w.x.data(), w.a.data(), total);
    }
  }

  void run_sequence(std::size_t layer, int stage, model::Scratch& scratch,
                    model::LayerState& state, int first, int count, int threads) const override {
    (void)stage;
    Rows& w = static_cast<Rows&>(scratch);
    const Layer& L = layers_[layer];
    if (!L.attention)
      return model::ssd_sequence(L.mamba, static_cast<model::SsdState&>(state), w.ssd, first,
                                 count, threads);
    model::gqa_sequence(L.attn, state, w.attn, first, count, threads);
  }

  void clear_sequence(std::size_t layer, int, model::Scratch& scratch, int first,
                      int count) const override {
    Rows& w = static_cast<Rows&>(scratch);
    const Layer& L = layers_[layer];
    if (!L.attention) return model::ssd_clear(L.mamba, w.ssd, first, count);
    model::gqa_clear(L.attn, w.attn, first, count);
  }

  std::size_t weight_bytes() const override {
    std::size_t bytes = 0;
    for (const auto& L : layers_) {
      for (const auto* d : {&L.gate, &L.up, &L.down}) bytes += model::dense_bytes(*d);
      bytes += L.attention ? model::gqa_weight_bytes(L.attn) : model::ssd_weight_bytes(L.mamba);
    }
    return bytes;
  }

 private:
  // x += residual_multiplier * a (Granite scales what each sublayer adds).
  void add_scaled(float* x, const float* a, std::int64_t n) const {
    for (std::int64_t i = 0; i < n; ++i) x[i] += residual_ * a[i];
  }

  int hidden_, shared_;
  float residual_;
  std::vector<Layer> layers_;
};

void load(const ModelConfig& c, model::Loader& L, Model::Impl& impl) {
  const GraniteConfig& g = config_of(c);
  const int V = c.vocab_size, d = c.hidden_size, S = g.shared_intermediate;
  const auto rms = [&](const std::string& name) {
    Norm n;
    n.dim = d;
    n.eps = float(c.norm_eps);
    n.weight = L.take(name, {d}, "hidden_size", Init::kNorm);
    return n;
  };
  model::Ends ends;
  ends.embedding = "model.embed_tokens.weight";
  ends.rows = V;
  const model::MatrixWeight table = model::take_embedding(L, c, impl, ends);
  // embedding_multiplier, rounded once per entry (the reference multiplies the looked-up rows).
  if (g.embedding_multiplier != 1.0)
    for (float& e : impl.embeddings) e = float(double(e) * g.embedding_multiplier);
  const int hd = g.head_dim(c);
  std::vector<Layer> layers;
  for (int i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = layer(i);
    Layer l;
    l.attention = c.mixers[std::size_t(i)] == MixerKind::kAttention;
    l.mixer_norm = rms(p + "input_layernorm.weight");
    if (l.attention) {
      CausalAttentionConfig ac;
      ac.n_heads = g.n_heads;
      ac.n_kv_heads = g.n_kv_heads;
      ac.d_head = hd;
      ac.rope_theta = float(g.rope_theta);
      ac.rotary = g.rope;
      ac.scale = float(g.attention_multiplier);
      l.attn = model::load_gqa(L, p + "self_attn.", d, g.attention_bias, ac);
    } else {
      l.mamba = model::load_ssd_mixer(L, p + "mamba.", g.ssd(c));
    }
    l.mlp_norm = rms(p + "post_attention_layernorm.weight");
    const model::MatrixWeight in = L.take_matrix(p + "shared_mlp.input_linear.weight",
                                                 p + "shared_mlp.input_linear.weight", 2 * S, d,
                                                 Role::kMatrix, "2 * shared_intermediate_size, hidden_size");
    l.gate.w = in.rows(0, S);
    l.up.w = in.rows(S, S);
    l.down = model::dense(L, p + "shared_mlp.output_linear", d, S, false,
                          "hidden_size, shared_intermediate_size");
    layers.push_back(std::move(l));
  }
  impl.has_final_norm = true;
  impl.final_norm = rms("model.norm.weight");
  // The logits divided by logits_scaling: folded into the final norm's weight (the head is
  // linear), each weight divided once.
  if (g.logits_scaling != 1.0)
    for (float& w : impl.final_norm.weight) w = float(double(w) / g.logits_scaling);
  model::take_head(L, c, impl, ends, table);
  impl.network = std::make_unique<Network>(d, S, float(g.residual_multiplier), std::move(layers));
}

class Family final : public model::Family {
 public:
  const char* name() const override { return "granitemoehybrid"; }
  const char* model_type(const ModelConfig&) const override { return "granitemoehybrid"; }
  std::vector<std::string> model_types() const override { return {"granitemoehybrid"}; }
  void read_config(const std::string&, const json::Value&, Fields& f,
                   ModelConfig& c) const override {
    granite::read_config(f, c);
  }
  void resolve(ModelConfig& c, const std::string& source) const override {
    granite::resolve(c, source);
  }
  std::string config_fields(const ModelConfig& c) const override {
    return granite::config_fields(c, false);
  }
  std::string fingerprint_fields(const ModelConfig& c) const override {
    return granite::config_fields(c, true);
  }
  void load(const ModelConfig& c, const WeightSource&, model::Loader& L,
            Model::Impl& impl) const override {
    granite::load(c, L, impl);
  }
  std::vector<std::string> make_model_archs() const override { return {"granitemoehybrid"}; }
  std::vector<model::MakeOption> make_model_options() const override {
    return schema().make_options({"granitemoehybrid"});
  }
  std::string make_model_config(const std::string&, const model::MakeOptions& o) const override {
    return "{\"model_type\": \"granitemoehybrid\", " + schema().make_fields(o) + "}";
  }
  std::string missing_tokenizer(const std::string& dir) const override {
    return model::tokenizer_json_needed(dir);
  }
  std::string describe(const Model& m, const std::string& label) const override {
    const ModelConfig& c = m.config();
    const GraniteConfig& g = config_of(c);
    const auto n_attn = std::count(c.mixers.begin(), c.mixers.end(), MixerKind::kAttention);
    return model::describe_lines(
        m, label,
        fmt::format("granitemoehybrid (dense), {} layers ({} Mamba-2: {} heads of {}, state {}; "
                    "{} attention: {} heads ({} kv) of {}, {})",
                    c.num_hidden_layers, c.num_hidden_layers - n_attn, g.m_heads, g.m_head_dim,
                    g.m_state, n_attn, g.n_heads, g.n_kv_heads, g.head_dim(c),
                    g.rope ? "rotary" : "no positions"),
        fmt::format(", MLP {}", g.shared_intermediate),
        model::state_growth_note(
            model::kv_cache_growth(std::size_t(n_attn), g.n_kv_heads, g.head_dim(c))));
  }
};

}  // namespace
}  // namespace recur::models::granite

namespace recur::models {

const model::Family& granite_family() {
  static const granite::Family family;
  return family;
}

}  // namespace recur::models
