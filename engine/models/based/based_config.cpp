// config.json of HazyResearch's Based as its checkpoints publish it (model_type "gpt2" with the
// alt_mixer fields, or "based"): read field by field, each mixer spec by its hydra class; the
// derived sizes and layer schedule; the lines make-model writes. docs/based.md.
#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>
#include <stdexcept>
#include <utility>

#include "models/based/based.h"

namespace recur::models::based {

using model::checked_dim;
using model::config_fail;
using model::Fields;
using model::kMaxDim;

namespace {

// The class a Based mixer spec names (its hydra "_target_", e.g.
// "based.models.mixers.convolution.BaseConv"): the part after the last dot.
std::string target_class(const json::Value& spec) {
  const json::Value* t = spec.find("_target_");
  if (!t || !t->is_string()) return "";
  const std::string& s = t->string();
  const auto dot = s.rfind('.');
  return dot == std::string::npos ? s : s.substr(dot + 1);
}

std::vector<int> layer_list(Fields& f, const std::string& source, const char* name, int n_layers) {
  std::vector<int> out;
  const json::Value* v = f.get(name);
  if (!v) return out;
  if (!v->is_array()) config_fail(source, "{} is {}, expected a list of layer indices", name, v->kind_name());
  for (const auto& e : v->array()) {
    if (!e.is_integer() || e.integer() < 0 || e.integer() >= n_layers)
      config_fail(source, "{} holds {}, expected layer indices 0 to n_layer - 1 = {}", name,
           e.is_number() ? fmt::format("{}", e.number()) : e.kind_name(), n_layers - 1);
    if (std::find(out.begin(), out.end(), static_cast<int>(e.integer())) != out.end())
      config_fail(source, "{} names layer {} twice", name, e.integer());
    out.push_back(static_cast<int>(e.integer()));
  }
  return out;
}

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
    {"residual_in_fp32", "recur's residual stream is float32 whatever it says"},
    {"eos_token_id", "generation's stop token, read by the common fields"},
    {"bos_token_id", "a special token: recur takes prompts as given"},
    {"fixed_decay", "the layers accept and ignore it as trained (docs/based.md)"},
    {"decay_const", "the layers accept and ignore it as trained (docs/based.md)"},
    {"decay_denom", "the layers accept and ignore it as trained (docs/based.md)"},
    {"scale_attn_weights", kNoMha}, {"reorder_and_upcast_attn", kNoMha},
    {"scale_attn_by_inverse_layer_idx", kNoMha}, {"n_head_kv", kNoMha},
    {"rotary_emb_scale_base", kNoMha}, {"rotary_emb_interleaved", kNoMha}, {"use_alibi", kNoMha},
    {"alibi_bias", kNoMha}};

// A mixer spec of Based's config (mixer, alt_mixer, alt_mixer_2), read field by field: each
// names its hydra class, and a field recur does not know is refused by name.
class MixerSpecs {
 public:
  explicit MixerSpecs(Fields& f) : f_(f), source_(f.source()) {}
  // The spec `name`, or null when absent; its class must be `expected`.
  const json::Value* spec(const char* name, const char* expected) {
    const json::Value* v = f_.get(name);
    if (!v) return nullptr;
    if (!v->is_object()) config_fail(source_, "{} is {}, expected an object", name, v->kind_name());
    const std::string cls = target_class(*v);
    if (cls != expected)
      config_fail(source_, "{}._target_ names '{}', expected a {} (the mixer Based's checkpoints use)",
           name, cls, expected);
    return v;
  }
  // A field of a spec (which may be null), or null when absent or null.
  static const json::Value* sub(const json::Value* v, const char* name) {
    const json::Value* x = v ? v->find(name) : nullptr;
    return x && !x->is_null() ? x : nullptr;
  }
  int int_in(const json::Value* v, const char* owner, const char* name, int fallback, int lo,
             int hi) const {
    const json::Value* x = sub(v, name);
    if (!x) return fallback;
    if (!x->is_integer() || x->integer() < lo || x->integer() > hi)
      config_fail(source_, "{}.{} is {}, expected an integer in {} to {}", owner, name,
           x->is_number() ? fmt::format("{}", x->number()) : x->kind_name(), lo, hi);
    return static_cast<int>(x->integer());
  }
  // Refuses a field of `v` not in `keys`.
  void known(const json::Value* v, const char* owner, std::initializer_list<const char*> keys) const {
    if (!v) return;
    for (const auto& [key, value] : v->object()) {
      (void)value;
      bool ok = false;
      for (const char* k : keys) ok = ok || key == k;
      if (!ok)
        config_fail(source_, "unknown field '{}.{}': recur does not know what it changes in the model",
             owner, key);
    }
  }
  const std::string& source() const { return source_; }

 private:
  Fields& f_;
  const std::string& source_;
};

// The GPT-2 config's own fields: the sizes, and what Based's checkpoints all have (RMSNorm, a
// SwiGLU MLP, tied embeddings, rotary over the whole head, no biases), refused otherwise.
void read_gpt2_fields(const json::Value& root, Fields& f, ModelConfig& c, BasedConfig& b) {
  const std::string& source = f.source();
  constexpr int kMax = kMaxDim;
  // The hydra class name Based's training configs write at the top level: a GPT-2 config class,
  // which the fields below describe; any other class would mean other fields.
  if (const json::Value* t = f.get("_target_")) {
    if (!t->is_string()) config_fail(source, "_target_ is {}, expected a class name", t->kind_name());
    const std::string cls = target_class(root);
    if (cls != "GPT2MixerConfig" && cls != "GPT2Config")
      config_fail(source, "_target_ names '{}', expected based.models.gpt.GPT2MixerConfig (or "
                   "transformers' GPT2Config): recur reads Based's GPT-2 config fields", cls);
  }
  c.hidden_size = f.integer("n_embd", 768, 1, kMax);
  c.num_hidden_layers = f.integer("n_layer", 12, 1, 4096);
  b.window_heads = f.integer("n_head", 12, 1, kMax);
  c.vocab_size = f.integer("vocab_size", 50257, 1, 1 << 24);
  c.intermediate_size = f.integer("n_inner", 0, 1, kMax);
  c.norm_eps = f.number("layer_norm_epsilon", 1e-5, 0.0, 1.0);
  b.rope_theta = f.number("rotary_emb_base", 10000, 1.0, 1e12);
  b.pad_vocab_multiple = f.integer("pad_vocab_size_multiple", 1, 1, 1 << 16);
  c.tie_word_embeddings = f.boolean("tie_word_embeddings", true);
  if (!c.tie_word_embeddings)
    config_fail(source, "tie_word_embeddings is false; Based ties its head to the embedding");
  if (!f.boolean("rms_norm", false))
    config_fail(source, "rms_norm is not true; Based's blocks use RMSNorm");
  const std::string act = f.string("activation_function", "gelu_new");
  if (act != "swiglu") config_fail(source, "activation_function is '{}'; Based's MLP is swiglu", act);
  for (const char* bias : {"mlp_fc1_bias", "mlp_fc2_bias", "qkv_proj_bias", "out_proj_bias"})
    if (f.boolean(bias, false)) config_fail(source, "{} is true; Based's checkpoints have no such bias", bias);
  if (f.number("rotary_emb_fraction", 1.0, 0.0, 1.0) != 1.0)
    config_fail(source, "rotary_emb_fraction is not 1: only rotary over the whole head is supported");
  if (f.integer("max_position_embeddings", 0, 0, 1 << 30) != 0)
    config_fail(source, "max_position_embeddings is not 0: Based has no learned position embedding");
  if (f.integer("rotary_emb_dim", 0, 0, kMax) != 0)
    config_fail(source, "rotary_emb_dim is set; Based derives it from rotary_emb_fraction");
}

// mixer: BaseConv, the layers in neither list.
void read_conv_spec(MixerSpecs& m, const ModelConfig& c, BasedConfig& b) {
  const std::string& source = m.source();
  // kernel_sizes (plural) is what the training configs say; the published
  // code reads kernel_size and falls back to 3 (docs/based.md).
  const json::Value* conv = m.spec("mixer", "BaseConv");
  if (!conv && b.linear_layers.size() + b.window_layers.size() < std::size_t(c.num_hidden_layers))
    config_fail(source, "mixer is missing: the layers not in alt_mixer_layers or alt_mixer_2_layers need it");
  m.known(conv, "mixer", {"_target_", "l_max", "use_bias", "expand_proj", "kernel_sizes",
                          "kernel_size", "implicit_long_conv", "use_cuda"});
  b.conv_expand = m.int_in(conv, "mixer", "expand_proj", 4, 2, 64);
  if (b.conv_expand % 2 != 0) config_fail(source, "mixer.expand_proj is {}, expected an even number", b.conv_expand);
  const int ks = m.int_in(conv, "mixer", "kernel_sizes", 3, 1, 64);
  b.conv_kernel = m.int_in(conv, "mixer", "kernel_size", ks, 1, 64);
  if (const json::Value* bias = m.sub(conv, "use_bias")) {
    if (!bias->is_bool())
      config_fail(source, "mixer.use_bias is {}, expected true or false", bias->kind_name());
    b.conv_bias = bias->boolean();
  }
  if (const json::Value* u = m.sub(conv, "use_cuda"); u && u->is_bool() && u->boolean())
    config_fail(source, "mixer.use_cuda is true: that variant's convolution has a bias and a fused "
                 "activation that the published checkpoints do not use");
}

// alt_mixer: Taylor linear attention, the layers of alt_mixer_layers.
void read_linear_spec(MixerSpecs& m, BasedConfig& b) {
  const std::string& source = m.source();
  constexpr int kMax = kMaxDim;
  const json::Value* la = m.spec("alt_mixer", "LinearAttention");
  if (!la && !b.linear_layers.empty()) config_fail(source, "alt_mixer is missing but alt_mixer_layers is set");
  m.known(la, "alt_mixer", {"_target_", "l_max", "feature_map", "feature_dim", "num_heads",
                            "num_key_value_heads", "parallel_implementation", "eps", "causal",
                            "train_view", "feature_name", "mem_save"});
  b.la_heads = m.int_in(la, "alt_mixer", "num_heads", 16, 1, kMax);
  b.la_feature_dim = m.int_in(la, "alt_mixer", "feature_dim", 16, 1, 256);
  if (m.int_in(la, "alt_mixer", "num_key_value_heads", b.la_heads, 1, kMax) != b.la_heads)
    config_fail(source, "alt_mixer.num_key_value_heads differs from num_heads; Based's layers have as many");
  if (const json::Value* fm = m.sub(la, "feature_map")) {
    if (!fm->is_object() || target_class(*fm) != "TaylorExp")
      config_fail(source, "alt_mixer.feature_map is not a TaylorExp; Based's checkpoints use the Taylor map");
    m.known(fm, "alt_mixer.feature_map", {"_target_", "input_dim", "head_dim_idx", "temp", "eps"});
    if (m.int_in(fm, "alt_mixer.feature_map", "input_dim", b.la_feature_dim, 1, 256) != b.la_feature_dim)
      config_fail(source, "alt_mixer.feature_map.input_dim differs from alt_mixer.feature_dim");
  }
}

// alt_mixer_2: sliding-window attention, the layers of alt_mixer_2_layers.
void read_window_spec(MixerSpecs& m, BasedConfig& b) {
  const std::string& source = m.source();
  constexpr int kMax = kMaxDim;
  const json::Value* win = m.spec("alt_mixer_2", "SlidingAttention");
  if (!win && !b.window_layers.empty()) config_fail(source, "alt_mixer_2 is missing but alt_mixer_2_layers is set");
  m.known(win, "alt_mixer_2", {"_target_", "window_size", "num_heads", "causal", "l_max",
                               "do_update", "dropout"});
  b.window_size = m.int_in(win, "alt_mixer_2", "window_size", 256, 1, 1 << 24);
  if (m.int_in(win, "alt_mixer_2", "num_heads", b.window_heads, 1, kMax) != b.window_heads)
    config_fail(source, "alt_mixer_2.num_heads differs from n_head; the published code uses n_head");
  if (const json::Value* causal = m.sub(win, "causal"); causal && !(causal->is_bool() && causal->boolean()))
    config_fail(source, "alt_mixer_2.causal is not true");
}

}  // namespace

const BasedConfig& config_of(const ModelConfig& c) {
  const auto* b = dynamic_cast<const BasedConfig*>(c.family.get());
  if (!b) throw std::logic_error("[Model] internal: a Based configuration without its fields");
  return *b;
}

// Based's fields (model_type "gpt2" with alt_mixer, as the published checkpoints have them, or
// "based"). Each mixer spec is read field by field; a value the published model does not use
// (another mixer class, biases where it has none, a partial rotary) is refused by name.
void read_config(const json::Value& root, Fields& f, ModelConfig& c) {
  const std::string& source = f.source();
  BasedConfig b;
  c.architecture = Architecture::kBased;
  read_gpt2_fields(root, f, c, b);
  b.linear_layers = layer_list(f, source, "alt_mixer_layers", c.num_hidden_layers);
  b.window_layers = layer_list(f, source, "alt_mixer_2_layers", c.num_hidden_layers);
  for (const int l : b.linear_layers)
    if (std::find(b.window_layers.begin(), b.window_layers.end(), l) != b.window_layers.end())
      config_fail(source, "layer {} is in both alt_mixer_layers and alt_mixer_2_layers", l);
  MixerSpecs m(f);
  read_conv_spec(m, c, b);
  read_linear_spec(m, b);
  read_window_spec(m, b);
  f.accept(kBasedAccepted);
  // flash-attn's block options: the released models are pre-norm, one branch after the other.
  f.accept_when("prenorm", [](const json::Value& v) { return v.is_bool() && v.boolean(); },
                "true selects the pre-norm block recur runs",
                "flash-attn's post-norm block, which no released Based uses");
  for (const char* key : {"parallel_block", "parallel_block_tied_norm"})
    f.accept_when(key, [](const json::Value& v) { return v.is_bool() && !v.boolean(); },
                  "false selects the sequential block recur runs",
                  "flash-attn's parallel block (mixer and MLP side by side), which no released "
                  "Based uses");
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
  const BasedConfig& b = config_of(c);
  model::FieldWriter w;
  // The published checkpoints' layout: a GPT2Config with Based's mixer specs.
  const auto list = [](const std::vector<int>& v) {
    std::string out = "[";
    for (std::size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + std::to_string(v[i]);
    return out + "]";
  };
  w.add("model_type", "\"gpt2\"");
  w.add("architectures", "[\"GPTLMHeadModel\"]");
  w.number("vocab_size", c.vocab_size);
  w.number("n_embd", c.hidden_size);
  w.number("n_inner", c.intermediate_size);
  w.number("n_layer", c.num_hidden_layers);
  w.number("n_head", b.window_heads);
  w.number("layer_norm_epsilon", c.norm_eps);
  w.number("rotary_emb_base", b.rope_theta);
  w.add("rotary_emb_fraction", "1");
  w.add("max_position_embeddings", "0");
  w.number("pad_vocab_size_multiple", b.pad_vocab_multiple);
  w.add("rms_norm", "true");
  w.add("activation_function", "\"swiglu\"");
  w.add("residual_in_fp32", "true");
  w.add("alt_mixer_layers", list(b.linear_layers));
  w.add("alt_mixer_2_layers", list(b.window_layers));
  w.add("mixer", fmt::format("{{\"_target_\": \"based.models.mixers.convolution.BaseConv\", "
                             "\"l_max\": 2048, \"use_bias\": {}, \"expand_proj\": {}, "
                             "\"kernel_sizes\": {}}}",
                             model::config_bool(b.conv_bias), b.conv_expand, b.conv_kernel));
  w.add("alt_mixer", fmt::format("{{\"_target_\": \"based.models.mixers.linear_attention.LinearAttention\", "
                                 "\"l_max\": 2048, \"feature_map\": {{\"_target_\": "
                                 "\"based.models.mixers.linear_attention.TaylorExp\", \"input_dim\": {}}}, "
                                 "\"feature_dim\": {}, \"num_heads\": {}}}",
                                 b.la_feature_dim, b.la_feature_dim, b.la_heads));
  w.add("alt_mixer_2", fmt::format("{{\"_target_\": \"based.models.mixers.slide_attention.SlidingAttention\", "
                                   "\"window_size\": {}, \"num_heads\": {}, \"causal\": true}}",
                                   b.window_size, b.window_heads));
  return w.text();
}

}  // namespace recur::models::based
