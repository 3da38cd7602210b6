// config.json of flash-linear-attention's GLA, RetNet and HGRN2 models, field by field as their
// configuration classes and blocks read them (fla/models/{gla,retnet,hgrn2}, fla/models/hybrid.py).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <stdexcept>
#include <utility>

#include "models/fla/fla.h"

namespace recur::models::fla {

using model::config_fail;
using model::describe_json;
using model::Fields;
using model::kMaxDim;

namespace {

// The fields the three share: sizes, the MLP, the norms, the kernel choice.
void read_shared_fields(const json::Value& root, Fields& f, bool retnet, ModelConfig& c,
                        FlaConfig& fc) {
  const std::string& source = f.source();
  // Defaults are each configuration class's own (they differ between the three).
  c.hidden_size = f.integer("hidden_size", 2048, 1, kMaxDim);
  c.num_hidden_layers = f.integer("num_hidden_layers", 24, 1, 4096);
  c.vocab_size = f.integer("vocab_size", 32000, 1, 1 << 24);
  c.tie_word_embeddings = f.boolean("tie_word_embeddings", false);
  c.norm_eps = f.number("norm_eps", 1e-6, 0.0, 1.0);
  fc.hidden_ratio = f.number("hidden_ratio", retnet ? 2 : 4, 1e-6, 1e6);
  c.intermediate_size = f.integer("intermediate_size", 0, 1, kMaxDim);
  fc.max_position_embeddings = f.integer("max_position_embeddings", 2048, 0, 1 << 30);
  fc.fuse_norm = f.boolean("fuse_norm", true);
  const std::string mode = f.string("attn_mode", "chunk");
  if (mode != "chunk" && mode != "fused_chunk" && mode != "fused_recurrent" &&
      !(retnet && mode == "parallel"))
    config_fail(source, "attn_mode is '{}', expected chunk, fused_chunk or fused_recurrent{}", mode,
         retnet ? " or parallel" : "");
  const std::string act = f.string("hidden_act", "swish");
  if (act != "swish")
    config_fail(source, "hidden_act is '{}'; recur runs fla's GatedMLP with swish only (not powlu)",
                act);
  // null means no weight, as fla's RMSNorm(elementwise_affine=None).
  if (const json::Value* a = root.find("elementwise_affine"); a && !a->is_null() && !a->is_bool())
    config_fail(source, "elementwise_affine is {}, expected true, false or null", describe_json(*a));
  f.get("elementwise_affine");  // read just below from the object, where null has a meaning
  const json::Value* affine = root.find("elementwise_affine");
  fc.elementwise_affine = !affine ? true : affine->is_bool() ? affine->boolean() : false;
  if (f.get("attnres_block_size"))
    config_fail(source, "attnres_block_size is set: fla's attention residuals are not supported");
  f.accept({{"share_conv_kernel", "read by older configuration classes and by no layer "
                                  "(docs/fla-models.md)"},
            {"rms_norm_eps", "read by older configuration classes and by no layer; the norms "
                             "take norm_eps (docs/fla-models.md)"}});
}

// GLA's and RetNet's heads, widths, q/k activation and output gate.
void read_heads(Fields& f, bool gla, ModelConfig& c, FlaConfig& fc) {
  const std::string& source = f.source();
  fc.expand_k = f.number("expand_k", gla ? 0.5 : 1.0, 1e-6, 1e6);
  fc.expand_v = f.number("expand_v", gla ? 1.0 : 2.0, 1e-6, 1e6);
  c.num_heads = f.integer("num_heads", gla ? 4 : 8, 1, kMaxDim);
  c.num_kv_heads = f.integer("num_kv_heads", 0, 1, kMaxDim);
  // ACT2FN[feature_map] on q and k, after the convolutions and before rotary.
  fc.qk_activation = f.string("feature_map", "");
  if (fc.qk_activation == "silu") fc.qk_activation = "swish";
  if (!fc.qk_activation.empty() && fc.qk_activation != "relu" && fc.qk_activation != "swish")
    config_fail(source, "feature_map is '{}', expected null, relu, swish or silu", fc.qk_activation);
  fc.use_output_gate = f.boolean("use_output_gate", true);
}

// Short convolutions: GLA's and HGRN2's (RetNet's block is built without them and ignores the
// fields).
void read_convolutions(Fields& f, bool has_conv, FlaConfig& fc) {
  if (has_conv) {
    fc.use_short_conv = f.boolean("use_short_conv", false);
    fc.conv_size = f.integer("conv_size", 4, 1, 64);
  } else {
    // MultiScaleRetention is built without them (fla/models/retnet/modeling_retnet.py).
    f.get("use_short_conv");
    f.get("conv_size");
  }
}

// GLA's bound on log decays and the gate switches its layer ignores.
void read_gla_gates(Fields& f, FlaConfig& fc) {
  const std::string& source = f.source();
  if (const json::Value* v = f.get("clamp_min")) {
    if (!v->is_number() || !std::isfinite(v->number()) || v->number() > 0)
      config_fail(source, "clamp_min is {}, expected null or a number <= 0 (a bound on log decays)",
           describe_json(*v));
    fc.has_clamp_min = true;
    fc.clamp_min = v->number();
  }
  // Read by GLAConfig but passed to no layer: the gk gate is always on, gv never.
  if (!f.boolean("use_gk", true)) config_fail(source, "use_gk is false; fla's GLA layer always has its gk gate");
  if (f.boolean("use_gv", false)) config_fail(source, "use_gv is true; fla's GLA layer has no gv gate");
}

// HGRN2's heads: hidden_size / expand_ratio, from expand_ratio or num_heads; its lower bounds.
void read_hgrn2_heads(const json::Value& root, Fields& f, const ModelConfig& c, FlaConfig& fc) {
  const std::string& source = f.source();
  const json::Value* heads = f.get("num_heads");
  const json::Value* ratio = f.get("expand_ratio");
  // HGRN2Config: expand_ratio (default 128) wins; else hidden_size // num_heads. The layer
  // sets num_heads = hidden_size // expand_ratio whatever the config says.
  if (ratio && !(ratio->is_integer() && ratio->integer() >= 1 && ratio->integer() <= kMaxDim))
    config_fail(source, "expand_ratio is {}, expected a positive integer", describe_json(*ratio));
  if (heads && !(heads->is_integer() && heads->integer() >= 1 && heads->integer() <= kMaxDim))
    config_fail(source, "num_heads is {}, expected a positive integer", describe_json(*heads));
  if (ratio)
    fc.expand_ratio = static_cast<int>(ratio->integer());
  else if (heads && root.find("expand_ratio"))  // explicitly null
    fc.expand_ratio = c.hidden_size / static_cast<int>(heads->integer());
  else
    fc.expand_ratio = 128;
  fc.use_lower_bound = f.boolean("use_lower_bound", true);
}

}  // namespace

const FlaConfig& config_of(const ModelConfig& c) {
  const auto* fc = dynamic_cast<const FlaConfig*>(c.family.get());
  if (!fc) throw std::logic_error("[Model] internal: a gated fla configuration without its fields");
  return *fc;
}

void read_config(const json::Value& root, const std::string& type, Fields& f, ModelConfig& c) {
  c.architecture = type == "gla" ? Architecture::kGla
                   : type == "retnet" ? Architecture::kRetNet : Architecture::kHgrn2;
  const bool gla = type == "gla", retnet = type == "retnet", hgrn2 = type == "hgrn2";
  FlaConfig fc;
  read_shared_fields(root, f, retnet, c, fc);
  if (gla || retnet) read_heads(f, gla, c, fc);
  read_convolutions(f, gla || hgrn2, fc);
  if (gla) read_gla_gates(f, fc);
  if (hgrn2) read_hgrn2_heads(root, f, c, fc);
  if (const json::Value* a = f.get("attn"))
    fc.attn = model::read_hybrid_attention(*a, f.source(), c.num_hidden_layers);
  c.family = std::make_shared<FlaConfig>(std::move(fc));
}

void resolve(ModelConfig& c, const std::string& source) {
  // A configuration built in code without the family's fields takes their defaults.
  const auto* given = dynamic_cast<const FlaConfig*>(c.family.get());
  if (c.family && !given)
    config_fail(source, "a GLA, RetNet or HGRN2 configuration holds another family's fields");
  FlaConfig fc = given ? *given : FlaConfig{};
  const std::string type = model::type_of(c);
  fc.kind = type == "gla" ? FlaConfig::Kind::kGla
            : type == "retnet" ? FlaConfig::Kind::kRetNet : FlaConfig::Kind::kHgrn2;
  if (!(fc.expand_k > 0 && fc.expand_k <= 1e6 && fc.expand_v > 0 && fc.expand_v <= 1e6))
    config_fail(source, "expand_k {} and expand_v {} must lie in (0, 1e6]", fc.expand_k,
                fc.expand_v);
  const int d = c.hidden_size;
  if (fc.kind == FlaConfig::Kind::kHgrn2) {
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
  if (fc.kind == FlaConfig::Kind::kRetNet && (fc.head_k_dim % 2 != 0 || fc.head_k_dim > 256))
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
  c.mixers.assign(std::size_t(c.num_hidden_layers), MixerKind::kGated);
  model::resolve_hybrid_attention(fc.attn, d, c.num_hidden_layers, source);
  for (int l = 0; l < c.num_hidden_layers; ++l)
    if (fc.attn.spec_of[std::size_t(l)] != -1) c.mixers[std::size_t(l)] = MixerKind::kAttention;
  c.family = std::make_shared<FlaConfig>(std::move(fc));
}

std::string config_fields(const ModelConfig& c) {
  const FlaConfig& fc = config_of(c);
  model::FieldWriter w;
  const bool gla = fc.kind == FlaConfig::Kind::kGla, retnet = fc.kind == FlaConfig::Kind::kRetNet;
  w.add("model_type", gla ? "\"gla\"" : retnet ? "\"retnet\"" : "\"hgrn2\"");
  w.add("architectures", gla      ? "[\"GLAForCausalLM\"]"
                         : retnet ? "[\"RetNetForCausalLM\"]"
                                  : "[\"HGRN2ForCausalLM\"]");
  w.add("attn_mode", "\"chunk\"");
  w.number("vocab_size", c.vocab_size);
  w.number("hidden_size", c.hidden_size);
  w.number("num_hidden_layers", c.num_hidden_layers);
  w.number("intermediate_size", c.intermediate_size);
  w.add("hidden_act", "\"swish\"");
  w.number("norm_eps", c.norm_eps);
  w.boolean("elementwise_affine", fc.elementwise_affine);
  w.boolean("fuse_norm", fc.fuse_norm);
  w.number("max_position_embeddings", fc.max_position_embeddings);
  if (fc.kind == FlaConfig::Kind::kHgrn2) {
    w.number("expand_ratio", fc.expand_ratio);
    w.boolean("use_lower_bound", fc.use_lower_bound);
  } else {
    w.number("num_heads", c.num_heads);
    w.number("num_kv_heads", c.num_kv_heads);
    w.number("expand_k", fc.expand_k);
    w.number("expand_v", fc.expand_v);
    w.boolean("use_output_gate", fc.use_output_gate);
    w.add("feature_map", fc.qk_activation.empty() ? "null" : json::quote(fc.qk_activation));
  }
  if (fc.kind != FlaConfig::Kind::kRetNet) {
    w.boolean("use_short_conv", fc.use_short_conv);
    w.number("conv_size", fc.conv_size);
  }
  if (gla) w.add("clamp_min", fc.has_clamp_min ? model::config_number(fc.clamp_min) : "null");
  if (fc.attn.present) model::write_hybrid_attention(w, fc.attn);
  return w.text();
}

}  // namespace recur::models::fla
