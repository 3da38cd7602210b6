// The Gated DeltaNet models' configuration: Qwen3.5's config.json (transformers'
// Qwen3_5Config: the text model's fields inside text_config, or a text-only Qwen3_5TextConfig),
// and fla's gated_deltanet and delta_net configs (fla/models/{gated_deltanet,delta_net}). Each
// layout's fields are one Schema table, which reads, writes and gives make-model its options;
// the checks across fields and the derived sizes are code beside it. The tensors of each layout
// (docs/qwen35.md, "Tensors") are named where gdn.cpp reads them.
#include <fmt/format.h>

#include <cmath>
#include <stdexcept>

#include "model/config_schema.h"
#include "models/gdn/gdn.h"
#include "recur/error.h"

namespace recur::models::gdn {

using model::config_fail;
using model::describe_json;
using model::Fields;
using model::FieldWriter;
using model::kMaxDim;
using Layout = GdnConfig::Layout;

namespace {

constexpr int kMaxHeads = 1 << 16;

bool multimodal(const ModelConfig&, const GdnConfig& g) { return g.layout == Layout::kQwen35; }
bool gated(const ModelConfig&, const GdnConfig& g) { return g.layout == Layout::kFla; }
bool delta(const ModelConfig&, const GdnConfig& g) { return g.layout == Layout::kFlaDelta; }

// Text_config's fields that change nothing recur computes, each with its reason.
constexpr const char* kQwenIdentity = "names the checkpoint or its saved dtype: bookkeeping";
constexpr const char* kQwenTraining = "training or caching only: the same function at inference";
constexpr const char* kQwenMtp =
    "the multi-token-prediction head, used for speculative decoding; its tensors are skipped by "
    "name and the next-token logits do not use it";
constexpr const char* kVision =
    "the vision tower's settings: its tensors are skipped, text runs without it";
constexpr const char* kFlaKernel = "a kernel choice or fused training op of fla: the same function";
constexpr const char* kUnknown =
    "recur does not know what it changes in the model, so it will not guess";

// make-model's help of the options both layouts take, whose defaults differ between them.
constexpr const char* kHelpVHeads =
    "Gated DeltaNet value heads (default: twice the key heads for qwen35, the key heads for "
    "gated_deltanet)";
constexpr const char* kHelpHeadDim = "Gated DeltaNet key head size";
constexpr const char* kHelpVDim =
    "Gated DeltaNet value head size (default: the key head size; gated_deltanet: twice it)";

// layer_types, or the schedule its absence means: full attention every
// full_attention_interval-th layer (the last of each group).
void read_layer_types(Fields& t, ModelConfig& c, GdnConfig& g) {
  c.mixers.clear();
  if (const json::Value* lt = t.get("layer_types")) {
    if (!lt->is_array() || lt->array().size() != std::size_t(c.num_hidden_layers))
      config_fail(t.source(), "{} is {}, expected {} entries (num_hidden_layers)",
                  t.name("layer_types"), describe_json(*lt), c.num_hidden_layers);
    for (const auto& v : lt->array()) {
      if (v.is_string() && v.string() == "linear_attention") c.mixers.push_back(MixerKind::kDeltaRule);
      else if (v.is_string() && v.string() == "full_attention") c.mixers.push_back(MixerKind::kAttention);
      else
        config_fail(t.source(), "{} holds {}, expected linear_attention or full_attention",
                    t.name("layer_types"), describe_json(v));
    }
  } else {
    for (int i = 0; i < c.num_hidden_layers; ++i)
      c.mixers.push_back((i + 1) % g.full_attention_interval ? MixerKind::kDeltaRule
                                                             : MixerKind::kAttention);
  }
}

void write_layer_types(FieldWriter& w, const ModelConfig& c, const GdnConfig&) {
  std::string types = "[";
  for (std::size_t i = 0; i < c.mixers.size(); ++i)
    types += fmt::format("{}\"{}\"", i ? ", " : "",
                         c.mixers[i] == MixerKind::kAttention ? "full_attention"
                                                              : "linear_attention");
  w.add("layer_types", types + "]");
}

// The text model's end-of-sequence ids inside text_config; read_config keeps them only when the
// file's top level gives none.
void read_text_eos(Fields& t, ModelConfig& c, GdnConfig&) {
  const json::Value* eos = t.get("eos_token_id");
  if (!eos) return;
  const auto add = [&](const json::Value& v) {
    if (!v.is_integer() || v.integer() < 0 || v.integer() >= c.vocab_size)
      config_fail(t.source(), "{} holds {}, expected ids below vocab_size {}",
                  t.name("eos_token_id"), describe_json(v), c.vocab_size);
    c.eos_token_ids.push_back(int(v.integer()));
  };
  if (eos->is_array()) {
    for (const auto& v : eos->array()) add(v);
  } else {
    add(*eos);
  }
}

// Qwen's rotary, as rope_parameters (transformers 5) or rope_scaling (older files) give it; a
// field it leaves out keeps the text model's top-level value. Text-only positions make the
// multimodal sections (mrope_section, mrope_interleaved) one ordinary rotary: every section turns
// by the same position.
model::Schema<GdnConfig> rope_schema() {
  const std::vector<std::string> types = {"default", "mrope"};
  const char* same = "Qwen3.5's default rotary: mrope turns every section by the same position "
                     "for text, which is the default rotary (recur runs no scaling)";
  model::Schema<GdnConfig> t;
  t.same_function("rope_type", types, "default", same)
      .same_function("type", types, "default", same).not_written()  // rope_scaling's older name
      .number("rope_theta", &GdnConfig::rope_theta, 10000000, 1.0 + 1e-9, 1e12)
      .default_from([](const ModelConfig&, const GdnConfig& g) { return g.rope_theta; })
      .number("partial_rotary_factor", &GdnConfig::partial_rotary_factor, 0.25, 1e-9, 1.0)
      .default_from([](const ModelConfig&, const GdnConfig& g) { return g.partial_rotary_factor; })
      .accepted("mrope_section", "the multimodal rotary's split of the angles over time, "
                                 "height and width; text positions turn every section by the "
                                 "same position")
      .accepted("mrope_interleaved", "how those sections are laid out: for text positions every "
                                     "layout gives the same angles");
  return t;
}

// Qwen3.5's text model (transformers' Qwen3_5TextConfig), in the order config.json is written;
// make-model's options beside the fields they set.
const model::Schema<GdnConfig>& qwen_text_schema() {
  static const model::Schema<GdnConfig> s = [] {
    const auto no_bias = [](const json::Value& v) { return v.is_bool() && !v.boolean(); };
    const auto gate = [](const json::Value& v) { return v.is_bool() && v.boolean(); };
    model::Schema<GdnConfig> t;
    t.integer("vocab_size", &ModelConfig::vocab_size, 248320, 1, 1 << 24).common_option("vocab")
        .integer("hidden_size", &ModelConfig::hidden_size, 4096, 1, kMaxDim).common_option("hidden")
        .integer("intermediate_size", &ModelConfig::intermediate_size, 12288, 1, kMaxDim)
        .common_option("intermediate", true,
                       [](const ModelConfig& c, const GdnConfig&) { return 3.0 * c.hidden_size; })
        .integer("num_hidden_layers", &ModelConfig::num_hidden_layers, 32, 1, 4096)
        .common_option("layers")
        .integer("num_attention_heads", &GdnConfig::n_heads, 16, 1, kMaxHeads)
        .common_option("heads")
        .integer("num_key_value_heads", &GdnConfig::n_kv_heads, 4, 1, kMaxHeads)
        .option("attn-kv-heads", "the full-attention layers' kv heads (default: as many as heads)",
                [](const ModelConfig&, const GdnConfig& g) { return g.n_heads; })
        .integer("head_dim", &GdnConfig::head_dim, 256, 2, model::kMaxHeadDim)
        .option("head-dim", "the full-attention layers' head size (default hidden / heads)",
                [](const ModelConfig& c, const GdnConfig& g) {
                  if (c.hidden_size % g.n_heads != 0)
                    throw ArgumentError(fmt::format("--hidden {} is not --heads {} heads of one "
                                                    "size: give --head-dim",
                                                    c.hidden_size, g.n_heads));
                  return c.hidden_size / g.n_heads;
                })
        .same_function("hidden_act", {"silu", "swish"}, "silu",
                       "two names of one function, Qwen3.5's MLP and convolution activation")
        .number("rms_norm_eps", &ModelConfig::norm_eps, 1e-6, 0.0, 1.0)
        .integer("max_position_embeddings", &GdnConfig::max_position_embeddings, 32768, 0, 1 << 30)
        .integer("linear_conv_kernel_dim", &GdnConfig::conv_size, 4, 1, 64)
        .integer("linear_key_head_dim", &GdnConfig::d_k, 128, 1, model::kMaxHeadDim)
        .option("gdn-head-dim", kHelpHeadDim, "16")
        .integer("linear_value_head_dim", &GdnConfig::d_v, 128, 1, model::kMaxHeadDim)
        .option("gdn-v-dim", kHelpVDim,
                [](const ModelConfig&, const GdnConfig& g) { return g.d_k; })
        .integer("linear_num_key_heads", &GdnConfig::n_k_heads, 16, 1, kMaxHeads)
        .option("gdn-k-heads", "Gated DeltaNet key heads (default: --heads)",
                [](const ModelConfig&, const GdnConfig& g) { return g.n_heads; })
        .integer("linear_num_value_heads", &GdnConfig::n_v_heads, 32, 1, kMaxHeads)
        .option("gdn-v-heads", kHelpVHeads,
                [](const ModelConfig&, const GdnConfig& g) { return 2.0 * g.n_k_heads; })
        // Written as layer_types, the list it means.
        .integer("full_attention_interval", &GdnConfig::full_attention_interval, 4, 1, 4096)
        .not_written()
        .option("full-attention-interval", "every N-th layer is full attention", "4")
        .custom("layer_types", read_layer_types, write_layer_types)
        // Older files' top-level rotary fields; rope_parameters, below, overrides them.
        .number("rope_theta", &GdnConfig::rope_theta, 10000000, 1.0 + 1e-9, 1e12).not_written()
        .number("partial_rotary_factor", &GdnConfig::partial_rotary_factor, 0.25, 1e-9, 1.0)
        .not_written()
        .option("partial-rotary", "the rotary fraction of the attention head", "0.25")
        .object("rope_parameters", rope_schema(),
                "recur does not know what it changes in the rotary embedding")
        .object("rope_scaling", rope_schema(),
                "recur does not know what it changes in the rotary embedding")
        .not_written()
        .boolean("tie_word_embeddings", &ModelConfig::tie_word_embeddings, false).not_written()
        .common_flag("tie-embeddings")
        .accepted_when("attention_bias", no_bias, "false: Qwen3.5's attention has no biases",
                       "no Qwen3.5 has biases in its attention projections")
        .accepted_when("attn_output_gate", gate, "true: Qwen3.5's attention has its output gate",
                       "Qwen3.5's attention always has its output gate")
        // mlp_only_layers (transformers' Qwen3-Next / Qwen3.5-MoE): the layers that keep a dense
        // MLP where the others have experts. Every published dense Qwen3.5 carries an empty
        // list; a non-empty one belongs to a MoE configuration, whose experts recur does not run.
        .accepted_when(
            "mlp_only_layers",
            [](const json::Value& v) { return v.is_array() && v.array().empty(); },
            "empty: no layer is an exception to the dense MLP every layer of a dense Qwen3.5 has",
            "the layers that keep a dense MLP in a mixture-of-experts model; recur runs dense "
            "Qwen3.5, where the list is empty")
        .custom("eos_token_id", read_text_eos, nullptr).only_when(multimodal)
        .accepted("model_type", kQwenIdentity)
        .accepted("dtype", kQwenIdentity)
        .accepted("torch_dtype", kQwenIdentity)
        .accepted("transformers_version", kQwenIdentity)
        .accepted("_name_or_path", kQwenIdentity)
        .accepted("architectures", kQwenIdentity)
        .accepted("bos_token_id", "a special token: recur takes prompts as given")
        .accepted("pad_token_id", "the padding token of batched training: recur pads nothing")
        .accepted("initializer_range", kQwenTraining)
        .accepted("use_cache", kQwenTraining)
        .accepted("attention_dropout", kQwenTraining)
        .accepted("output_router_logits", "returns the MoE router's logits for its training loss")
        .accepted("mtp_num_hidden_layers", kQwenMtp)
        .accepted("mtp_use_dedicated_embeddings", kQwenMtp)
        .accepted("mamba_ssm_dtype", "the recurrent state's dtype in other engines; recur's is "
                                     "float32 whatever it says");
    return t;
  }();
  return s;
}

// Qwen3.5's multimodal config.json (Qwen3_5Config): the text model inside text_config, the
// vision tower's settings beside it.
const model::Schema<GdnConfig>& qwen_schema() {
  static const model::Schema<GdnConfig> s = [] {
    model::Schema<GdnConfig> t;
    t.written("model_type", "\"qwen3_5\"")
        .written("architectures", "[\"Qwen3_5ForConditionalGeneration\"]");
    for (const char* k : {"vision_config", "image_token_id", "video_token_id",
                          "vision_start_token_id", "vision_end_token_id", "video_start_token_id",
                          "video_end_token_id"})
      t.accepted(k, kVision);
    t.object("text_config", qwen_text_schema(), kUnknown)
        // The top level's, when given, over text_config's (read_config refuses the two apart).
        .boolean("tie_word_embeddings", &ModelConfig::tie_word_embeddings, false).not_written()
        .default_from([](const ModelConfig& c, const GdnConfig&) { return c.tie_word_embeddings; });
    return t;
  }();
  return s;
}

// The text model alone (model_type qwen3_5_text): text_config's fields at the top level.
const model::Schema<GdnConfig>& qwen_text_only_schema() {
  static const model::Schema<GdnConfig> s = [] {
    model::Schema<GdnConfig> t;
    t.written("model_type", "\"qwen3_5_text\"").include(qwen_text_schema());
    return t;
  }();
  return s;
}

// fla's gated_deltanet and delta_net (fla/models/{gated_deltanet,delta_net}), in the order
// config.json is written.
const model::Schema<GdnConfig>& fla_schema() {
  static const model::Schema<GdnConfig> s = [] {
    using QkActivation = GdnConfig::QkActivation;
    model::Schema<GdnConfig> t;
    t.written("model_type", "\"gated_deltanet\"").only_when(gated)
        .written("model_type", "\"delta_net\"").only_when(delta)
        .integer("vocab_size", &ModelConfig::vocab_size, 32000, 1, 1 << 24).common_option("vocab")
        .integer("hidden_size", &ModelConfig::hidden_size, 2048, 1, kMaxDim).common_option("hidden")
        .integer("num_hidden_layers", &ModelConfig::num_hidden_layers, 21, 1, 4096)
        .common_option("layers")
        // delta_net's heads are both key and value heads (read_config).
        .integer("num_heads", &GdnConfig::n_k_heads, 6, 1, kMaxHeads).only_when(gated)
        .common_option("heads")
        .integer("num_heads", &GdnConfig::n_k_heads, 16, 1, kMaxHeads).only_when(delta)
        .number("expand_k", &GdnConfig::expand_k, 1, 1e-6, 1e6).only_when(delta)
        .boolean("use_beta", &GdnConfig::use_beta, true).only_when(delta)
        .choice("qk_activation", &GdnConfig::qk_activation, QkActivation::kSilu,
                {{QkActivation::kSilu, "silu"}, {QkActivation::kRelu, "relu"},
                 {QkActivation::kElu, "elu"}, {QkActivation::kIdentity, "identity"}})
        .only_when(delta)
        .choice("qk_norm", &GdnConfig::qk_sum_norm, false, {{false, "l2"}, {true, "sum"}})
        .only_when(delta)
        .integer("num_v_heads", &GdnConfig::n_v_heads, 6, 1, kMaxHeads).only_when(gated)
        .default_from([](const ModelConfig&, const GdnConfig& g) { return g.n_k_heads; })
        .option("gdn-v-heads", kHelpVHeads,
                [](const ModelConfig&, const GdnConfig& g) { return g.n_k_heads; })
        .integer("head_dim", &GdnConfig::d_k, 256, 1, model::kMaxHeadDim).only_when(gated)
        .option("gdn-head-dim", kHelpHeadDim, "16")
        // make-model's value head size, as the ratio fla's config keeps.
        .number("expand_v", &GdnConfig::expand_v, 2, 1e-6, 1e6).only_when(gated)
        .option("gdn-v-dim", kHelpVDim,
                [](const ModelConfig&, const GdnConfig& g) { return 2.0 * g.d_k; },
                [](double d_v, const ModelConfig&, const GdnConfig& g) { return d_v / g.d_k; })
        .number("expand_v", &GdnConfig::expand_v, 1, 1e-6, 1e6).only_when(delta)
        // null: fla's rule from hidden_ratio (resolve).
        .integer("intermediate_size", &ModelConfig::intermediate_size, 0, 1, kMaxDim)
        .common_option("intermediate", true)
        .number("hidden_ratio", &GdnConfig::hidden_ratio, 4, 1e-6, 1e6)
        .same_function("hidden_act", {"swish", "silu"}, "swish",
                       "two names of one function, fla's GatedMLP activation")
        .number("norm_eps", &ModelConfig::norm_eps, 1e-6, 0.0, 1.0)
        .boolean("use_gate", &GdnConfig::use_gate, true).only_when(gated)
        .flag("no-output-gate", "no output gate (use_output_gate / use_gate false)", false)
        .boolean("use_gate", &GdnConfig::use_gate, false).only_when(delta)
        .boolean("use_short_conv", &GdnConfig::use_conv, true)
        .flag("gdn-no-conv", "no short convolutions (use_short_conv false)", false)
        .boolean("allow_neg_eigval", &GdnConfig::allow_neg_eigval, false)
        .flag("allow-neg-eigval", "beta in (0, 2) (allow_neg_eigval)")
        .integer("conv_size", &GdnConfig::conv_size, 4, 1, 64)
        .integer("max_position_embeddings", &GdnConfig::max_position_embeddings, 2048, 0, 1 << 30)
        .custom("attn",
                [](Fields& f, ModelConfig& c, GdnConfig& g) {
                  if (const json::Value* attn = f.get("attn"))
                    g.attn = model::read_hybrid_attention(*attn, f.source(), c.num_hidden_layers);
                },
                [](FieldWriter& w, const ModelConfig&, const GdnConfig& g) {
                  if (!g.attn.specs.empty()) model::write_hybrid_attention(w, g.attn);
                })
        .custom("attnres_block_size",
                [](Fields& f, ModelConfig&, GdnConfig&) {
                  if (const json::Value* b = f.get("attnres_block_size"))
                    config_fail(f.source(), "attnres_block_size is {}: fla's attention residuals "
                                            "are not read", describe_json(*b));
                },
                nullptr)
        .boolean("tie_word_embeddings", &ModelConfig::tie_word_embeddings, false).not_written()
        .common_flag("tie-embeddings")
        .accepted("use_output_norm", "fla's DeltaNet layer has its o_norm whatever this says")
        .only_when(delta);
    for (const char* k : {"attn_mode", "fuse_norm", "fuse_swiglu", "fuse_cross_entropy",
                          "fuse_linear_cross_entropy", "use_l2warp",
                          "_attn_implementation_autoset"})
      t.accepted(k, kFlaKernel);
    // norm_first, in fla's first gated_deltanet and delta_net (until February 2025): false keeps
    // the block's attn_norm and mlp_norm, the layout recur reads; true moved the norms into the
    // layers (the MLP's own norm, none before the mixer), another model with other tensors.
    t.accepted_when("norm_first", [](const json::Value& v) { return v.is_bool() && !v.boolean(); },
                    "false selects the block norms (attn_norm, mlp_norm) recur runs",
                    "fla's early norm-inside-the-layer block, which recur does not run (its "
                    "tensors differ; fla removed the option in February 2025)");
    return t;
  }();
  return s;
}

const model::Schema<GdnConfig>& schema_of(Layout layout) {
  switch (layout) {
    case Layout::kQwen35: return qwen_schema();
    case Layout::kQwen35Text: return qwen_text_only_schema();
    default: return fla_schema();
  }
}

// A multimodal file's tie_word_embeddings at the top level and in text_config must agree.
void check_tie(const json::Value& root, const std::string& source) {
  const json::Value* top = root.find("tie_word_embeddings");
  const json::Value* text = root.find("text_config")->find("tie_word_embeddings");
  if (top && text && top->is_bool() && text->is_bool() && top->boolean() != text->boolean())
    config_fail(source, "tie_word_embeddings is {} but text_config.tie_word_embeddings is {}",
                top->boolean(), text->boolean());
}

// delta_net's head sizes: hidden_size * expand_k (expand_v) split over num_heads, as fla's int()
// of the product and its floor division.
int delta_head(const std::string& source, int hidden, double expand, int heads, const char* what) {
  const double width = std::floor(double(hidden) * expand);
  if (!(width >= 1 && width <= kMaxDim) || int(width) % heads != 0)
    config_fail(source, "hidden_size {} * {} = {} is not num_heads {} heads of one size", hidden,
                what, width, heads);
  return int(width) / heads;
}

// fla's sizes its config gives as ratios, and the layers its attn block makes softmax ones.
void fla_sizes(const std::string& source, ModelConfig& c, GdnConfig& g) {
  if (g.layout == Layout::kFlaDelta) {
    g.n_v_heads = g.n_k_heads;
    g.d_k = delta_head(source, c.hidden_size, g.expand_k, g.n_k_heads, "expand_k");
    g.d_v = delta_head(source, c.hidden_size, g.expand_v, g.n_k_heads, "expand_v");
  } else {
    const double dv = double(g.d_k) * g.expand_v;
    if (std::abs(dv - std::round(dv)) > 1e-5 * dv || dv < 1 || dv > model::kMaxHeadDim)
      config_fail(source, "head_dim {} * expand_v {} = {} is not a whole head size", g.d_k,
                  g.expand_v, dv);
    g.d_v = int(std::round(dv));
  }
  c.mixers.assign(std::size_t(c.num_hidden_layers), MixerKind::kDeltaRule);
  for (const auto& s : g.attn.specs)
    for (const int l : s.layers) c.mixers[std::size_t(l)] = MixerKind::kAttention;
}

}  // namespace

const GdnConfig& config_of(const ModelConfig& c) {
  const auto* g = dynamic_cast<const GdnConfig*>(c.family.get());
  if (!g) throw std::logic_error("[Model] internal: a Gated DeltaNet configuration without its fields");
  return *g;
}

std::string Names::layer(int i) const { return fmt::format("{}layers.{}.", body, i); }

Names names_of(const GdnConfig& g) {
  Names n;
  n.qwen = g.qwen();
  n.body = g.layout == Layout::kQwen35 ? "model.language_model." : "model.";
  n.emb = n.body + (n.qwen ? "embed_tokens.weight" : "embeddings.weight");
  n.final_norm = n.body + "norm.weight";
  n.head = "lm_head.weight";
  return n;
}

void read_config(const std::string& type, const json::Value& root, Fields& f, ModelConfig& c) {
  const std::string& source = f.source();
  GdnConfig g;
  g.layout = type == "qwen3_5"        ? Layout::kQwen35
             : type == "qwen3_5_text" ? Layout::kQwen35Text
             : type == "delta_net"    ? Layout::kFlaDelta
                                      : Layout::kFla;
  c.architecture = g.qwen() ? Architecture::kQwen35 : Architecture::kGatedDeltaNet;
  if (g.layout == Layout::kQwen35) {
    const json::Value* text = root.find("text_config");
    if (!text || !text->is_object())
      config_fail(source, "model_type qwen3_5 without a text_config object");
    check_tie(root, source);
  }
  schema_of(g.layout).read(f, c, g);
  // text_config's end-of-sequence ids count only when the top level gives none (ModelConfig
  // reads those).
  if (g.layout == Layout::kQwen35 && root.find("eos_token_id")) c.eos_token_ids.clear();
  if (!g.qwen()) fla_sizes(source, c, g);
  c.family = std::make_shared<GdnConfig>(g);
}

void resolve(ModelConfig& c, const std::string& source) {
  if (!c.family) config_fail(source, "a Gated DeltaNet configuration without its fields");
  GdnConfig g = config_of(c);
  if (g.n_v_heads % g.n_k_heads != 0)
    config_fail(source, "{} value heads are not a multiple of {} key heads", g.n_v_heads,
                g.n_k_heads);
  if (c.mixers.size() != std::size_t(c.num_hidden_layers))
    config_fail(source, "{} layer types for {} layers", c.mixers.size(), c.num_hidden_layers);
  if (std::int64_t(g.n_k_heads) * g.d_k > kMaxDim || std::int64_t(g.n_v_heads) * g.d_v > kMaxDim)
    config_fail(source, "the Gated DeltaNet widths ({} x {} keys, {} x {} values) are out of range",
                g.n_k_heads, g.d_k, g.n_v_heads, g.d_v);
  if (!g.qwen() && c.intermediate_size == 0) {
    // fla's GatedMLP: 2/3 of hidden_size * hidden_ratio, rounded up to a multiple of 256.
    const double raw = std::floor(double(c.hidden_size) * g.hidden_ratio * 2.0 / 3.0);
    const double width = 256.0 * std::ceil(raw / 256.0);
    if (!(width >= 1 && width <= kMaxDim))
      config_fail(source, "the MLP width from hidden_ratio {} is out of range", g.hidden_ratio);
    c.intermediate_size = int(width);
  }
  model::resolve_hybrid_attention(g.attn, c.hidden_size, c.num_hidden_layers, source);
  if (g.qwen()) {
    if (g.n_heads % g.n_kv_heads != 0)
      config_fail(source, "num_attention_heads {} is not a multiple of num_key_value_heads {}",
                  g.n_heads, g.n_kv_heads);
    if (g.head_dim % 2 != 0 || std::int64_t(g.n_heads) * 2 * g.head_dim > kMaxDim)
      config_fail(source, "head_dim {} with {} heads: expected an even size within range",
                  g.head_dim, g.n_heads);
    const double rot = double(g.head_dim) * g.partial_rotary_factor;
    if (g.rotary_dim() < 2 || g.rotary_dim() % 2 != 0 || std::abs(rot - double(g.rotary_dim())) > 1e-9)
      config_fail(source, "head_dim {} * partial_rotary_factor {} = {}: expected an even number",
                  g.head_dim, g.partial_rotary_factor, rot);
  }
  c.family = std::make_shared<GdnConfig>(g);
}

std::string config_fields(const ModelConfig& c) {
  const GdnConfig& g = config_of(c);
  model::FieldWriter w;
  if (g.layout != Layout::kQwen35Text) {
    schema_of(g.layout).write(w, c, g);
    return w.text();
  }
  // The text model's fields on one line after model_type, as text_config's object without its
  // braces: the model's fingerprint (in every saved state) hashes this text, so it stays as the
  // first text-only models were written.
  w.add("model_type", "\"qwen3_5_text\"");
  model::FieldWriter text;
  qwen_text_schema().write(text, c, g);
  return w.text() + "  " + text.items() + ",\n";
}

std::vector<model::MakeOption> make_model_options() {
  auto out = qwen_schema().make_options({"qwen35"});
  out.push_back({"text-only", nullptr, "the text model's layout (qwen3_5_text) instead of the "
                                       "multimodal one", true, {"qwen35"}});
  for (auto& o : fla_schema().make_options({"gated_deltanet"})) out.push_back(std::move(o));
  return out;
}

std::string make_model_config(const std::string& arch, const model::MakeOptions& o) {
  const bool fla = arch == "gated_deltanet", text_only = !fla && o.flag("text-only");
  const auto& schema = fla ? fla_schema() : text_only ? qwen_text_only_schema() : qwen_schema();
  return fmt::format("{{\"model_type\": \"{}\", {}}}",
                     fla ? "gated_deltanet" : text_only ? "qwen3_5_text" : "qwen3_5",
                     schema.make_fields(o));
}

}  // namespace recur::models::gdn
