// Falcon-H1's configuration: transformers' configuration_falcon_h1.py field by field, through
// the family's schema (its lists and rotary forms as custom fields); the sizes whose null or
// "auto" means something are read beside it.
#include <fmt/format.h>

#include <stdexcept>

#include "model/config_schema.h"
#include "models/falcon_h1/falcon_h1.h"
#include "recur/error.h"

namespace recur::models::falcon_h1 {

using model::config_fail;
using model::describe_json;
using model::Fields;
using model::kMaxDim;
using Config = FalconH1Config;

namespace {

constexpr int kMaxHeads = 1 << 16;
constexpr double kMaxMultiplier = 1e6;
constexpr const char* kTraining = "training or initialisation only: the same function at inference";

// make-model's Mamba-2 heads: 2 * hidden_size wide, in heads of --ssm-head-dim.
double made_mamba_heads(const ModelConfig& c, const Config& g) {
  const int heads = 2 * c.hidden_size / g.m_head_dim;
  if (heads < 1)
    throw ArgumentError(fmt::format("--ssm-head-dim {} is wider than 2 * --hidden {}", g.m_head_dim,
                                    c.hidden_size));
  return heads;
}

// A list of n finite numbers (mlp_multipliers, ssm_multipliers, time_step_limit); null or
// absent leaves `out` as it is.
template <std::size_t n>
void read_numbers(Fields& f, const char* key, std::array<double, n>& out) {
  const json::Value* v = f.get(key);
  if (!v || v->is_null()) return;
  const bool shaped = v->is_array() && v->array().size() == n;
  for (std::size_t i = 0; shaped && i < n; ++i)
    if (!v->array()[i].is_number()) return config_fail(f.source(), "{} is {}, expected {} numbers", key, describe_json(*v), n);
  if (!shaped) config_fail(f.source(), "{} is {}, expected {} numbers", key, describe_json(*v), n);
  for (std::size_t i = 0; i < n; ++i) out[i] = v->array()[i].number();
}

// A size that may be null (or "auto"): `fallback` then.
int nullable_size(Fields& f, const char* key, int fallback, bool auto_too) {
  const json::Value* v = f.get(key);
  if (!v || v->is_null() || (auto_too && v->is_string() && v->string() == "auto")) return fallback;
  if (v->is_integer() && v->integer() >= 1 && v->integer() <= kMaxDim) return int(v->integer());
  config_fail(f.source(), "{} is {}, expected a size{}", key, describe_json(*v),
              auto_too ? ", \"auto\" or null" : " or null");
}

// A multiplier list as the table's field: read_numbers' rules, written as a list.
template <std::size_t n>
model::Schema<Config>& multiplier_list(model::Schema<Config>& t, const char* key,
                                        std::array<double, n> Config::*member) {
  return t.custom(
      key, [key, member](Fields& f, ModelConfig&, Config& g) { read_numbers(f, key, g.*member); },
      [key, member](model::FieldWriter& w, const ModelConfig&, const Config& g) {
        std::string s;
        for (const double v : g.*member) s += (s.empty() ? "" : ", ") + model::config_number(v);
        w.add(key, "[" + s + "]");
      });
}

// time_step_limit, [min, max]: read_numbers' rules (null keeps the defaults).
void read_dt_limit(Fields& f, ModelConfig&, Config& g) {
  std::array<double, 2> limit{g.dt_min, g.dt_max};
  read_numbers(f, "time_step_limit", limit);
  g.dt_min = limit[0];
  g.dt_max = limit[1];
}

void write_dt_limit(model::FieldWriter& w, const ModelConfig&, const Config& g) {
  w.add("time_step_limit", model::dt_limit_text(g.dt_min, g.dt_max));
}

// Rotary beyond the top-level rope_theta (the table's field before the lists): transformers 4's
// rope_scaling must be null; transformers 5's rope_parameters overrides rope_theta.
void read_rope(Fields& f, ModelConfig&, Config& g) {
  const std::string& source = f.source();
  if (const json::Value* v = f.get("rope_scaling"); v && !v->is_null())
    config_fail(source, "rope_scaling is {}: recur runs Falcon-H1's plain rotary", describe_json(*v));
  if (const json::Value* rp = f.get("rope_parameters"); rp && !rp->is_null()) {
    if (!rp->is_object()) config_fail(source, "rope_parameters is {}", describe_json(*rp));
    Fields r(*rp, source, "rope_parameters");
    const std::string type = r.string("rope_type", "default");
    if (type != "default") config_fail(source, "rope_parameters.rope_type is '{}': recur runs the default rotary", type);
    g.rope_theta = r.number("rope_theta", g.rope_theta, 1.0 + 1e-9, 1e30);
    r.reject_unknown("recur does not know what it changes in the rotary embedding");
    g.rope_parameters = true;
  }
}

// The rotary base in the form it was read in: rope_parameters, or the top-level rope_theta.
void write_rope(model::FieldWriter& w, const ModelConfig&, const Config& g) {
  if (g.rope_parameters)
    w.add("rope_parameters", fmt::format("{{\"rope_type\": \"default\", \"rope_theta\": {}}}",
                                         model::config_number(g.rope_theta)));
  else
    w.number("rope_theta", g.rope_theta);
}

const model::Schema<Config>& schema() {
  static const model::Schema<Config> s = [] {
    model::Schema<Config> t;
    t.written("model_type", "\"falcon_h1\"")
        .written("architectures", "[\"FalconH1ForCausalLM\"]")
        .integer("vocab_size", &ModelConfig::vocab_size, 128000, 1, 1 << 24).common_option("vocab")
        .integer("hidden_size", &ModelConfig::hidden_size, 4096, 1, kMaxDim).common_option("hidden")
        .integer("intermediate_size", &ModelConfig::intermediate_size, 14336, 1, kMaxDim)
        .common_option("intermediate", true,
                       [](const ModelConfig& c, const Config&) { return 2.0 * c.hidden_size; })
        .integer("num_hidden_layers", &ModelConfig::num_hidden_layers, 32, 1, 4096)
        .common_option("layers")
        .integer("num_attention_heads", &Config::n_heads, 32, 1, kMaxHeads).common_option("heads")
        .integer("num_key_value_heads", &Config::n_kv_heads, 8, 1, kMaxHeads).read_apart()
        .option("attn-kv-heads", "the attention's kv heads (default: as many as heads)",
                [](const ModelConfig&, const Config& g) { return double(g.n_heads); })
        .integer("head_dim", &Config::head_dim, 0, 1, model::kMaxHeadDim).read_apart()
        .fixed("hidden_act", "silu", "Falcon-H1's MLP and convolution use silu")
        .number("rms_norm_eps", &ModelConfig::norm_eps, 1e-5, 0.0, 1.0)
        .boolean("tie_word_embeddings", &ModelConfig::tie_word_embeddings, false).not_written()
        .common_flag("tie-embeddings")
        .boolean("attention_bias", &Config::attention_bias, false)
        .boolean("mlp_bias", &Config::mlp_bias, false)
        .boolean("projectors_bias", &Config::projectors_bias, false)
        .integer("max_position_embeddings", &Config::max_position_embeddings, 8192, 0, 1 << 30)
        .integer("mamba_n_heads", &Config::m_heads, 128, 1, kMaxHeads)
        .option("ssm-heads", "Mamba-2 heads (default: 2 * hidden / ssm-head-dim)", made_mamba_heads)
        .integer("mamba_d_head", &Config::m_head_dim, 0, 1, model::kMaxHeadDim).read_apart()
        .option("ssm-head-dim", "Mamba-2 head size", "16")
        .integer("mamba_d_ssm", &Config::d_ssm, 0, 1, kMaxDim).read_apart()
        .made_from([](const model::MakeOptions&, const ModelConfig&, const Config& g) {
          return double(g.m_heads) * g.m_head_dim;
        })
        .integer("mamba_n_groups", &Config::m_groups, 1, 1, kMaxHeads)
        .option("ssm-groups", "Mamba-2 groups", "1")
        .integer("mamba_d_state", &Config::m_state, 256, 1, model::kMaxHeadDim)
        .option("ssm-state", "Mamba-2 state size", "16")
        .integer("mamba_d_conv", &Config::m_conv, 4, 1, 64)
        .number("mamba_expand", &Config::expand, 2, 1e-6, 1e6)
        .boolean("mamba_conv_bias", &Config::m_conv_bias, true)
        .boolean("mamba_proj_bias", &Config::m_proj_bias, false)
        .boolean("mamba_rms_norm", &Config::rms_norm, false)
        .flag("ssm-rms-norm", "the gated RMSNorm in the Mamba-2 mixers (mamba_rms_norm)")
        .boolean("mamba_norm_before_gate", &Config::norm_before_gate, true)
        .made_as("false")
        // make-model's --multipliers: made-up values, of the published models' kind (none of
        // them 1), so that each multiplier is seen applied where it belongs.
        .number("embedding_multiplier", &Config::embedding_multiplier, 1, -kMaxMultiplier, kMaxMultiplier)
        .flag("multipliers", "muP multipliers other than 1 (embedding 5.66, lm_head 0.039, ...; "
                             "made-up values)")
        .made_as("5.66")
        .number("lm_head_multiplier", &Config::lm_head_multiplier, 1, -kMaxMultiplier, kMaxMultiplier)
        .flag("multipliers", "").made_as("0.039")
        .number("key_multiplier", &Config::key_multiplier, 1, -kMaxMultiplier, kMaxMultiplier)
        .flag("multipliers", "").made_as("0.39")
        .number("attention_in_multiplier", &Config::attention_in_multiplier, 1, -kMaxMultiplier, kMaxMultiplier)
        .flag("multipliers", "").made_as("1.0")
        .number("attention_out_multiplier", &Config::attention_out_multiplier, 1, -kMaxMultiplier, kMaxMultiplier)
        .flag("multipliers", "").made_as("0.94")
        .number("ssm_in_multiplier", &Config::ssm_in_multiplier, 1, -kMaxMultiplier, kMaxMultiplier)
        .flag("multipliers", "").made_as("1.25")
        .number("ssm_out_multiplier", &Config::ssm_out_multiplier, 1, -kMaxMultiplier, kMaxMultiplier)
        .flag("multipliers", "").made_as("0.24")
        .accepted("attention_dropout", kTraining)
        .accepted("initializer_range", kTraining)
        .accepted("time_step_min", kTraining)
        .accepted("time_step_max", kTraining)
        .accepted("time_step_floor", kTraining)
        .accepted("mamba_chunk_size", "the GPU kernels' chunk length: the same function")
        .accepted("num_logits_to_keep", "how many positions' logits generate() computes")
        .accepted_when("attn_layer_indices", [](const json::Value& v) { return v.is_null(); },
                       "null: every layer holds attention (the published configs' value)",
                       "recur runs attention in every layer, as transformers' falcon_h1 does")
        // make-model's rotary base: the published models' 1e11. config.json's rotary is
        // written last (rope_parameters), in the form it was read in.
        .number("rope_theta", &Config::rope_theta, 1e11, 1.0 + 1e-9, 1e30).not_written()
        .made_as("100000000000.0");
    multiplier_list(t, "mlp_multipliers", &Config::mlp_multipliers)
        .flag("multipliers", "").made_as("[0.88, 0.59]");
    multiplier_list(t, "ssm_multipliers", &Config::ssm_multipliers)
        .flag("multipliers", "").made_as("[0.35, 0.25, 0.5, 0.7, 1.0]");
    t.custom("time_step_limit", read_dt_limit, write_dt_limit)
        .custom("rope_parameters", read_rope, write_rope);
    return t;
  }();
  return s;
}

}  // namespace

const FalconH1Config& config_of(const ModelConfig& c) {
  const auto* g = dynamic_cast<const FalconH1Config*>(c.family.get());
  if (!g) throw std::logic_error("[Model] internal: a Falcon-H1 configuration without its fields");
  return *g;
}

// FalconH1RMSNormGated norms each group apart, as ssd_spec() says, when mamba_rms_norm.
model::SsdSpec FalconH1Config::ssd(const ModelConfig& c) const {
  model::SsdSpec s =
      model::ssd_spec(c, {m_heads, m_head_dim, m_state, m_groups, m_conv}, dt_min, dt_max);
  s.proj_bias = m_proj_bias;
  s.out_proj_bias = projectors_bias;  // transformers' FalconH1Mixer: out_proj's bias
  s.conv_bias = m_conv_bias;
  s.gated_norm = rms_norm;
  s.norm_before_gate = norm_before_gate;
  s.part_multipliers.assign(ssm_multipliers.begin(), ssm_multipliers.end());
  return s;
}

void read_config(const json::Value&, Fields& f, ModelConfig& c) {
  c.type = "falcon_h1";
  Config g;
  schema().read(f, c, g);
  g.n_kv_heads = nullable_size(f, "num_key_value_heads", g.n_heads, false);
  g.head_dim = nullable_size(f, "head_dim", 0, false);
  g.d_ssm = nullable_size(f, "mamba_d_ssm", 0, false);
  g.m_head_dim = nullable_size(f, "mamba_d_head", 0, true);
  c.family = std::make_shared<Config>(g);
}

void resolve(ModelConfig& c, const std::string& source) {
  Config g = c.family ? config_of(c) : Config{};
  if (g.n_heads % g.n_kv_heads != 0)
    config_fail(source, "num_attention_heads {} is not a multiple of num_key_value_heads {}",
                g.n_heads, g.n_kv_heads);
  if (!g.head_dim && c.hidden_size % g.n_heads != 0)
    config_fail(source, "hidden_size {} is not num_attention_heads {} heads of one size (and "
                        "head_dim is not given)", c.hidden_size, g.n_heads);
  if (g.attn_head_dim(c) % 2 != 0)
    config_fail(source, "the attention heads' size {} is odd: rotary pairs its halves",
                g.attn_head_dim(c));
  const int inner = model::checked_dim(source, "the Mamba-2 width (mamba_d_ssm or mamba_expand * "
                                       "hidden_size)", double(g.inner(c)));
  if (!g.m_head_dim) {
    if (inner % g.m_heads != 0)
      config_fail(source, "mamba_n_heads {} does not divide the Mamba-2 width {}", g.m_heads, inner);
    g.m_head_dim = inner / g.m_heads;
  }
  if (std::int64_t(g.m_heads) * g.m_head_dim != inner)
    config_fail(source, "mamba_n_heads {} * mamba_d_head {} is not the Mamba-2 width {} "
                        "(mamba_d_ssm, or mamba_expand * hidden_size)", g.m_heads, g.m_head_dim, inner);
  // The sizes config.json may leave null or "auto", written out as the values they stand for.
  g.head_dim = g.attn_head_dim(c);
  g.d_ssm = inner;
  for (const double m : g.mlp_multipliers)
    if (!std::isfinite(m)) config_fail(source, "an mlp_multipliers entry is {}", m);
  model::check_ssd_spec(g.ssd(c), source);
  c.mixers.assign(std::size_t(c.num_hidden_layers), MixerKind::kDecayedRecurrence);
  c.family = std::make_shared<Config>(g);
}

std::vector<model::MakeOption> make_model_options() { return schema().make_options({"falcon_h1"}); }

std::string make_model_config(const model::MakeOptions& o) {
  return "{\"model_type\": \"falcon_h1\", " + schema().make_fields(o) + "}";
}

std::string config_fields(const ModelConfig& c) {
  model::FieldWriter w;
  schema().write(w, c, config_of(c));
  return w.text();
}

}  // namespace recur::models::falcon_h1
