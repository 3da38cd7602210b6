// The Gated DeltaNet models' configuration: Qwen3.5's config.json (transformers'
// Qwen3_5Config: the text model's fields inside text_config, or a text-only Qwen3_5TextConfig),
// and fla's gated_deltanet config (fla/models/gated_deltanet). The tensors of each layout
// (docs/qwen35.md, "Tensors") are named where gdn.cpp reads them.
#include <fmt/format.h>

#include <cmath>
#include <stdexcept>

#include "models/gdn/gdn.h"
#include "recur/error.h"

namespace recur::models::gdn {

using model::config_fail;
using model::describe_json;
using model::Fields;
using model::kMaxDim;
using Layout = GdnConfig::Layout;

namespace {

constexpr int kMaxHeads = 1 << 16;

// text_config's fields that change nothing recur computes, each with its reason.
constexpr const char* kQwenIdentity = "names the checkpoint or its saved dtype: bookkeeping";
constexpr const char* kQwenTraining = "training or caching only: the same function at inference";
constexpr const char* kQwenMtp =
    "the multi-token-prediction head, used for speculative decoding; its tensors are skipped by "
    "name and the next-token logits do not use it";
const std::vector<model::Accepted> kQwenAccepted = {
    {"model_type", kQwenIdentity}, {"dtype", kQwenIdentity}, {"torch_dtype", kQwenIdentity},
    {"transformers_version", kQwenIdentity}, {"_name_or_path", kQwenIdentity},
    {"architectures", kQwenIdentity},
    {"bos_token_id", "a special token: recur takes prompts as given"},
    {"pad_token_id", "the padding token of batched training: recur pads nothing"},
    {"initializer_range", kQwenTraining}, {"use_cache", kQwenTraining},
    {"attention_dropout", kQwenTraining},
    {"output_router_logits", "returns the MoE router's logits for its training loss"},
    {"mtp_num_hidden_layers", kQwenMtp}, {"mtp_use_dedicated_embeddings", kQwenMtp},
    {"mamba_ssm_dtype", "the recurrent state's dtype in other engines; recur's is float32 "
                        "whatever it says"}};

// mlp_only_layers (transformers' Qwen3-Next / Qwen3.5-MoE): the layers that keep a dense MLP
// where the others have experts. Every published dense Qwen3.5 carries an empty list: no layer
// is an exception, and a dense model has no experts anyway. A non-empty list belongs to a MoE
// configuration, whose experts recur does not run.
void accept_mlp_only_layers(Fields& t) {
  t.accept_when(
      "mlp_only_layers", [](const json::Value& v) { return v.is_array() && v.array().empty(); },
      "empty: no layer is an exception to the dense MLP every layer of a dense Qwen3.5 has",
      "the layers that keep a dense MLP in a mixture-of-experts model; recur runs dense Qwen3.5, "
      "where the list is empty");
}

// Qwen's rope: theta and the rotary fraction from rope_parameters (transformers 5) or
// rope_scaling / the top-level fields (older files). Text-only positions make the multimodal
// sections (mrope_section, mrope_interleaved) one ordinary rotary: every section turns by the
// same position.
void read_rope(Fields& t, const std::string& source, GdnConfig& g) {
  g.rope_theta = t.number("rope_theta", 10000000, 1.0 + 1e-9, 1e12);
  g.partial_rotary_factor = t.number("partial_rotary_factor", 0.25, 1e-9, 1.0);
  for (const char* key : {"rope_parameters", "rope_scaling"}) {
    const json::Value* rp = t.get(key);
    if (!rp) continue;
    if (!rp->is_object()) config_fail(source, "text_config.{} is {}, expected an object", key, describe_json(*rp));
    Fields r(*rp, source, std::string("text_config.") + key);
    std::string type = r.string("rope_type", "");
    if (type.empty()) type = r.string("type", "default");
    if (type != "default" && type != "mrope")
      config_fail(source, "text_config.{}.rope_type is '{}': recur runs Qwen3.5's default rotary "
                          "(no scaling)", key, type);
    g.rope_theta = r.number("rope_theta", g.rope_theta, 1.0 + 1e-9, 1e12);
    g.partial_rotary_factor = r.number("partial_rotary_factor", g.partial_rotary_factor, 1e-9, 1.0);
    r.accept({{"mrope_section", "the multimodal rotary's split of the angles over time, height and "
                                "width; text positions turn every section by the same position"},
              {"mrope_interleaved", "how those sections are laid out: for text positions every "
                                    "layout gives the same angles"}});
    r.reject_unknown("recur does not know what it changes in the rotary embedding");
  }
}

// layer_types, or the schedule its absence means: full attention every
// full_attention_interval-th layer (the last of each group).
void read_layer_types(Fields& t, const std::string& source, ModelConfig& c) {
  const int interval = t.integer("full_attention_interval", 4, 1, 4096);
  c.mixers.clear();
  if (const json::Value* lt = t.get("layer_types")) {
    if (!lt->is_array() || lt->array().size() != std::size_t(c.num_hidden_layers))
      config_fail(source, "{} is {}, expected {} entries (num_hidden_layers)", t.name("layer_types"),
                  describe_json(*lt), c.num_hidden_layers);
    for (const auto& v : lt->array()) {
      if (v.is_string() && v.string() == "linear_attention") c.mixers.push_back(MixerKind::kDeltaRule);
      else if (v.is_string() && v.string() == "full_attention") c.mixers.push_back(MixerKind::kAttention);
      else
        config_fail(source, "{} holds {}, expected linear_attention or full_attention",
                    t.name("layer_types"), describe_json(v));
    }
  } else {
    for (int i = 0; i < c.num_hidden_layers; ++i)
      c.mixers.push_back((i + 1) % interval ? MixerKind::kDeltaRule : MixerKind::kAttention);
  }
}

void read_qwen(const std::string& type, const json::Value& root, Fields& top, ModelConfig& c,
               GdnConfig& g) {
  const std::string& source = top.source();
  const json::Value* text = &root;
  std::string owner;
  bool tie_top = false, has_tie_top = false;
  if (type == "qwen3_5") {
    g.layout = Layout::kQwen35;
    text = top.get("text_config");
    if (!text || !text->is_object())
      config_fail(source, "model_type qwen3_5 without a text_config object");
    owner = "text_config";
    // The vision tower's settings: its tensors are skipped by name, text runs without it.
    for (const char* k : {"vision_config", "image_token_id", "video_token_id",
                          "vision_start_token_id", "vision_end_token_id", "video_start_token_id",
                          "video_end_token_id"})
      top.accept(k, "the vision tower's settings: its tensors are skipped, text runs without it");
    if (root.find("tie_word_embeddings")) {
      has_tie_top = true;
      tie_top = top.boolean("tie_word_embeddings", false);
    }
  } else {
    g.layout = Layout::kQwen35Text;
  }
  Fields own(*text, source, owner);
  Fields& t = type == "qwen3_5" ? own : top;
  c.vocab_size = t.integer("vocab_size", 248320, 1, 1 << 24);
  c.hidden_size = t.integer("hidden_size", 4096, 1, kMaxDim);
  c.intermediate_size = t.integer("intermediate_size", 12288, 1, kMaxDim);
  c.num_hidden_layers = t.integer("num_hidden_layers", 32, 1, 4096);
  g.n_heads = t.integer("num_attention_heads", 16, 1, kMaxHeads);
  g.n_kv_heads = t.integer("num_key_value_heads", 4, 1, kMaxHeads);
  g.head_dim = t.integer("head_dim", 256, 2, model::kMaxHeadDim);
  c.norm_eps = t.number("rms_norm_eps", 1e-6, 0.0, 1.0);
  g.max_position_embeddings = t.integer("max_position_embeddings", 32768, 0, 1 << 30);
  g.conv_size = t.integer("linear_conv_kernel_dim", 4, 1, 64);
  g.d_k = t.integer("linear_key_head_dim", 128, 1, model::kMaxHeadDim);
  g.d_v = t.integer("linear_value_head_dim", 128, 1, model::kMaxHeadDim);
  g.n_k_heads = t.integer("linear_num_key_heads", 16, 1, kMaxHeads);
  g.n_v_heads = t.integer("linear_num_value_heads", 32, 1, kMaxHeads);
  const bool tie_text = t.boolean("tie_word_embeddings", false);
  if (has_tie_top && root.find("text_config")->find("tie_word_embeddings") && tie_text != tie_top)
    config_fail(source, "tie_word_embeddings is {} but text_config.tie_word_embeddings is {}",
                tie_top, tie_text);
  c.tie_word_embeddings = has_tie_top ? tie_top : tie_text;
  const std::string act = t.string("hidden_act", "silu");
  if (act != "silu" && act != "swish")
    config_fail(source, "{} is '{}': Qwen3.5's MLP and convolution use silu", t.name("hidden_act"), act);
  if (t.boolean("attention_bias", false))
    config_fail(source, "{} is true: no Qwen3.5 has biases in its attention projections",
                t.name("attention_bias"));
  if (!t.boolean("attn_output_gate", true))
    config_fail(source, "{} is false: Qwen3.5's attention always has its output gate",
                t.name("attn_output_gate"));
  read_rope(t, source, g);
  read_layer_types(t, source, c);
  accept_mlp_only_layers(t);
  // The text model's end-of-sequence ids, when the file's top level gives none.
  if (type == "qwen3_5") {
    if (const json::Value* eos = t.get("eos_token_id"); eos && !root.find("eos_token_id")) {
      const auto add = [&](const json::Value& v) {
        if (!v.is_integer() || v.integer() < 0 || v.integer() >= c.vocab_size)
          config_fail(source, "text_config.eos_token_id holds {}, expected ids below vocab_size {}",
                      describe_json(v), c.vocab_size);
        c.eos_token_ids.push_back(int(v.integer()));
      };
      if (eos->is_array()) {
        for (const auto& v : eos->array()) add(v);
      } else {
        add(*eos);
      }
    }
    own.accept(kQwenAccepted);
    own.reject_unknown("recur does not know what it changes in the model, so it will not guess");
  } else {
    // The text-only file: the common fields are accepted by the caller, these are Qwen's own.
    for (const model::Accepted& a : kQwenAccepted) top.accept(a.key, a.reason);
  }
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

void read_fla(const std::string& type, const json::Value& root, Fields& f, ModelConfig& c,
              GdnConfig& g) {
  const std::string& source = f.source();
  const bool delta = type == "delta_net";
  g.layout = delta ? Layout::kFlaDelta : Layout::kFla;
  c.vocab_size = f.integer("vocab_size", 32000, 1, 1 << 24);
  c.hidden_size = f.integer("hidden_size", 2048, 1, kMaxDim);
  c.num_hidden_layers = f.integer("num_hidden_layers", 21, 1, 4096);
  c.tie_word_embeddings = f.boolean("tie_word_embeddings", false);
  c.norm_eps = f.number("norm_eps", 1e-6, 0.0, 1.0);
  c.intermediate_size = f.integer("intermediate_size", 0, 1, kMaxDim);
  g.hidden_ratio = f.number("hidden_ratio", 4, 1e-6, 1e6);
  g.expand_v = f.number("expand_v", delta ? 1 : 2, 1e-6, 1e6);
  if (delta) {
    g.expand_k = f.number("expand_k", 1, 1e-6, 1e6);
    g.n_k_heads = g.n_v_heads = f.integer("num_heads", 16, 1, kMaxHeads);
    g.d_k = delta_head(source, c.hidden_size, g.expand_k, g.n_k_heads, "expand_k");
    g.d_v = delta_head(source, c.hidden_size, g.expand_v, g.n_k_heads, "expand_v");
    g.use_beta = f.boolean("use_beta", true);
    f.accept("use_output_norm", "fla's DeltaNet layer has its o_norm whatever this says");
    const std::string act = f.string("qk_activation", "silu");
    if (act == "silu") g.qk_activation = GdnConfig::QkActivation::kSilu;
    else if (act == "relu") g.qk_activation = GdnConfig::QkActivation::kRelu;
    else if (act == "elu") g.qk_activation = GdnConfig::QkActivation::kElu;
    else if (act == "identity") g.qk_activation = GdnConfig::QkActivation::kIdentity;
    else config_fail(source, "qk_activation is '{}', expected silu, relu, elu or identity", act);
    const std::string norm = f.string("qk_norm", "l2");
    if (norm != "l2" && norm != "sum")
      config_fail(source, "qk_norm is '{}', expected l2 or sum", norm);
    g.qk_sum_norm = norm == "sum";
  } else {
    g.d_k = f.integer("head_dim", 256, 1, model::kMaxHeadDim);
    g.n_k_heads = f.integer("num_heads", 6, 1, kMaxHeads);
    g.n_v_heads = f.integer("num_v_heads", g.n_k_heads, 1, kMaxHeads);
  }
  g.use_gate = f.boolean("use_gate", !delta);
  g.use_conv = f.boolean("use_short_conv", true);
  g.allow_neg_eigval = f.boolean("allow_neg_eigval", false);
  g.conv_size = f.integer("conv_size", 4, 1, 64);
  g.max_position_embeddings = f.integer("max_position_embeddings", 2048, 0, 1 << 30);
  const std::string act = f.string("hidden_act", "swish");
  if (act != "swish" && act != "silu")
    config_fail(source, "hidden_act is '{}': fla's GatedMLP here is swish", act);
  if (const json::Value* attn = f.get("attn"))
    g.attn = model::read_hybrid_attention(*attn, source, c.num_hidden_layers);
  if (const json::Value* b = f.get("attnres_block_size"))
    config_fail(source, "attnres_block_size is {}: fla's attention residuals are not read",
                describe_json(*b));
  // fla's kernel choices and fused training ops: the same model.
  for (const char* k : {"attn_mode", "fuse_norm", "fuse_swiglu", "fuse_cross_entropy",
                        "fuse_linear_cross_entropy", "use_l2warp", "_attn_implementation_autoset"})
    f.accept(k, "a kernel choice or fused training op of fla: the same function");
  // norm_first, in fla's first gated_deltanet and delta_net (until February 2025): false keeps
  // the block's attn_norm and mlp_norm, the layout recur reads; true moved the norms into the
  // layers (the MLP's own norm, none before the mixer), another model with other tensors.
  f.accept_when("norm_first", [](const json::Value& v) { return v.is_bool() && !v.boolean(); },
                "false selects the block norms (attn_norm, mlp_norm) recur runs",
                "fla's early norm-inside-the-layer block, which recur does not run (its "
                "tensors differ; fla removed the option in February 2025)");
  (void)root;
  if (!delta) {
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
  GdnConfig g;
  if (type == "gated_deltanet" || type == "delta_net") {
    c.architecture = Architecture::kGatedDeltaNet;
    read_fla(type, root, f, c, g);
  } else {
    c.architecture = Architecture::kQwen35;
    read_qwen(type, root, f, c, g);
  }
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
  if (!g.qwen()) {
    const bool delta = g.layout == Layout::kFlaDelta;
    w.add("model_type", delta ? "\"delta_net\"" : "\"gated_deltanet\"");
    w.number("vocab_size", c.vocab_size);
    w.number("hidden_size", c.hidden_size);
    w.number("num_hidden_layers", c.num_hidden_layers);
    w.number("num_heads", g.n_k_heads);
    if (delta) {
      static const char* const kActs[] = {"silu", "relu", "elu", "identity"};
      w.number("expand_k", g.expand_k);
      w.boolean("use_beta", g.use_beta);
      w.string("qk_activation", kActs[int(g.qk_activation)]);
      w.add("qk_norm", g.qk_sum_norm ? "\"sum\"" : "\"l2\"");
    } else {
      w.number("num_v_heads", g.n_v_heads);
      w.number("head_dim", g.d_k);
    }
    w.number("expand_v", g.expand_v);
    w.number("intermediate_size", c.intermediate_size);
    w.number("hidden_ratio", g.hidden_ratio);
    w.add("hidden_act", "\"swish\"");
    w.number("norm_eps", c.norm_eps);
    w.boolean("use_gate", g.use_gate);
    w.boolean("use_short_conv", g.use_conv);
    w.boolean("allow_neg_eigval", g.allow_neg_eigval);
    w.number("conv_size", g.conv_size);
    w.number("max_position_embeddings", g.max_position_embeddings);
    if (!g.attn.specs.empty()) model::write_hybrid_attention(w, g.attn);
    return w.text();
  }
  // The text model's fields as one JSON object on one line.
  using model::config_number;
  std::string text = "{";
  const auto put = [&](const char* key, const std::string& value) {
    text += fmt::format("{}\"{}\": {}", text.size() > 1 ? ", " : "", key, value);
  };
  put("vocab_size", config_number(c.vocab_size));
  put("hidden_size", config_number(c.hidden_size));
  put("intermediate_size", config_number(c.intermediate_size));
  put("num_hidden_layers", config_number(c.num_hidden_layers));
  put("num_attention_heads", config_number(g.n_heads));
  put("num_key_value_heads", config_number(g.n_kv_heads));
  put("head_dim", config_number(g.head_dim));
  put("hidden_act", "\"silu\"");
  put("rms_norm_eps", config_number(c.norm_eps));
  put("max_position_embeddings", config_number(g.max_position_embeddings));
  put("linear_conv_kernel_dim", config_number(g.conv_size));
  put("linear_key_head_dim", config_number(g.d_k));
  put("linear_value_head_dim", config_number(g.d_v));
  put("linear_num_key_heads", config_number(g.n_k_heads));
  put("linear_num_value_heads", config_number(g.n_v_heads));
  std::string types = "[";
  for (std::size_t i = 0; i < c.mixers.size(); ++i)
    types += fmt::format("{}\"{}\"", i ? ", " : "",
                         c.mixers[i] == MixerKind::kAttention ? "full_attention" : "linear_attention");
  put("layer_types", types + "]");
  put("rope_parameters", fmt::format("{{\"rope_type\": \"default\", \"rope_theta\": {}, "
                                     "\"partial_rotary_factor\": {}}}",
                                     config_number(g.rope_theta),
                                     config_number(g.partial_rotary_factor)));
  text += "}";
  if (g.layout == Layout::kQwen35Text) {
    w.add("model_type", "\"qwen3_5_text\"");
    // The text model's fields at the top level: the same object without its braces, one line.
    return w.text() + "  " + text.substr(1, text.size() - 2) + ",\n";
  }
  w.add("model_type", "\"qwen3_5\"");
  w.add("architectures", "[\"Qwen3_5ForConditionalGeneration\"]");
  w.add("text_config", text);
  return w.text();
}

}  // namespace recur::models::gdn
