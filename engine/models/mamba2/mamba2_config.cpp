// Mamba-2's config.json in its two forms: transformers' Mamba2Config (model_type "mamba2") and
// mamba_ssm's MambaConfig (no model_type; d_model, n_layer, ssm_cfg {"layer": "Mamba2", ...}),
// and the tensor table (docs/mamba2.md, "Layouts").
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "model/config_schema.h"
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
constexpr const char* kResidual = "recur's residual stream is float32 whatever it says";
constexpr const char* kNoAttention =
    "attention layers in a mamba_ssm model, which recur does not run";

using Schema = model::Schema<Mamba2Config>;
using model::FieldSpec;

bool is_true(const json::Value& v) { return v.is_bool() && v.boolean(); }
bool dt_limit_given(const ModelConfig&, const Mamba2Config& g) { return g.has_dt_limit; }
double inner_of(const ModelConfig& c, const Mamba2Config& g) {
  return std::floor(g.expand * double(c.hidden_size));
}

// make-model's num_heads: the width expand * hidden_size in heads of head_dim.
double heads_of_width(const model::MakeOptions&, const ModelConfig& c, const Mamba2Config& g) {
  const double inner = inner_of(c, g);
  if (inner < 1 || std::fmod(inner, double(g.head_dim)) != 0)
    throw ArgumentError(fmt::format("--ssm-expand {} * --hidden {} = {} is not heads of "
                                    "--ssm-head-dim {}", g.expand, c.hidden_size, inner, g.head_dim));
  return inner / g.head_dim;
}

// time_step_limit / dt_limit: read, written back only when given; make-model's --ssm-dt-max
// sets [0, max].
Schema& dt_limit(Schema& t, const char* key) {
  return t
      .custom(
          key,
          [key](Fields& f, ModelConfig&, Mamba2Config& g) {
            g.has_dt_limit = model::read_dt_limit(f, key, g.dt_min, g.dt_max);
          },
          nullptr)
      .written_as([](const ModelConfig&, const Mamba2Config& g) {
        return model::dt_limit_text(g.dt_min, g.dt_max);
      })
      .written_when(dt_limit_given)
      .option("ssm-dt-max", "the upper time_step_limit (default: none)")
      .made_by([](const model::MakeOptions& o, const char* name) {
        return model::dt_limit_text(0.0, o.real(name, 0.0, 1e30));
      });
}

// transformers' Mamba2Config, in the order its config.json lists the fields.
const Schema& transformers_schema() {
  static const Schema s = [] {
    Schema t;
    t.written("architectures", "[\"Mamba2ForCausalLM\"]")
        .for_other_tools()
        .written("model_type", "\"mamba2\"")
        .integer("vocab_size", &ModelConfig::vocab_size, 32768, 1, 1 << 24).common_option("vocab")
        .integer("hidden_size", &ModelConfig::hidden_size, 4096, 1, kMaxDim).common_option("hidden")
        .integer("num_hidden_layers", &ModelConfig::num_hidden_layers, 64, 1, 4096)
        .common_option("layers")
        .integer("state_size", &Mamba2Config::d_state, 128, 1, model::kMaxHeadDim)
        .option("ssm-state", "Mamba-2 state size (state_size)", "16")
        .number("expand", &Mamba2Config::expand, 2, 1e-6, 1e6)
        .option("ssm-expand", "Mamba-2 width over hidden (expand)", "2")
        .integer("conv_kernel", &Mamba2Config::d_conv, 4, 1, 64)
        .option("ssm-conv", "Mamba-2 convolution taps (conv_kernel)", "4")
        .integer("n_groups", &Mamba2Config::n_groups, 8, 1, kMaxHeads)
        .option("ssm-groups", "Mamba-2 groups sharing B and C (n_groups)", "1")
        .integer("num_heads", &Mamba2Config::n_heads, 128, 1, kMaxHeads)
        .made_from(heads_of_width)
        .integer("head_dim", &Mamba2Config::head_dim, 64, 1, model::kMaxHeadDim)
        .option("ssm-head-dim", "Mamba-2 head size (head_dim)", "16")
        // transformers recomputes it as expand * hidden_size: any other value would be a model
        // transformers does not build. Codestral Mamba's file carries it; so does recur's.
        .custom(
            "intermediate_size",
            [](Fields& f, ModelConfig& c, Mamba2Config& g) {
              const json::Value* v = f.get("intermediate_size");
              if (v && (!v->is_number() || v->number() != inner_of(c, g)))
                config_fail(f.source(),
                            "intermediate_size is {}, but expand {} * hidden_size {} = {}",
                            describe_json(*v), g.expand, c.hidden_size, inner_of(c, g));
            },
            nullptr)
        .written_as([](const ModelConfig& c, const Mamba2Config& g) {
          return model::config_number(inner_of(c, g));
        })
        .for_other_tools()
        .boolean("use_bias", &Mamba2Config::use_bias, false)
        .flag("ssm-bias", "biases in in_proj and out_proj (use_bias)")
        .boolean("use_conv_bias", &Mamba2Config::use_conv_bias, true)
        .flag("ssm-no-conv-bias", "no convolution bias (use_conv_bias false)", false)
        .number("layer_norm_epsilon", &ModelConfig::norm_eps, 1e-5, 0.0, 1.0)
        .same_function("hidden_act", {"silu", "swish"}, "silu",
                       "silu and swish name one function, the one after Mamba-2's convolution")
        .accepted_when("rms_norm", is_true, "true: transformers' Mamba-2 always norms with RMSNorm",
                       "transformers' Mamba-2 always norms with RMSNorm")
        .written_as("true")
        // Written as transformers saves them, for other tools.
        .accepted("residual_in_fp32", kResidual)
        .written_as("true")
        .for_other_tools()
        .accepted("chunk_size", kKernel)
        .written_as("256")
        .for_other_tools()
        .accepted("time_step_rank",
                  "Mamba-1's dt projection rank: Mamba-2's dt is one column per "
                  "head of in_proj")
        // As transformers saves its "auto": ceil(hidden_size / 16).
        .written_as([](const ModelConfig& c, const Mamba2Config&) {
          return std::to_string((c.hidden_size + 15) / 16);
        })
        .for_other_tools()
        .accepted("time_step_min", kTraining)
        .written_as("0.001")
        .for_other_tools()
        .accepted("time_step_max", kTraining)
        .written_as("0.1")
        .for_other_tools()
        .accepted("time_step_floor", kTraining)
        .written_as("0.0001")
        .for_other_tools()
        .accepted("time_step_init_scheme", kTraining)
        .accepted("time_step_scale", kTraining)
        .accepted("rescale_prenorm_residual", kTraining)
        .written_as("false")
        .for_other_tools()
        .accepted("norm_before_gate",
                  "transformers' Mamba-2 never reads it: it norms y * silu(z), as mamba_ssm's "
                  "default (Codestral Mamba's file says true; its mamba_ssm training configuration "
                  "did not set it); docs/mamba2.md")
        .boolean("tie_word_embeddings", &ModelConfig::tie_word_embeddings, false)
        .not_written()
        .common_flag("tie-embeddings");
    dt_limit(t, "time_step_limit");
    return t;
  }();
  return s;
}

// mamba_ssm's Mamba2 mixer options (MambaConfig's ssm_cfg).
const Schema& ssm_cfg_schema() {
  static const Schema s = [] {
    Schema t;
    t.fixed("layer", "Mamba2", "recur runs mamba_ssm's Mamba2 layer")
        .made_as_written()
        .integer("d_state", &Mamba2Config::d_state, 128, 1, model::kMaxHeadDim)
        .option("ssm-state", "Mamba-2 state size (state_size)", "16")
        .integer("d_conv", &Mamba2Config::d_conv, 4, 1, 64)
        .option("ssm-conv", "Mamba-2 convolution taps (conv_kernel)", "4")
        .number("expand", &Mamba2Config::expand, 2, 1e-6, 1e6)
        .option("ssm-expand", "Mamba-2 width over hidden (expand)", "2")
        .integer("headdim", &Mamba2Config::head_dim, 64, 1, model::kMaxHeadDim)
        .option("ssm-head-dim", "Mamba-2 head size (head_dim)", "16")
        .integer("ngroups", &Mamba2Config::n_groups, 1, 1, kMaxHeads)
        .option("ssm-groups", "Mamba-2 groups sharing B and C (n_groups)", "1")
        .boolean("norm_before_gate", &Mamba2Config::norm_before_gate, false)
        .flag("norm-before-gate", "norm y before the gate (mamba_ssm layout only)")
        .boolean("bias", &Mamba2Config::use_bias, false)
        .flag("ssm-bias", "biases in in_proj and out_proj (use_bias)")
        .boolean("conv_bias", &Mamba2Config::use_conv_bias, true)
        .flag("ssm-no-conv-bias", "no convolution bias (use_conv_bias false)", false)
        .accepted_when("rmsnorm", is_true, "true: the gated norm recur runs",
                       "a Mamba-2 without its gated norm, which recur does not run")
        .accepted_when(
            "D_has_hdim", [](const json::Value& v) { return v.is_bool() && !v.boolean(); },
            "false: one D per head, as recur runs it", "recur runs one D per head")
        .same_function("activation", {"swish", "silu"}, "swish",
                       "silu and swish name one function, the one after Mamba-2's convolution")
        .not_written()
        .custom(
            "d_ssm",
            [](Fields& f, ModelConfig& c, Mamba2Config& g) {
              const json::Value* v = f.get("d_ssm");
              if (v && (!v->is_number() || v->number() != inner_of(c, g)))
                config_fail(f.source(),
                            "{} is {}: recur runs the SSM over the whole expand * d_model = {}",
                            f.name("d_ssm"), describe_json(*v), inner_of(c, g));
            },
            nullptr)
        // make-model checks that the width is whole heads (and writes it, which is read back).
        .made_from([](const model::MakeOptions& o, const ModelConfig& c, const Mamba2Config& g) {
          return heads_of_width(o, c, g) * g.head_dim;
        })
        .accepted("chunk_size", kKernel)
        .accepted("dt_min", kTraining)
        .accepted("dt_max", kTraining)
        .accepted("dt_init_floor", kTraining)
        .accepted("A_init_range", kTraining)
        .accepted("use_mem_eff_path", "which kernel runs the same function");
    dt_limit(t, "dt_limit");
    return t;
  }();
  return s;
}

// mamba_ssm's MambaConfig, as state-spaces' config.json lists it. d_model is read before
// ssm_cfg, whose d_ssm is checked against it.
const Schema& mamba_ssm_schema() {
  static const Schema s = [] {
    Schema t;
    t.integer("d_model", &ModelConfig::hidden_size, 2560, 1, kMaxDim).common_option("hidden")
        .accepted_when(
            "d_intermediate", [](const json::Value& v) { return v.is_number() && v.number() == 0; },
            "0: no MLP blocks", "mamba_ssm's blocks with an MLP, which recur does not run")
        .written_as("0")
        .integer("n_layer", &ModelConfig::num_hidden_layers, 64, 1, 4096).common_option("layers")
        .integer("vocab_size", &Mamba2Config::stored_vocab, 50277, 1, 1 << 24).common_option("vocab")
        .object("ssm_cfg", ssm_cfg_schema(),
                "recur does not know what it changes in the mixer, so it will not guess")
        .accepted_when(
            "attn_layer_idx",
            [](const json::Value& v) { return v.is_array() && v.array().empty(); },
            "empty: no attention layer", kNoAttention)
        .written_as("[]")
        .accepted_when(
            "attn_cfg", [](const json::Value& v) { return v.is_object() && v.object().empty(); },
            "empty: no attention layer", kNoAttention)
        .written_as("{}")
        .for_other_tools()
        .accepted_when("rms_norm", is_true, "true: the RMSNorm blocks recur runs",
                       "recur runs mamba_ssm's RMSNorm blocks")
        .written_as("true")
        .accepted("residual_in_fp32", kResidual)
        .written_as("true")
        .for_other_tools()
        .accepted("fused_add_norm", "the fused kernel of the same add and norm")
        .written_as("true")
        .for_other_tools()
        .integer("pad_vocab_size_multiple", &Mamba2Config::pad_vocab_size_multiple, 8, 1, 1 << 16)
        .made_as("16")
        .boolean("tie_embeddings", &ModelConfig::tie_word_embeddings, true)
        .common_flag("tie-embeddings")
        // The files recur writes end with tie_word_embeddings too: the same value.
        .custom(
            "tie_word_embeddings",
            [](Fields& f, ModelConfig& c, Mamba2Config&) {
              const json::Value* tied = f.get("tie_word_embeddings");
              if (tied && (!tied->is_bool() || tied->boolean() != c.tie_word_embeddings))
                config_fail(f.source(), "tie_word_embeddings is {} but tie_embeddings is {}",
                            describe_json(*tied), c.tie_word_embeddings);
            },
            nullptr);
    return t;
  }();
  return s;
}

// make-model's options of both layouts, each once.
std::vector<model::MakeOption> both_layouts_options(const std::vector<std::string>& archs) {
  auto out = transformers_schema().make_options(archs);
  for (auto& o : ssm_cfg_schema().make_options(archs))
    if (std::none_of(out.begin(), out.end(),
                     [&](const model::MakeOption& m) { return std::string(m.name) == o.name; }))
      out.push_back(std::move(o));
  return out;
}

}  // namespace

model::SsdSpec Mamba2Config::ssd(const ModelConfig& c) const {
  model::SsdSpec s =
      model::ssd_spec(c, {n_heads, head_dim, d_state, n_groups, d_conv}, dt_min, dt_max);
  s.proj_bias = use_bias;
  s.conv_bias = use_conv_bias;
  s.norm_before_gate = norm_before_gate;
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
  if (type == "mamba2") {
    g.layout = Layout::kTransformers;
    transformers_schema().read(f, c, g);
  } else {
    g.layout = Layout::kMambaSsm;
    // mamba_ssm's norms (each block's, norm_f and the mixer's gated one) keep their default eps.
    c.norm_eps = 1e-5;
    mamba_ssm_schema().read(f, c, g);
    const double inner = inner_of(c, g);
    if (inner < 1 || inner > kMaxDim || std::fmod(inner, double(g.head_dim)) != 0)
      config_fail(f.source(),
                  "ssm_cfg.expand {} * d_model {} = {} is not heads of ssm_cfg.headdim {}",
                  g.expand, c.hidden_size, inner, g.head_dim);
    g.n_heads = int(inner) / g.head_dim;
    const auto m = std::int64_t(g.pad_vocab_size_multiple);
    c.vocab_size = int((std::int64_t(g.stored_vocab) + m - 1) / m * m);
  }
  c.family = std::make_shared<Mamba2Config>(g);
}

void resolve(ModelConfig& c, const std::string& source) {
  Mamba2Config g = c.family ? config_of(c) : Mamba2Config{};
  if (g.layout == Layout::kTransformers) {
    const double inner = inner_of(c, g);
    if (double(g.n_heads) * double(g.head_dim) != inner)
      config_fail(source, "num_heads {} * head_dim {} is not expand {} * hidden_size {} = {}: "
                          "transformers splits in_proj by both", g.n_heads, g.head_dim, g.expand,
                  c.hidden_size, inner);
  } else if (g.stored_vocab == 0) {
    g.stored_vocab = c.vocab_size;
  }
  model::check_ssd_spec(g.ssd(c), source);
  c.intermediate_size = int(std::int64_t(g.n_heads) * g.head_dim);
  c.mixers.assign(std::size_t(c.num_hidden_layers), MixerKind::kDecayedRecurrence);
  c.family = std::make_shared<Mamba2Config>(g);
}

std::string config_fields(const ModelConfig& c, bool fingerprint) {
  const Mamba2Config& g = config_of(c);
  model::FieldWriter w;
  (g.layout == Layout::kTransformers ? transformers_schema() : mamba_ssm_schema())
      .write(w, c, g, fingerprint);
  return w.text();
}

std::vector<model::MakeOption> make_options() {
  auto out = both_layouts_options({"mamba2"});
  out.push_back({"mamba-ssm-layout",
                 nullptr,
                 "state-spaces' mamba_ssm config.json and names (backbone.embedding, ssm_cfg)",
                 true,
                 {"mamba2"}});
  return out;
}

std::string make_config(const model::MakeOptions& o) {
  if (o.flag("mamba-ssm-layout")) return "{" + mamba_ssm_schema().make_fields(o) + "}";
  if (o.flag("norm-before-gate"))
    throw ArgumentError(
        "--norm-before-gate needs --mamba-ssm-layout: transformers' Mamba-2 "
        "norms y * silu(z) whatever its config says");
  return "{\"model_type\": \"mamba2\", " + transformers_schema().make_fields(o) + "}";
}

}  // namespace recur::models::mamba2
