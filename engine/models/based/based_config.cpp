// config.json of HazyResearch's Based as its checkpoints publish it (model_type "gpt2" with the
// alt_mixer fields, or "based"): one table of its fields, each mixer spec a table of its own
// checked by its hydra class; the derived sizes and layer schedule. docs/based.md.
#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "model/config_schema.h"
#include "models/based/based.h"

namespace recur::models::based {

using model::checked_dim;
using model::config_fail;
using model::Fields;
using model::kMaxDim;

namespace {

// Why the GPT2Config and flash-attn fields a Based checkpoint carries change nothing recur
// computes.
constexpr const char* kGpt2Head =
    "GPT-2's sequence-summary head (classification), not part of the language model";
constexpr const char* kDropout = "dropout: training only";
constexpr const char* kTrainingCode =
    "initialisation, checkpointing or a fused kernel of the training code: the same function";
constexpr const char* kNoMha =
    "an option of flash-attn's softmax MHA, which no Based layer builds (each layer's mixer is "
    "the BaseConv, LinearAttention or SlidingAttention spec)";
constexpr const char* kTrainingLength =
    "the sequence length the training code allocates for: the recurrent form has no limit";
constexpr const char* kUnknown = "recur does not know what it changes in the model";

// GPT2Config fields that a Based checkpoint carries and that do not change its forward pass.
const std::vector<model::Accepted> kBasedAccepted = {
    {"summary_type", kGpt2Head}, {"summary_use_proj", kGpt2Head},
    {"summary_activation", kGpt2Head}, {"summary_proj_to_labels", kGpt2Head},
    {"summary_first_dropout", kGpt2Head},
    {"n_ctx", "GPT-2's context length: Based has no learned positions (max_position_embeddings 0)"},
    {"n_positions", "GPT-2's context length: Based has no learned positions (max_position_embeddings 0)"},
    {"attn_pdrop", kDropout}, {"embd_pdrop", kDropout}, {"resid_pdrop", kDropout},
    {"special_initializer", kTrainingCode}, {"use_flash_attn", kTrainingCode},
    {"fused_mlp", kTrainingCode}, {"fused_bias_fc", kTrainingCode},
    {"fused_dropout_add_ln", kTrainingCode}, {"fused_dense_sqrelu_dense", kTrainingCode},
    {"mlp_checkpoint_lvl", kTrainingCode},
    {"last_layer_subset", "flash-attn's training shortcut (the last layer on a subset of tokens)"},
    {"eos_token_id", "generation's stop token, read by the common fields"},
    {"bos_token_id", "a special token: recur takes prompts as given"},
    {"fixed_decay", "the layers accept and ignore it as trained (docs/based.md)"},
    {"decay_const", "the layers accept and ignore it as trained (docs/based.md)"},
    {"decay_denom", "the layers accept and ignore it as trained (docs/based.md)"},
    {"scale_attn_weights", kNoMha}, {"reorder_and_upcast_attn", kNoMha},
    {"scale_attn_by_inverse_layer_idx", kNoMha}, {"n_head_kv", kNoMha},
    {"rotary_emb_scale_base", kNoMha}, {"rotary_emb_interleaved", kNoMha}, {"use_alibi", kNoMha},
    {"alibi_bias", kNoMha}};

bool is_true(const json::Value& v) { return v.is_bool() && v.boolean(); }
bool is_false(const json::Value& v) { return v.is_bool() && !v.boolean(); }

// A hydra "_target_" names a class by its module path ("based.models.mixers.convolution.BaseConv"):
// any path to a class of that name is accepted.
std::function<bool(const std::string&)> names_class(std::vector<std::string> classes) {
  return [classes](const std::string& target) {
    const auto dot = target.rfind('.');
    const std::string cls = dot == std::string::npos ? target : target.substr(dot + 1);
    return std::find(classes.begin(), classes.end(), cls) != classes.end();
  };
}

// The hydra classes of the mixer specs, as config.json names them.
constexpr const char* kBaseConv = "based.models.mixers.convolution.BaseConv";
constexpr const char* kLinearAttention = "based.models.mixers.linear_attention.LinearAttention";
constexpr const char* kSlidingAttention = "based.models.mixers.slide_attention.SlidingAttention";

// mixer: BaseConv, the layers in neither list. kernel_sizes (plural) is what the training
// configs say; the published code reads kernel_size (docs/based.md): the kernel is kernel_size,
// else kernel_sizes (resolve()).
const model::Schema<BasedConfig>& conv_schema() {
  static const model::Schema<BasedConfig> s = [] {
    model::Schema<BasedConfig> t;
    t.fixed_when("_target_", kBaseConv, names_class({"BaseConv"}),
                 "expected a BaseConv (the mixer Based's checkpoints use)").required().made_as_written()
        .accepted("l_max", kTrainingLength).written_as("2048")
        .boolean("use_bias", &BasedConfig::conv_bias, true)
        .integer("expand_proj", &BasedConfig::conv_expand, 4, 2, 64)
        .integer("kernel_sizes", &BasedConfig::conv_kernel_sizes, 3, 1, 64)
        .integer("kernel_size", &BasedConfig::conv_kernel, 0, 1, 64).not_written()
        .accepted("implicit_long_conv",
                  "BaseConv's switch to an implicit long convolution: a model built with it has "
                  "other tensors, which loading refuses by name")
        .accepted_when("use_cuda", [](const json::Value& v) { return !is_true(v); },
                       "false selects the convolution the published checkpoints use",
                       "that variant's convolution has a bias and a fused activation that the "
                       "published checkpoints do not use");
    return t;
  }();
  return s;
}

// alt_mixer.feature_map: the Taylor map of the linear-attention layers.
const model::Schema<BasedConfig>& taylor_schema() {
  static const model::Schema<BasedConfig> s = [] {
    model::Schema<BasedConfig> t;
    t.fixed_when("_target_", "based.models.mixers.linear_attention.TaylorExp",
                 names_class({"TaylorExp"}), "expected a TaylorExp (Based's checkpoints use the Taylor map)")
        .required()
        .integer("input_dim", &BasedConfig::taylor_input_dim, 0, 1, 256)
        .accepted("head_dim_idx", "which axis holds the head's features in the training code's "
                                  "tensors: the same map")
        .accepted("temp", "the published layers build TaylorExp with its default; recur computes "
                          "that map (docs/based.md)")
        .accepted("eps", "the published layers build TaylorExp with its default; recur computes "
                         "that map (docs/based.md)");
    return t;
  }();
  return s;
}

// alt_mixer: Taylor linear attention, the layers of alt_mixer_layers.
const model::Schema<BasedConfig>& linear_schema() {
  static const model::Schema<BasedConfig> s = [] {
    model::Schema<BasedConfig> t;
    t.fixed_when("_target_", kLinearAttention, names_class({"LinearAttention"}),
                 "expected a LinearAttention (the mixer Based's checkpoints use)").required()
        .made_as_written()
        .accepted("l_max", kTrainingLength).written_as("2048")
        .object("feature_map", taylor_schema(), kUnknown)
        .integer("feature_dim", &BasedConfig::la_feature_dim, 16, 1, 256)
        .option("feature-dim", "q and k width per linear-attention head", "16")
        .integer("num_heads", &BasedConfig::la_heads, 16, 1, kMaxDim)
        .option("la-heads", "linear-attention heads (default: --heads)",
                [](const ModelConfig&, const BasedConfig& b) { return double(b.window_heads); })
        .integer("num_key_value_heads", &BasedConfig::la_kv_heads, 0, 1, kMaxDim).not_written()
        .accepted("parallel_implementation", "which parallel kernel training uses: the same function")
        .accepted("eps", "the denominator's eps: the published layers keep their default, 1e-12, "
                         "which recur uses (docs/based.md)")
        .accepted("causal", "a language model's layers are causal: recur runs the causal form")
        .accepted("train_view", "the training code's tensor layout: the same function")
        .accepted("feature_name", "a label of the feature map for the training code's logs")
        .accepted("mem_save", kTrainingCode);
    return t;
  }();
  return s;
}

// alt_mixer_2: sliding-window attention, the layers of alt_mixer_2_layers, with n_head heads.
const model::Schema<BasedConfig>& window_schema() {
  static const model::Schema<BasedConfig> s = [] {
    model::Schema<BasedConfig> t;
    t.fixed_when("_target_", kSlidingAttention, names_class({"SlidingAttention"}),
                 "expected a SlidingAttention (the mixer Based's checkpoints use)").required()
        .made_as_written()
        .integer("window_size", &BasedConfig::window_size, 256, 1, 1 << 24)
        .option("window-size", "window_size (a token sees window_size / 2 before it)", "16")
        .integer("num_heads", &BasedConfig::window_spec_heads, 0, 1, kMaxDim)
        .common_option("heads")  // the published code's window heads are n_head's
        .fixed_json("causal", "true", "Based's windows are causal")
        .accepted("l_max", kTrainingLength)
        .accepted("do_update", kTrainingCode)
        .accepted("dropout", kDropout);
    return t;
  }();
  return s;
}

}  // namespace

// The published checkpoints' layout: a GPT2Config with Based's mixer specs, its every field
// once, in the order config.json is written. What all of Based's checkpoints have (RMSNorm, a
// SwiGLU MLP, tied embeddings, rotary over the whole head, no biases) is checked.
const model::Schema<BasedConfig>& gpt2_schema() {
  static const model::Schema<BasedConfig> s = [] {
    model::Schema<BasedConfig> t;
    t.written("model_type", "\"gpt2\"")
        .written("architectures", "[\"GPTLMHeadModel\"]")
        // The hydra class name Based's training configs write at the top level: a GPT-2 config
        // class, which the fields below describe; any other class would mean other fields.
        .fixed_when("_target_", "based.models.gpt.GPT2MixerConfig",
                    names_class({"GPT2MixerConfig", "GPT2Config"}),
                    "expected based.models.gpt.GPT2MixerConfig (or transformers' GPT2Config): "
                    "recur reads Based's GPT-2 config fields").not_written()
        .integer("vocab_size", &ModelConfig::vocab_size, 50257, 1, 1 << 24).common_option("vocab")
        .integer("n_embd", &ModelConfig::hidden_size, 768, 1, kMaxDim).common_option("hidden")
        .integer("n_inner", &ModelConfig::intermediate_size, 0, 1, kMaxDim)
        .common_option("intermediate", true)
        .integer("n_layer", &ModelConfig::num_hidden_layers, 12, 1, 4096).common_option("layers")
        .integer("n_head", &BasedConfig::window_heads, 12, 1, kMaxDim).common_option("heads")
        .number("layer_norm_epsilon", &ModelConfig::norm_eps, 1e-5, 0.0, 1.0)
        .number("rotary_emb_base", &BasedConfig::rope_theta, 10000, 1.0, 1e12)
        .fixed_json("rotary_emb_fraction", "1", "only rotary over the whole head is supported")
        .fixed_json("max_position_embeddings", "0", "Based has no learned position embedding")
        .integer("pad_vocab_size_multiple", &BasedConfig::pad_vocab_multiple, 1, 1, 1 << 16)
        .made_as("8")  // the published embedding's padding
        .fixed_json("rms_norm", "true", "Based's blocks use RMSNorm").required().made_as_written()
        .fixed("activation_function", "swiglu", "Based's MLP is swiglu").required().made_as_written()
        .accepted("residual_in_fp32", "recur's residual stream is float32 whatever it says")
        .written_as("true")
        .layers("alt_mixer_layers", &BasedConfig::linear_layers, "n_layer")
        .option("la-layers", "the Taylor linear-attention layers, e.g. 1,6 (alt_mixer_layers)")
        .layers("alt_mixer_2_layers", &BasedConfig::window_layers, "n_layer")
        .option("window-layers", "the sliding-window layers, e.g. 2,7 (alt_mixer_2_layers)")
        .object("mixer", conv_schema(), kUnknown)
        .object("alt_mixer", linear_schema(), kUnknown)
        .object("alt_mixer_2", window_schema(), kUnknown)
        .accepted_when("tie_word_embeddings", is_true, "true: Based ties its head to the embedding",
                       "Based ties its head to the embedding")
        .accepted_when("rotary_emb_dim", [](const json::Value& v) { return v.is_integer() && v.integer() == 0; },
                       "0: the rotary width follows rotary_emb_fraction",
                       "Based derives it from rotary_emb_fraction")
        // flash-attn's block options: the released models are pre-norm, one branch after the other.
        .accepted_when("prenorm", is_true, "true selects the pre-norm block recur runs",
                       "flash-attn's post-norm block, which no released Based uses");
    for (const char* key : {"parallel_block", "parallel_block_tied_norm"})
      t.accepted_when(key, is_false, "false selects the sequential block recur runs",
                      "flash-attn's parallel block (mixer and MLP side by side), which no released "
                      "Based uses");
    for (const char* bias : {"mlp_fc1_bias", "mlp_fc2_bias", "qkv_proj_bias", "out_proj_bias"})
      t.accepted_when(bias, is_false, "false: Based's checkpoints have no such bias",
                      "Based's checkpoints have no such bias");
    for (const model::Accepted& a : kBasedAccepted) t.accepted(a.key, a.reason);
    return t;
  }();
  return s;
}

const BasedConfig& config_of(const ModelConfig& c) {
  const auto* b = dynamic_cast<const BasedConfig*>(c.family.get());
  if (!b) throw std::logic_error("[Model] internal: a Based configuration without its fields");
  return *b;
}

// Based's fields (model_type "gpt2" with alt_mixer, as the published checkpoints have them, or
// "based"), by its table; then what spans fields: each layer's mixer is given.
void read_config(Fields& f, ModelConfig& c) {
  const std::string& source = f.source();
  BasedConfig b;
  c.architecture = Architecture::kBased;
  gpt2_schema().read(f, c, b);
  for (const int l : b.linear_layers)
    if (std::find(b.window_layers.begin(), b.window_layers.end(), l) != b.window_layers.end())
      config_fail(source, "layer {} is in both alt_mixer_layers and alt_mixer_2_layers", l);
  if (!f.get("mixer") && b.linear_layers.size() + b.window_layers.size() < std::size_t(c.num_hidden_layers))
    config_fail(source, "mixer is missing: the layers not in alt_mixer_layers or alt_mixer_2_layers need it");
  if (!f.get("alt_mixer") && !b.linear_layers.empty())
    config_fail(source, "alt_mixer is missing but alt_mixer_layers is set");
  if (!f.get("alt_mixer_2") && !b.window_layers.empty())
    config_fail(source, "alt_mixer_2 is missing but alt_mixer_2_layers is set");
  c.family = std::make_shared<BasedConfig>(std::move(b));
}

// Based's derived sizes and its layer schedule.
void resolve(ModelConfig& c, const std::string& source) {
  // A configuration built in code without Based's fields takes their defaults.
  const auto* given = dynamic_cast<const BasedConfig*>(c.family.get());
  if (c.family && !given)
    config_fail(source, "a Based configuration holds another family's fields");
  BasedConfig b = given ? *given : BasedConfig{};
  const int d = c.hidden_size;
  if (b.window_heads < 1 || d % b.window_heads != 0 || (d / b.window_heads) % 2 != 0)
    config_fail(source, "n_embd {} is not n_head {} heads of an even width (rotary turns pairs)", d,
         b.window_heads);
  if (b.la_heads < 1 || d % b.la_heads != 0)
    config_fail(source, "n_embd {} is not a multiple of alt_mixer.num_heads {}", d, b.la_heads);
  if (b.la_feature_dim < 1 || b.la_feature_dim > 256)
    config_fail(source, "alt_mixer.feature_dim is {}, expected 1 to 256", b.la_feature_dim);
  // The copies of a size that config.json may give twice must agree (0: not given); they are
  // written as the size they copy.
  if (b.la_kv_heads != 0 && b.la_kv_heads != b.la_heads)
    config_fail(source, "alt_mixer.num_key_value_heads {} differs from num_heads {}; Based's "
                        "layers have as many", b.la_kv_heads, b.la_heads);
  if (b.taylor_input_dim != 0 && b.taylor_input_dim != b.la_feature_dim)
    config_fail(source, "alt_mixer.feature_map.input_dim {} differs from alt_mixer.feature_dim {}",
                b.taylor_input_dim, b.la_feature_dim);
  if (b.window_spec_heads != 0 && b.window_spec_heads != b.window_heads)
    config_fail(source, "alt_mixer_2.num_heads {} differs from n_head {}; the published code uses "
                        "n_head", b.window_spec_heads, b.window_heads);
  b.la_kv_heads = b.la_heads;
  b.taylor_input_dim = b.la_feature_dim;
  b.window_spec_heads = b.window_heads;
  if (b.conv_kernel == 0) b.conv_kernel = b.conv_kernel_sizes;  // kernel_size, else kernel_sizes
  b.conv_kernel_sizes = b.conv_kernel;
  if (b.conv_expand % 2 != 0)
    config_fail(source, "mixer.expand_proj is {}, expected an even number", b.conv_expand);
  if (b.conv_expand < 2 || b.conv_expand % 2 != 0 || b.conv_kernel < 1 || b.window_size < 1 ||
      b.pad_vocab_multiple < 1)
    config_fail(source, "mixer.expand_proj {} (even, >= 2), kernel size {}, window_size {} and "
                 "pad_vocab_size_multiple {} must be positive", b.conv_expand, b.conv_kernel,
         b.window_size, b.pad_vocab_multiple);
  for (const auto* list : {&b.linear_layers, &b.window_layers})
    for (const int l : *list)
      if (l < 0 || l >= c.num_hidden_layers)
        config_fail(source, "layer index {} is outside 0 to n_layer - 1 = {}", l, c.num_hidden_layers - 1);
  c.mixers.assign(std::size_t(c.num_hidden_layers), MixerKind::kShortConv);
  for (const int l : b.linear_layers) c.mixers[std::size_t(l)] = MixerKind::kLinearAttention;
  for (const int l : b.window_layers) c.mixers[std::size_t(l)] = MixerKind::kWindowAttention;
  if (c.intermediate_size == 0)  // GatedMlp: n_inner, else 8/3 of the width
    c.intermediate_size = checked_dim(source, "8/3 n_embd", std::floor(8.0 * d / 3.0));
  // GatedMlp rounds the width up to a multiple of 256, whatever n_inner says.
  c.intermediate_size = checked_dim(source, "n_inner rounded up to 256",
                                    256.0 * std::ceil(double(c.intermediate_size) / 256.0));
  b.embedding_rows = checked_dim(source, "vocab_size rounded up to pad_vocab_size_multiple",
                                 double(b.pad_vocab_multiple) *
                                     std::ceil(double(c.vocab_size) / double(b.pad_vocab_multiple)));
  b.key_dim = b.la_heads * b.la_feature_dim;
  c.tie_word_embeddings = true;
  c.family = std::make_shared<BasedConfig>(std::move(b));
}

std::string config_fields(const ModelConfig& c) {
  model::FieldWriter w;
  gpt2_schema().write(w, c, config_of(c));
  return w.text();
}

}  // namespace recur::models::based
