// config.json of flash-linear-attention's GLA, RetNet and HGRN2 models: a table per layout of the
// fields as their configuration classes and blocks read them (fla/models/{gla,retnet,hgrn2},
// fla/models/hybrid.py), and the sizes derived from them.
#include <cmath>
#include <limits>
#include <memory>
#include <stdexcept>
#include <utility>

#include "model/config_schema.h"
#include "models/gla/gla.h"

namespace recur::models::gla {

using model::config_fail;
using model::Fields;
using model::kMaxDim;
using Kind = GlaConfig::Kind;

namespace {

constexpr const char* kNoConvolutions =
    "MultiScaleRetention is built without short convolutions (fla/models/retnet): the block "
    "ignores it";

bool is_true(const json::Value& v) { return v.is_bool() && v.boolean(); }
bool is_false(const json::Value& v) { return v.is_bool() && !v.boolean(); }

// One layout's fields, each once, in the order config.json is written; the defaults are each
// configuration class's own (they differ between the three); make-model's options beside the
// fields they set.
model::Schema<GlaConfig> build_schema(Kind kind) {
  const bool gla = kind == Kind::kGla, retnet = kind == Kind::kRetNet, hgrn2 = kind == Kind::kHgrn2;
  std::vector<std::string> modes = {"chunk", "fused_chunk", "fused_recurrent"};
  if (retnet) modes.push_back("parallel");
  model::Schema<GlaConfig> t;
  t.written("model_type", json::quote(model_type_of(kind)))
      .written("architectures", gla      ? "[\"GLAForCausalLM\"]"
                                : retnet ? "[\"RetNetForCausalLM\"]"
                                         : "[\"HGRN2ForCausalLM\"]")
      .same_function("attn_mode", modes, "chunk",
                     "fla's kernel choice: every mode computes the same function")
      .integer("vocab_size", &ModelConfig::vocab_size, 32000, 1, 1 << 24).common_option("vocab")
      .integer("hidden_size", &ModelConfig::hidden_size, 2048, 1, kMaxDim).common_option("hidden")
      .integer("num_hidden_layers", &ModelConfig::num_hidden_layers, 24, 1, 4096)
      .common_option("layers")
      .integer("intermediate_size", &ModelConfig::intermediate_size, 0, 1, kMaxDim)
      .common_option("intermediate", true)
      .number("hidden_ratio", &GlaConfig::hidden_ratio, retnet ? 2 : 4, 1e-6, 1e6).not_written()
      .fixed("hidden_act", "swish", "recur runs fla's GatedMLP with swish only (not powlu)")
      .number("norm_eps", &ModelConfig::norm_eps, 1e-6, 0.0, 1.0)
      // null means no weight, as fla's RMSNorm(elementwise_affine=None).
      .boolean_or_null("elementwise_affine", &GlaConfig::elementwise_affine, true, false)
      .flag("no-affine", "no weight in the output norm", false)
      .boolean("fuse_norm", &GlaConfig::fuse_norm, true)
      .integer("max_position_embeddings", &GlaConfig::max_position_embeddings, 2048, 0, 1 << 30)
      .boolean("tie_word_embeddings", &ModelConfig::tie_word_embeddings, false).not_written()
      .common_flag("tie-embeddings")
      .accepted_when("attnres_block_size", [](const json::Value&) { return false; },
                     "null: no attention residuals", "fla's attention residuals are not supported")
      .accepted("share_conv_kernel", "read by older configuration classes and by no layer "
                                     "(docs/fla-models.md)")
      .accepted("rms_norm_eps", "read by older configuration classes and by no layer; the norms "
                                "take norm_eps (docs/fla-models.md)");
  if (hgrn2) {
    // HGRN2Config: expand_ratio (default 128) wins; when it is null, hidden_size // num_heads.
    // The layer sets num_heads = hidden_size // expand_ratio whatever the config says. Read
    // apart (read_expand_ratio), since its null means other than its absence.
    t.integer("expand_ratio", &GlaConfig::expand_ratio, 128, 1, kMaxDim).read_apart()
        .option("expand-ratio", "the forget gate's width per head (default 128)")
        // --heads, which make-model writes, is the `attn` block's default heads.
        .integer("num_heads", &ModelConfig::num_heads, 0, 1, kMaxDim).read_apart().not_written()
        .common_option("heads")
        .boolean("use_lower_bound", &GlaConfig::use_lower_bound, true)
        .flag("no-lower-bound", "no lower bounds on the forget gate (use_lower_bound false)", false);
  } else {
    t.integer("num_heads", &ModelConfig::num_heads, gla ? 4 : 8, 1, kMaxDim).common_option("heads")
        .integer("num_kv_heads", &ModelConfig::num_kv_heads, 0, 1, kMaxDim)
        .option("kv-heads", "key/value heads (default: as many as heads)", "", 1 << 16)
        .number("expand_k", &GlaConfig::expand_k, gla ? 0.5 : 1.0, 1e-6, 1e6)
        .option("expand-k", "key width / hidden size (default: the model type's)")
        .number("expand_v", &GlaConfig::expand_v, gla ? 1.0 : 2.0, 1e-6, 1e6)
        .option("expand-v", "value width / hidden size (default: the model type's)")
        .boolean("use_output_gate", &GlaConfig::use_output_gate, true)
        .flag("no-output-gate", "no output gate (use_output_gate false)", false)
        // ACT2FN[feature_map] on q and k, after the convolutions and before rotary.
        .choice_or_null("feature_map", &GlaConfig::qk_activation, std::string(),
                        {{"relu", "relu"}, {"swish", "swish"}, {"swish", "silu"}});
  }
  if (retnet) {
    t.accepted("use_short_conv", kNoConvolutions).accepted("conv_size", kNoConvolutions);
  } else {
    t.boolean("use_short_conv", &GlaConfig::use_short_conv, false)
        .flag("short-conv", "short convolutions on q, k, v (use_short_conv)")
        .integer("conv_size", &GlaConfig::conv_size, 4, 1, 64);
  }
  if (gla) {
    // Read by GLAConfig but passed to no layer: the gk gate is always on, gv never.
    t.number_or_null("clamp_min", &GlaConfig::clamp_min, std::numeric_limits<double>::lowest(), 0.0)
        .accepted_when("use_gk", is_true, "true: fla's GLA layer always has its gk gate",
                       "fla's GLA layer always has its gk gate")
        .accepted_when("use_gv", is_false, "false: fla's GLA layer has no gv gate",
                       "fla's GLA layer has no gv gate");
  }
  t.objects("attn", &GlaConfig::attn, model::hybrid_attention_schema(),
            model::kHybridAttentionFields);
  return t;
}

// HGRN2's expand_ratio: as given; else, when it is null, hidden_size // num_heads; else 128.
void read_expand_ratio(Fields& f, const ModelConfig& c, GlaConfig& fc) {
  const int ratio = f.integer("expand_ratio", 0, 1, kMaxDim);
  const int heads = f.integer("num_heads", 0, 1, kMaxDim);
  fc.expand_ratio = ratio                                    ? ratio
                    : f.is_null("expand_ratio") && heads > 0 ? c.hidden_size / heads
                                                             : 128;
}

}  // namespace

const char* model_type_of(Kind kind) {
  return kind == Kind::kGla ? "gla" : kind == Kind::kRetNet ? "retnet" : "hgrn2";
}

Kind kind_of(const std::string& type) {
  return type == "gla" ? Kind::kGla : type == "retnet" ? Kind::kRetNet : Kind::kHgrn2;
}

const model::Schema<GlaConfig>& schema(Kind kind) {
  static const model::Schema<GlaConfig> gla = build_schema(Kind::kGla),
                                        retnet = build_schema(Kind::kRetNet),
                                        hgrn2 = build_schema(Kind::kHgrn2);
  return kind == Kind::kGla ? gla : kind == Kind::kRetNet ? retnet : hgrn2;
}

const GlaConfig& config_of(const ModelConfig& c) {
  const auto* fc = dynamic_cast<const GlaConfig*>(c.family.get());
  if (!fc) throw std::logic_error("[Model] internal: a gated fla configuration without its fields");
  return *fc;
}

void read_config(const std::string& type, Fields& f, ModelConfig& c) {
  GlaConfig fc;
  fc.kind = kind_of(type);
  c.architecture = fc.kind == Kind::kGla      ? Architecture::kGla
                   : fc.kind == Kind::kRetNet ? Architecture::kRetNet
                                              : Architecture::kHgrn2;
  schema(fc.kind).read(f, c, fc);
  if (fc.kind == Kind::kHgrn2) read_expand_ratio(f, c, fc);
  c.family = std::make_shared<GlaConfig>(std::move(fc));
}

void resolve(ModelConfig& c, const std::string& source) {
  // A configuration built in code without the family's fields takes their defaults.
  const auto* given = dynamic_cast<const GlaConfig*>(c.family.get());
  if (c.family && !given)
    config_fail(source, "a GLA, RetNet or HGRN2 configuration holds another family's fields");
  GlaConfig fc = given ? *given : GlaConfig{};
  fc.kind = kind_of(model::type_of(c));
  if (!(fc.expand_k > 0 && fc.expand_k <= 1e6 && fc.expand_v > 0 && fc.expand_v <= 1e6))
    config_fail(source, "expand_k {} and expand_v {} must lie in (0, 1e6]", fc.expand_k,
                fc.expand_v);
  const int d = c.hidden_size;
  if (fc.kind == GlaConfig::Kind::kHgrn2) {
    if (fc.expand_ratio < 1 || d % fc.expand_ratio != 0)
      config_fail(source, "hidden_size {} is not a multiple of expand_ratio {} (the forget gate and the "
                   "lower bounds span hidden_size)", d, fc.expand_ratio);
    c.num_heads = d / fc.expand_ratio;
    c.num_kv_heads = c.num_heads;
    fc.kv_groups = 1;
    fc.key_dim = d;
    fc.value_dim = d;
    if (d % c.num_heads != 0) config_fail(source, "hidden_size {} is not a multiple of the heads {}", d, c.num_heads);
  } else {
    if (c.num_kv_heads == 0) c.num_kv_heads = c.num_heads;
    if (c.num_kv_heads < 1 || c.num_heads % c.num_kv_heads != 0)
      config_fail(source, "num_heads {} is not a multiple of num_kv_heads {}", c.num_heads, c.num_kv_heads);
    fc.kv_groups = c.num_heads / c.num_kv_heads;
    const double kd = double(d) * fc.expand_k, vd = double(d) * fc.expand_v;
    if (!(kd >= 1 && kd <= kMaxDim && vd >= 1 && vd <= kMaxDim))
      config_fail(source, "hidden_size * expand_k = {} and hidden_size * expand_v = {} must lie in 1 to {}",
           kd, vd, kMaxDim);
    fc.key_dim = static_cast<int>(kd);  // int(), truncating, as the layers
    fc.value_dim = static_cast<int>(vd);
    if (fc.key_dim % c.num_heads != 0 || fc.value_dim % c.num_heads != 0)
      config_fail(source, "key dim {} and value dim {} must be multiples of num_heads {}", fc.key_dim,
           fc.value_dim, c.num_heads);
  }
  fc.head_k_dim = fc.key_dim / c.num_heads;
  fc.head_v_dim = fc.value_dim / c.num_heads;
  if (fc.kind == GlaConfig::Kind::kRetNet && (fc.head_k_dim % 2 != 0 || fc.head_k_dim > 256))
    config_fail(source, "head_k_dim {} must be even (rotary) and at most 256 (MultiScaleRetention's limit)",
         fc.head_k_dim);
  if (fc.head_k_dim > (1 << 16) || fc.head_v_dim > (1 << 16))
    config_fail(source, "per-head sizes key {}, value {} exceed the limit of {}", fc.head_k_dim, fc.head_v_dim,
         1 << 16);
  fc.attn_scale = static_cast<float>(1.0 / std::sqrt(double(fc.head_k_dim)));
  if (c.intermediate_size == 0) {
    // GatedMLP: int(hidden * ratio * 2 / 3) rounded up to a multiple of 256.
    const double raw = std::floor(double(d) * fc.hidden_ratio * 2.0 / 3.0);
    if (!(raw >= 1 && raw <= kMaxDim)) config_fail(source, "hidden_size * hidden_ratio * 2/3 = {} is out of range", raw);
    c.intermediate_size = 256 * ((static_cast<int>(raw) + 255) / 256);
  }
  if (fc.conv_size < 1 || fc.conv_size > 64) config_fail(source, "conv_size is {}, expected 1 to 64", fc.conv_size);
  c.mixers.assign(std::size_t(c.num_hidden_layers), MixerKind::kDecayedRecurrence);
  model::resolve_hybrid_attention(fc.attn, d, c.num_hidden_layers, source);
  for (int l = 0; l < c.num_hidden_layers; ++l)
    if (fc.attn.spec_of[std::size_t(l)] != -1) c.mixers[std::size_t(l)] = MixerKind::kAttention;
  c.family = std::make_shared<GlaConfig>(std::move(fc));
}

std::string config_fields(const ModelConfig& c) {
  const GlaConfig& fc = config_of(c);
  model::FieldWriter w;
  schema(fc.kind).write(w, c, fc);
  return w.text();
}

}  // namespace recur::models::gla
