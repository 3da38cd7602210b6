// Nemotron-H's configuration: config.json as NVIDIA's configuration_nemotron_h.py and
// transformers' read it, each field declared once (model/config_schema.h).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "model/config_schema.h"
#include "models/nemotron_h/nemotron_h.h"
#include "recur/error.h"

namespace recur::models::nemotron_h {

using model::config_fail;
using model::config_number;
using model::describe_json;
using model::Fields;
using model::kMaxDim;
using model::kMaxHeadDim;

namespace {

constexpr int kMaxHeads = 1 << 16;
constexpr const char* kTraining = "training or initialisation only: the same function at inference";

bool is_false(const json::Value& v) { return v.is_bool() && !v.boolean(); }

// hybrid_override_pattern: required (every published config has it), one letter a layer.
void read_pattern(Fields& f, ModelConfig& c, NemotronHConfig& g) {
  const std::string& source = f.source();
  const int n_layers = c.num_hidden_layers;
  const json::Value* v = f.get("hybrid_override_pattern");
  if (!v)
    config_fail(source, "hybrid_override_pattern is missing: every Nemotron-H config.json gives "
                        "its layers' kinds (M Mamba-2, * attention, - MLP)");
  if (!v->is_string()) config_fail(source, "hybrid_override_pattern is {}", describe_json(*v));
  const std::string p = v->string();
  if (p.size() != std::size_t(n_layers))
    config_fail(source, "hybrid_override_pattern has {} letters for num_hidden_layers {}",
                p.size(), n_layers);
  for (std::size_t i = 0; i < p.size(); ++i) {
    if (p[i] == 'E')
      config_fail(source, "hybrid_override_pattern has E (a mixture-of-experts block) at layer "
                          "{}: Nemotron-H with experts (Nemotron 3 Nano), which recur does not "
                          "run; the dense models (M, * and - only) load", i);
    if (p[i] != 'M' && p[i] != '*' && p[i] != '-')
      config_fail(source, "hybrid_override_pattern has '{}' at layer {}, expected M (Mamba-2), "
                          "* (attention) or - (MLP)", p.substr(i, 1), i);
  }
  g.pattern = p;
}

// The attention heads' size: NVIDIA's configuration calls it attention_head_dim (Nemotron-H 8B,
// 47B, 56B), transformers' head_dim; either may come, both must agree.
void read_head_dim(Fields& f, ModelConfig&, NemotronHConfig& g) {
  const bool both = f.get("attention_head_dim") && f.get("head_dim");
  const int nvidia = f.integer("attention_head_dim", 128, 2, kMaxHeadDim);
  g.head_dim = f.integer("head_dim", nvidia, 2, kMaxHeadDim);
  if (both && nvidia != g.head_dim)
    config_fail(f.source(), "head_dim is {} and attention_head_dim {}: the attention heads' size "
                            "must be one", g.head_dim, nvidia);
}

// time_step_limit: dt's clamp, [min, max] (layers/ssd_mixer.h reads and writes the pair).
void read_dt_limit(Fields& f, ModelConfig&, NemotronHConfig& g) {
  g.has_dt_limit = model::read_dt_limit(f, "time_step_limit", g.dt_min, g.dt_max);
}

void write_dt_limit(model::FieldWriter& w, const ModelConfig&, const NemotronHConfig& g) {
  if (g.has_dt_limit) w.add("time_step_limit", model::dt_limit_text(g.dt_min, g.dt_max));
}

// make-model's sizes: the attention heads are --heads of hidden / heads; the Mamba-2 width is
// 2 * hidden, in heads of --ssm-head-dim; the layers are --pattern's letters.
double made_layers(const model::MakeOptions& o, const ModelConfig&, const NemotronHConfig&) {
  return double(o.str("pattern").size());
}

double made_head_dim(const model::MakeOptions&, const ModelConfig& c, const NemotronHConfig& g) {
  if (c.hidden_size % g.n_heads != 0)
    throw ArgumentError(fmt::format("--hidden {} is not --heads {} heads of one size",
                                    c.hidden_size, g.n_heads));
  return c.hidden_size / g.n_heads;
}

double made_mamba_heads(const model::MakeOptions&, const ModelConfig& c, const NemotronHConfig& g) {
  if ((2 * c.hidden_size) % g.m_head_dim != 0)
    throw ArgumentError(fmt::format("2 * --hidden {} is not heads of --ssm-head-dim {}",
                                    c.hidden_size, g.m_head_dim));
  return 2 * c.hidden_size / g.m_head_dim;
}

const model::Schema<NemotronHConfig>& schema() {
  static const model::Schema<NemotronHConfig> s = [] {
    using F = NemotronHConfig;
    model::Schema<F> t;
    t.written("model_type", "\"nemotron_h\"")
        .written("architectures", "[\"NemotronHForCausalLM\"]")
        .integer("vocab_size", &ModelConfig::vocab_size, 131072, 1, 1 << 24).common_option("vocab")
        .integer("hidden_size", &ModelConfig::hidden_size, 4096, 1, kMaxDim).common_option("hidden")
        .integer("num_hidden_layers", &ModelConfig::num_hidden_layers, 52, 1, 4096)
        .made_from(made_layers)
        .custom("hybrid_override_pattern", read_pattern,
                [](model::FieldWriter& w, const ModelConfig&, const F& g) {
                  w.string("hybrid_override_pattern", g.pattern);
                })
        .option("pattern", "Nemotron-H's hybrid_override_pattern: M Mamba-2, * attention, - MLP",
                "M*M-")
        .made_by([](const model::MakeOptions& o, const char* name) {
          if (o.str(name).empty()) throw ArgumentError("--pattern is empty");
          return json::quote(o.str(name));
        })
        .integer("num_attention_heads", &F::n_heads, 32, 1, kMaxHeads).common_option("heads")
        .integer("num_key_value_heads", &F::n_kv_heads, 8, 1, kMaxHeads)
        .option("attn-kv-heads", "the attention layers' kv heads (default: as many as heads)",
                [](const ModelConfig&, const F& g) { return double(g.n_heads); })
        .custom("head_dim", read_head_dim,
                [](model::FieldWriter& w, const ModelConfig&, const F& g) {
                  w.number("head_dim", g.head_dim);
                })
        .made_from(made_head_dim)
        .boolean("attention_bias", &F::attention_bias, false)
        .integer("intermediate_size", &ModelConfig::intermediate_size, 21504, 1, kMaxDim)
        .common_option("intermediate", true,
                       [](const ModelConfig& c, const F&) { return 4.0 * c.hidden_size; })
        .fixed("mlp_hidden_act", "relu2", "Nemotron-H's MLP is relu2 (relu squared)")
        .boolean("mlp_bias", &F::mlp_bias, false)
        .integer("mamba_num_heads", &F::m_heads, 128, 1, kMaxHeads)
        .made_from(made_mamba_heads)
        .integer("mamba_head_dim", &F::m_head_dim, 64, 1, kMaxHeadDim)
        .option("ssm-head-dim", "Mamba-2 head size", "16")
        .integer("ssm_state_size", &F::m_state, 128, 1, kMaxHeadDim)
        .option("ssm-state", "Mamba-2 state size", "16")
        .integer("n_groups", &F::m_groups, 8, 1, kMaxHeads)
        .option("ssm-groups", "Mamba-2 groups", "1")
        .integer("conv_kernel", &F::m_conv, 4, 1, 64)
        .boolean("use_conv_bias", &F::m_conv_bias, true)
        .boolean("use_bias", &F::use_bias, false)
        .custom("time_step_limit", read_dt_limit, write_dt_limit)
        .fixed("mamba_hidden_act", "silu",
               "Nemotron-H's Mamba-2 layers take silu after the convolution")
        .number("layer_norm_epsilon", &ModelConfig::norm_eps, 1e-5, 0.0, 1.0)
        .boolean("tie_word_embeddings", &ModelConfig::tie_word_embeddings, false).not_written()
        .common_flag("tie-embeddings")
        .accepted("rms_norm_eps", "NVIDIA's and transformers' code norm with layer_norm_epsilon "
                                  "and never read it")
        .accepted_when("hidden_act",
                       [](const json::Value& v) { return v.is_string() && v.string() == "relu2"; },
                       "relu2, as mlp_hidden_act says: the code reads mlp_hidden_act",
                       "Nemotron-H's MLP is relu2 (mlp_hidden_act)")
        .accepted("expand", "the Mamba-2 width is mamba_num_heads * mamba_head_dim; the code "
                            "never reads expand")
        .accepted_when("mamba_proj_bias", is_false,
                       "neither NVIDIA's nor transformers' code reads it (use_bias gives the "
                       "mixers' biases); false in every published config",
                       "recur follows the published code, whose mixers take use_bias")
        .accepted_when("sliding_window", [](const json::Value& v) { return v.is_null(); },
                       "null: full attention", "recur runs Nemotron-H's attention over every "
                       "earlier token")
        .accepted("max_position_embeddings", "the attention layers have no positions")
        .accepted("mamba_ssm_cache_dtype", "recur keeps the state in float32 whatever it says")
        .accepted("residual_in_fp32", "recur's residual stream is float32 always")
        .accepted("chunk_size", "the GPU kernels' chunk length: the same function")
        .accepted("use_mamba_kernels", "a kernel choice: the same function")
        .accepted("num_logits_to_keep", "generation bookkeeping")
        .accepted("use_cache", "generation bookkeeping")
        .accepted("attention_dropout", kTraining)
        .accepted("hidden_dropout", kTraining)
        .accepted("initializer_range", kTraining)
        .accepted("rescale_prenorm_residual", kTraining)
        .accepted("time_step_min", kTraining)
        .accepted("time_step_max", kTraining)
        .accepted("time_step_floor", kTraining);
    return t;
  }();
  return s;
}

}  // namespace

Block block_of(char letter) {
  return letter == 'M' ? Block::kMamba : letter == '*' ? Block::kAttention : Block::kMlp;
}

// MambaRMSNormGated(group_size = inner / n_groups), after the gate, with layer_norm_epsilon.
model::SsdSpec NemotronHConfig::ssd(const ModelConfig& c) const {
  model::SsdSpec s =
      model::ssd_spec(c, {m_heads, m_head_dim, m_state, m_groups, m_conv}, dt_min, dt_max);
  s.proj_bias = use_bias;
  s.conv_bias = m_conv_bias;
  return s;
}

const NemotronHConfig& config_of(const ModelConfig& c) {
  const auto* g = dynamic_cast<const NemotronHConfig*>(c.family.get());
  if (!g) throw std::logic_error("[Model] internal: a Nemotron-H configuration without its fields");
  return *g;
}

void read_config(const json::Value&, Fields& f, ModelConfig& c) {
  c.type = "nemotron_h";
  NemotronHConfig g;
  schema().read(f, c, g);
  c.family = std::make_shared<NemotronHConfig>(g);
}

void resolve(ModelConfig& c, const std::string& source) {
  NemotronHConfig g = c.family ? config_of(c) : NemotronHConfig{};
  if (g.pattern.size() != std::size_t(c.num_hidden_layers))
    config_fail(source, "hybrid_override_pattern '{}' has {} letters for {} layers", g.pattern,
                g.pattern.size(), c.num_hidden_layers);
  const auto count = [&](char ch) { return std::count(g.pattern.begin(), g.pattern.end(), ch); };
  if (count('M') + count('*') == 0)
    config_fail(source, "hybrid_override_pattern '{}' has no M or * layer: nothing would mix "
                        "the tokens", g.pattern);
  if (count('*') > 0) {
    if (g.n_heads % g.n_kv_heads != 0)
      config_fail(source, "num_attention_heads {} is not a multiple of num_key_value_heads {}",
                  g.n_heads, g.n_kv_heads);
    if (g.head_dim % 2 != 0) config_fail(source, "head_dim {} is odd", g.head_dim);
  }
  if (count('M') > 0) model::check_ssd_spec(g.ssd(c), source);
  // The network's layers are those with a state (M and *); the MLP blocks keep none.
  c.mixers.clear();
  for (const char ch : g.pattern)
    if (ch != '-') c.mixers.push_back(ch == 'M' ? MixerKind::kDecayedRecurrence : MixerKind::kAttention);
  c.family = std::make_shared<NemotronHConfig>(g);
}

std::string config_fields(const ModelConfig& c) {
  model::FieldWriter w;
  schema().write(w, c, config_of(c));
  return w.text();
}

std::vector<model::MakeOption> make_model_options() { return schema().make_options({"nemotron_h"}); }

std::string make_model_config(const model::MakeOptions& o) {
  return "{\"model_type\": \"nemotron_h\", " + schema().make_fields(o) + "}";
}

}  // namespace recur::models::nemotron_h
