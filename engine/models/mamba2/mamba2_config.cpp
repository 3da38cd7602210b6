// Mamba-2's config.json in its two forms: transformers' Mamba2Config (model_type "mamba2") and
// mamba_ssm's MambaConfig (no model_type; d_model, n_layer, ssm_cfg {"layer": "Mamba2", ...}),
// and the tensor table (docs/mamba2.md, "Layouts").
#include <fmt/format.h>

#include <cmath>

#include "model/config_fields.h"
#include "models/mamba2/mamba2.h"
#include "recur/error.h"

namespace recur::models::mamba2 {

using model::config_fail;
using model::describe_json;
using model::Fields;
using model::kMaxDim;
using Layout = Mamba2Config::Layout;

namespace {

constexpr int kMaxHeads = 1 << 16;
constexpr const char* kTraining = "training or initialisation only: the same function at inference";
constexpr const char* kKernel = "the GPU kernels' chunk length: the same function, which recur "
                                "computes token by token";

// [min, max] of time_step_limit / dt_limit: numbers (Python writes the infinity as Infinity).
void read_dt_limit(const json::Value& v, const std::string& source, const std::string& name,
                   Mamba2Config& g) {
  if (!v.is_array() || v.array().size() != 2 || !v.array()[0].is_number() ||
      !v.array()[1].is_number())
    config_fail(source, "{} is {}, expected [min, max]", name, describe_json(v));
  g.dt_min = v.array()[0].number();
  g.dt_max = v.array()[1].number();
  g.has_dt_limit = true;
}

void read_transformers(Fields& f, ModelConfig& c, Mamba2Config& g) {
  const std::string& source = f.source();
  g.layout = Layout::kTransformers;
  c.vocab_size = f.integer("vocab_size", 32768, 1, 1 << 24);
  c.hidden_size = f.integer("hidden_size", 4096, 1, kMaxDim);
  c.num_hidden_layers = f.integer("num_hidden_layers", 64, 1, 4096);
  c.norm_eps = f.number("layer_norm_epsilon", 1e-5, 0.0, 1.0);
  g.d_state = f.integer("state_size", 128, 1, model::kMaxHeadDim);
  g.expand = f.number("expand", 2, 1e-6, 1e6);
  g.d_conv = f.integer("conv_kernel", 4, 1, 64);
  g.n_groups = f.integer("n_groups", 8, 1, kMaxHeads);
  g.n_heads = f.integer("num_heads", 128, 1, kMaxHeads);
  g.head_dim = f.integer("head_dim", 64, 1, model::kMaxHeadDim);
  g.use_bias = f.boolean("use_bias", false);
  g.use_conv_bias = f.boolean("use_conv_bias", true);
  c.tie_word_embeddings = f.boolean("tie_word_embeddings", false);
  const std::string act = f.string("hidden_act", "silu");
  if (act != "silu" && act != "swish")
    config_fail(source, "hidden_act is '{}': Mamba-2's convolution is followed by silu", act);
  if (!f.boolean("rms_norm", true))
    config_fail(source, "rms_norm is false: transformers' Mamba-2 always norms with RMSNorm");
  if (const json::Value* v = f.get("time_step_limit")) read_dt_limit(*v, source, "time_step_limit", g);
  // intermediate_size, when written (Codestral Mamba's file), is expand * hidden_size, which
  // transformers recomputes: anything else would be a model transformers does not build.
  const double inner = std::floor(g.expand * double(c.hidden_size));
  if (const json::Value* v = f.get("intermediate_size"))
    if (!v->is_number() || v->number() != inner)
      config_fail(source, "intermediate_size is {}, but expand {} * hidden_size {} = {}",
                  describe_json(*v), g.expand, c.hidden_size, inner);
  f.accept({{"residual_in_fp32", "recur's residual stream is float32 whatever it says"},
            {"chunk_size", kKernel},
            {"time_step_rank", "Mamba-1's dt projection rank: Mamba-2's dt is one column per "
                               "head of in_proj"},
            {"time_step_min", kTraining}, {"time_step_max", kTraining},
            {"time_step_floor", kTraining}, {"time_step_init_scheme", kTraining},
            {"time_step_scale", kTraining}, {"rescale_prenorm_residual", kTraining},
            {"norm_before_gate",
             "transformers' Mamba-2 never reads it: it norms y * silu(z), as mamba_ssm's default "
             "(Codestral Mamba's file says true; its mamba_ssm training configuration did not set "
             "it); docs/mamba2.md"}});
}

void read_mamba_ssm(Fields& f, ModelConfig& c, Mamba2Config& g) {
  const std::string& source = f.source();
  g.layout = Layout::kMambaSsm;
  g.stored_vocab = f.integer("vocab_size", 50277, 1, 1 << 24);
  c.hidden_size = f.integer("d_model", 2560, 1, kMaxDim);
  c.num_hidden_layers = f.integer("n_layer", 64, 1, 4096);
  g.pad_vocab_size_multiple = f.integer("pad_vocab_size_multiple", 8, 1, 1 << 16);
  c.tie_word_embeddings = f.boolean("tie_embeddings", true);
  // The files recur writes end with tie_word_embeddings too: the same value.
  if (const json::Value* t = f.get("tie_word_embeddings"); t && (!t->is_bool() || t->boolean() != c.tie_word_embeddings))
    config_fail(source, "tie_word_embeddings is {} but tie_embeddings is {}", describe_json(*t),
                c.tie_word_embeddings);
  // mamba_ssm's norms (each block's, norm_f and the mixer's gated one) keep their default eps.
  c.norm_eps = 1e-5;
  if (f.integer("d_intermediate", 0, 0, kMaxDim) != 0)
    config_fail(source, "d_intermediate is not 0: mamba_ssm's blocks with an MLP, which recur "
                        "does not run");
  if (!f.boolean("rms_norm", true))
    config_fail(source, "rms_norm is false: recur runs mamba_ssm's RMSNorm blocks");
  f.accept_when("attn_layer_idx", [](const json::Value& v) { return v.is_array() && v.array().empty(); },
                "empty: no attention layer", "attention layers in a mamba_ssm model, which recur "
                "does not run");
  f.accept_when("attn_cfg", [](const json::Value& v) { return v.is_object() && v.object().empty(); },
                "empty: no attention layer", "attention layers in a mamba_ssm model, which recur "
                "does not run");
  f.accept({{"residual_in_fp32", "recur's residual stream is float32 whatever it says"},
            {"fused_add_norm", "the fused kernel of the same add and norm"}});
  const json::Value* ssm = f.get("ssm_cfg");
  Fields s(*ssm, source, "ssm_cfg");
  if (s.string("layer", "Mamba1") != "Mamba2")
    config_fail(source, "ssm_cfg.layer is not Mamba2");
  g.d_state = s.integer("d_state", 128, 1, model::kMaxHeadDim);
  g.d_conv = s.integer("d_conv", 4, 1, 64);
  g.expand = s.number("expand", 2, 1e-6, 1e6);
  g.head_dim = s.integer("headdim", 64, 1, model::kMaxHeadDim);
  g.n_groups = s.integer("ngroups", 1, 1, kMaxHeads);
  g.norm_before_gate = s.boolean("norm_before_gate", false);
  g.use_bias = s.boolean("bias", false);
  g.use_conv_bias = s.boolean("conv_bias", true);
  if (!s.boolean("rmsnorm", true))
    config_fail(source, "ssm_cfg.rmsnorm is false: a Mamba-2 without its gated norm, which recur "
                        "does not run");
  if (s.boolean("D_has_hdim", false))
    config_fail(source, "ssm_cfg.D_has_hdim is true: recur runs one D per head");
  const std::string act = s.string("activation", "swish");
  if (act != "silu" && act != "swish")
    config_fail(source, "ssm_cfg.activation is '{}', expected swish (silu)", act);
  if (const json::Value* v = s.get("dt_limit")) read_dt_limit(*v, source, "ssm_cfg.dt_limit", g);
  const double inner = std::floor(g.expand * double(c.hidden_size));
  if (const json::Value* v = s.get("d_ssm"); v && (!v->is_number() || v->number() != inner))
    config_fail(source, "ssm_cfg.d_ssm is {}: recur runs the SSM over the whole expand * d_model "
                        "= {}", describe_json(*v), inner);
  if (inner < 1 || inner > kMaxDim || std::fmod(inner, double(g.head_dim)) != 0)
    config_fail(source, "expand {} * d_model {} = {} is not heads of headdim {}", g.expand,
                c.hidden_size, inner, g.head_dim);
  g.n_heads = int(inner) / g.head_dim;
  s.accept({{"chunk_size", kKernel}, {"dt_min", kTraining}, {"dt_max", kTraining},
            {"dt_init_floor", kTraining}, {"A_init_range", kTraining},
            {"use_mem_eff_path", "which kernel runs the same function"}});
  s.reject_unknown("recur does not know what it changes in the mixer, so it will not guess");
  const auto m = std::int64_t(g.pad_vocab_size_multiple);
  c.vocab_size = int((std::int64_t(g.stored_vocab) + m - 1) / m * m);
}

}  // namespace

model::SsdSpec Mamba2Config::ssd(const ModelConfig& c) const {
  model::SsdSpec s;
  s.hidden = c.hidden_size;
  s.n_heads = n_heads;
  s.head_dim = head_dim;
  s.d_state = d_state;
  s.n_groups = n_groups;
  s.d_conv = d_conv;
  s.proj_bias = use_bias;
  s.conv_bias = use_conv_bias;
  // mamba_ssm norms each group apart (RMSNormGated's group_size = d_ssm / ngroups), and so does
  // recur for both layouts (transformers' Mamba2 norms the whole width; docs/mamba2.md).
  s.norm_groups = n_groups;
  s.norm_before_gate = norm_before_gate;
  s.norm_eps = c.norm_eps;
  s.dt_min = dt_min;
  s.dt_max = dt_max;
  return s;
}

Names names_of(const Mamba2Config& g) {
  Names n;
  n.emb = g.layout == Layout::kMambaSsm ? "backbone.embedding.weight" : "backbone.embeddings.weight";
  n.final_norm = "backbone.norm_f.weight";
  n.head = "lm_head.weight";
  return n;
}

bool reads(const std::string& type, const json::Value& root) {
  if (type == "mamba2") return true;
  // mamba_ssm's MambaConfig has no model_type: its ssm_cfg names the layer.
  const json::Value* ssm = root.find("ssm_cfg");
  const json::Value* layer = ssm && ssm->is_object() ? ssm->find("layer") : nullptr;
  return type.empty() && layer && layer->is_string() && layer->string() == "Mamba2";
}

void read_config(const std::string& type, const json::Value& root, Fields& f, ModelConfig& c) {
  (void)root;
  c.type = "mamba2";
  Mamba2Config g;
  if (type == "mamba2") read_transformers(f, c, g);
  else read_mamba_ssm(f, c, g);
  c.family = std::make_shared<Mamba2Config>(g);
}

void resolve(ModelConfig& c, const std::string& source) {
  Mamba2Config g = c.family ? config_of(c) : Mamba2Config{};
  if (g.layout == Layout::kTransformers) {
    const double inner = std::floor(g.expand * double(c.hidden_size));
    if (double(g.n_heads) * double(g.head_dim) != inner)
      config_fail(source, "num_heads {} * head_dim {} is not expand {} * hidden_size {} = {}: "
                          "transformers splits in_proj by both", g.n_heads, g.head_dim, g.expand,
                  c.hidden_size, inner);
  } else if (g.stored_vocab == 0) {
    g.stored_vocab = c.vocab_size;
  }
  model::check_ssd_spec(g.ssd(c), source);
  c.num_heads = g.n_heads;
  c.num_kv_heads = g.n_heads;
  c.intermediate_size = int(std::int64_t(g.n_heads) * g.head_dim);
  c.mixers.assign(std::size_t(c.num_hidden_layers), MixerKind::kGated);
  c.family = std::make_shared<Mamba2Config>(g);
}

std::string config_fields(const ModelConfig& c) {
  const Mamba2Config& g = config_of(c);
  model::FieldWriter w;
  using model::config_number;
  const std::string limit = fmt::format(
      "[{}, {}]", config_number(g.dt_min),
      std::isinf(g.dt_max) ? std::string("Infinity") : config_number(g.dt_max));
  if (g.layout == Layout::kTransformers) {
    w.add("model_type", "\"mamba2\"");
    w.number("vocab_size", c.vocab_size);
    w.number("hidden_size", c.hidden_size);
    w.number("num_hidden_layers", c.num_hidden_layers);
    w.number("state_size", g.d_state);
    w.number("expand", g.expand);
    w.number("conv_kernel", g.d_conv);
    w.number("n_groups", g.n_groups);
    w.number("num_heads", g.n_heads);
    w.number("head_dim", g.head_dim);
    w.boolean("use_bias", g.use_bias);
    w.boolean("use_conv_bias", g.use_conv_bias);
    w.number("layer_norm_epsilon", c.norm_eps);
    w.add("hidden_act", "\"silu\"");
    w.boolean("rms_norm", true);
    if (g.has_dt_limit) w.add("time_step_limit", limit);
    return w.text();
  }
  // mamba_ssm's form; tie_word_embeddings, which every config.json recur writes ends with, is
  // read as the same value as tie_embeddings.
  w.number("d_model", c.hidden_size);
  w.number("d_intermediate", 0);
  w.number("n_layer", c.num_hidden_layers);
  w.number("vocab_size", g.stored_vocab);
  std::string ssm = fmt::format(
      "{{\"layer\": \"Mamba2\", \"d_state\": {}, \"d_conv\": {}, \"expand\": {}, \"headdim\": {}, "
      "\"ngroups\": {}, \"norm_before_gate\": {}, \"bias\": {}, \"conv_bias\": {}",
      g.d_state, g.d_conv, config_number(g.expand), g.head_dim, g.n_groups,
      model::config_bool(g.norm_before_gate), model::config_bool(g.use_bias),
      model::config_bool(g.use_conv_bias));
  if (g.has_dt_limit) ssm += ", \"dt_limit\": " + limit;
  w.add("ssm_cfg", ssm + "}");
  w.add("attn_layer_idx", "[]");
  w.boolean("rms_norm", true);
  w.number("pad_vocab_size_multiple", g.pad_vocab_size_multiple);
  w.boolean("tie_embeddings", c.tie_word_embeddings);
  return w.text();
}

}  // namespace recur::models::mamba2
