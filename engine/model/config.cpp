#include <fmt/format.h>

#include <cmath>
#include <algorithm>
#include <fstream>
#include <set>

#include "recur/error.h"
#include "model/fla.h"
#include "recur/model.h"
#include "util/file.h"
#include "util/json.h"

namespace recur {
namespace {

template <class... Args>
[[noreturn]] void fail(const std::string& source, fmt::format_string<Args...> f, Args&&... args) {
  throw FormatError(
      fmt::format("[ModelConfig] {}: {}", source, fmt::format(f, std::forward<Args>(args)...)));
}

struct FeatureMapName {
  ModelFeatureMap map;
  const char* name;
};
constexpr FeatureMapName kFeatureMaps[] = {
    {ModelFeatureMap::kElu, "elu"},
    {ModelFeatureMap::kRelu, "relu"},
    {ModelFeatureMap::kIdentity, "identity"},
    {ModelFeatureMap::kHedgehog, "hedgehog"},
    {ModelFeatureMap::kT2R, "t2r"},
    {ModelFeatureMap::kDpfp, "dpfp"},
    {ModelFeatureMap::kElementwiseProduct, "elementwise_product"},
};

// Fields of a Hugging Face config that describe training, saving or tooling, not the forward
// pass. They are accepted and ignored.
const std::set<std::string> kIgnored = {
    // the checkpoint's identity and tooling
    "architectures", "model_type", "torch_dtype", "dtype", "transformers_version",
    "_name_or_path", "auto_map", "tokenizer_class", "id2label", "label2id", "problem_type",
    "finetuning_task", "task_specific_params", "prefix", "use_bfloat16",
    // special tokens and generation defaults (recur takes these from the command line)
    "bos_token_id", "pad_token_id", "sep_token_id", "decoder_start_token_id",
    "max_length", "min_length", "do_sample", "num_beams", "temperature", "top_k", "top_p",
    "repetition_penalty", "length_penalty", "no_repeat_ngram_size", "num_return_sequences",
    "early_stopping", "bad_words_ids",
    // training and output switches that leave the forward pass as it is
    "use_cache", "initializer_range", "return_dict", "output_hidden_states",
    "output_attentions", "torchscript", "use_return_dict", "chunk_size_feed_forward",
    "is_encoder_decoder", "is_decoder", "tie_encoder_decoder", "pruned_heads",
    "add_cross_attention", "tf_legacy_loss", "fuse_norm", "fuse_swiglu", "fuse_cross_entropy",
    "fuse_linear_cross_entropy", "use_l2warp"};

// Reads fields of one JSON object, remembering which were used, so that unknown ones are
// reported instead of silently ignored.
class Fields {
 public:
  Fields(const json::Value& root, const std::string& source) : root_(root), source_(source) {}

  const json::Value* get(const char* name) {
    used_.insert(name);
    const json::Value* v = root_.find(name);
    return v && !v->is_null() ? v : nullptr;
  }
  int integer(const char* name, int fallback, int min, int max) {
    const json::Value* v = get(name);
    if (!v) return fallback;
    if (!v->is_integer()) fail(source_, "{} is {}, expected an integer", name, describe(*v));
    if (v->integer() < min || v->integer() > max)
      fail(source_, "{} is {}, expected {} to {}", name, v->integer(), min, max);
    return static_cast<int>(v->integer());
  }
  double number(const char* name, double fallback, double min, double max) {
    const json::Value* v = get(name);
    if (!v) return fallback;
    if (!v->is_number()) fail(source_, "{} is {}, expected a number", name, describe(*v));
    if (!(v->number() >= min && v->number() <= max))
      fail(source_, "{} is {}, expected {} to {}", name, v->number(), min, max);
    return v->number();
  }
  bool boolean(const char* name, bool fallback) {
    const json::Value* v = get(name);
    if (!v) return fallback;
    if (!v->is_bool()) fail(source_, "{} is {}, expected true or false", name, describe(*v));
    return v->boolean();
  }
  std::string string(const char* name, const std::string& fallback) {
    const json::Value* v = get(name);
    if (!v) return fallback;
    if (!v->is_string()) fail(source_, "{} is {}, expected a string", name, describe(*v));
    return v->string();
  }
  /// Marks a field as read elsewhere (fla::read_config).
  void mark(const std::string& name) { used_.insert(name); }
  void reject_unknown() const {
    for (const auto& [key, value] : root_.object()) {
      (void)value;
      if (!used_.count(key) && !kIgnored.count(key))
        fail(source_,
             "unknown field '{}': recur does not know what it changes in the model, so it will "
             "not guess (remove it if it does not affect inference)",
             key);
    }
  }

 private:
  static std::string describe(const json::Value& v) {
    if (v.is_string()) return json::quote(v.string());
    if (v.is_number()) return fmt::format("{}", v.number());
    if (v.is_bool()) return v.boolean() ? "true" : "false";
    return v.kind_name();
  }
  const json::Value& root_;
  const std::string& source_;
  std::set<std::string> used_;
};

// Widths of the model's matrices, and the attention layer's per-head limit.
constexpr int kMaxDim = 1 << 20;
constexpr int kMaxHeadDim = 1 << 16;

// A size computed from config values in double: an int in [1, kMaxDim], or a FormatError.
int checked_dim(const std::string& source, const char* what, double value) {
  if (!(value >= 1.0 && value <= double(kMaxDim)))
    fail(source, "{} is {}, expected 1 to {}", what, value, kMaxDim);
  return static_cast<int>(value);
}


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
  if (!v->is_array()) fail(source, "{} is {}, expected a list of layer indices", name, v->kind_name());
  for (const auto& e : v->array()) {
    if (!e.is_integer() || e.integer() < 0 || e.integer() >= n_layers)
      fail(source, "{} holds {}, expected layer indices 0 to n_layer - 1 = {}", name,
           e.is_number() ? fmt::format("{}", e.number()) : e.kind_name(), n_layers - 1);
    if (std::find(out.begin(), out.end(), static_cast<int>(e.integer())) != out.end())
      fail(source, "{} names layer {} twice", name, e.integer());
    out.push_back(static_cast<int>(e.integer()));
  }
  return out;
}

// GPT2Config fields that a Based checkpoint carries and that do not change its forward pass
// (GPT-2's own heads, dropout, initialisation, fused-kernel switches of the training code).
const std::set<std::string> kBasedIgnored = {
    "n_ctx", "n_positions", "summary_type", "summary_use_proj", "summary_activation",
    "summary_proj_to_labels", "summary_first_dropout", "attn_pdrop", "embd_pdrop", "resid_pdrop",
    "scale_attn_weights", "special_initializer", "use_flash_attn", "fused_mlp", "fused_bias_fc",
    "fused_dropout_add_ln", "fused_dense_sqrelu_dense", "residual_in_fp32", "reorder_and_upcast_attn",
    "scale_attn_by_inverse_layer_idx", "eos_token_id", "bos_token_id", "mlp_checkpoint_lvl",
    "last_layer_subset", "fixed_decay", "decay_const", "decay_denom", "n_head_kv",
    "prenorm", "parallel_block", "parallel_block_tied_norm", "rotary_emb_scale_base",
    "rotary_emb_interleaved", "use_alibi", "alibi_bias"};

// Based's fields (model_type "gpt2" with alt_mixer, as the published checkpoints have them, or
// "based"). Each mixer spec is read field by field; a value the published model does not use
// (another mixer class, biases where it has none, a partial rotary) is refused by name.
void read_based(const json::Value& root, Fields& f, const std::string& source, ModelConfig& c) {
  constexpr int kMax = kMaxDim;
  c.architecture = Architecture::kBased;
  // The hydra class name Based's training configs write at the top level: a GPT-2 config class,
  // which the fields below describe; any other class would mean other fields.
  if (const json::Value* t = f.get("_target_")) {
    if (!t->is_string()) fail(source, "_target_ is {}, expected a class name", t->kind_name());
    const std::string cls = target_class(root);
    if (cls != "GPT2MixerConfig" && cls != "GPT2Config")
      fail(source, "_target_ names '{}', expected based.models.gpt.GPT2MixerConfig (or "
                   "transformers' GPT2Config): recur reads Based's GPT-2 config fields", cls);
  }
  c.hidden_size = f.integer("n_embd", 768, 1, kMax);
  c.num_hidden_layers = f.integer("n_layer", 12, 1, 4096);
  c.window_heads = f.integer("n_head", 12, 1, kMax);
  c.num_heads = c.window_heads;
  c.vocab_size = f.integer("vocab_size", 50257, 1, 1 << 24);
  c.intermediate_size = f.integer("n_inner", 0, 1, kMax);
  c.norm_eps = f.number("layer_norm_epsilon", 1e-5, 0.0, 1.0);
  c.rope_theta = f.number("rotary_emb_base", 10000, 1.0, 1e12);
  c.pad_vocab_multiple = f.integer("pad_vocab_size_multiple", 1, 1, 1 << 16);
  c.tie_word_embeddings = f.boolean("tie_word_embeddings", true);
  if (!c.tie_word_embeddings)
    fail(source, "tie_word_embeddings is false; Based ties its head to the embedding");
  if (!f.boolean("rms_norm", false))
    fail(source, "rms_norm is not true; Based's blocks use RMSNorm");
  const std::string act = f.string("activation_function", "gelu_new");
  if (act != "swiglu") fail(source, "activation_function is '{}'; Based's MLP is swiglu", act);
  for (const char* bias : {"mlp_fc1_bias", "mlp_fc2_bias", "qkv_proj_bias", "out_proj_bias"})
    if (f.boolean(bias, false)) fail(source, "{} is true; Based's checkpoints have no such bias", bias);
  if (f.number("rotary_emb_fraction", 1.0, 0.0, 1.0) != 1.0)
    fail(source, "rotary_emb_fraction is not 1: only rotary over the whole head is supported");
  if (f.integer("max_position_embeddings", 0, 0, 1 << 30) != 0)
    fail(source, "max_position_embeddings is not 0: Based has no learned position embedding");
  if (f.integer("rotary_emb_dim", 0, 0, kMax) != 0)
    fail(source, "rotary_emb_dim is set; Based derives it from rotary_emb_fraction");
  c.linear_layers = layer_list(f, source, "alt_mixer_layers", c.num_hidden_layers);
  c.window_layers = layer_list(f, source, "alt_mixer_2_layers", c.num_hidden_layers);
  for (const int l : c.linear_layers)
    if (std::find(c.window_layers.begin(), c.window_layers.end(), l) != c.window_layers.end())
      fail(source, "layer {} is in both alt_mixer_layers and alt_mixer_2_layers", l);

  const auto spec = [&](const char* name, const char* expected) -> const json::Value* {
    const json::Value* v = f.get(name);
    if (!v) return nullptr;
    if (!v->is_object()) fail(source, "{} is {}, expected an object", name, v->kind_name());
    const std::string cls = target_class(*v);
    if (cls != expected)
      fail(source, "{}._target_ names '{}', expected a {} (the mixer Based's checkpoints use)",
           name, cls, expected);
    return v;
  };
  const auto sub = [&](const json::Value* v, const char* name) -> const json::Value* {
    const json::Value* x = v ? v->find(name) : nullptr;
    return x && !x->is_null() ? x : nullptr;
  };
  const auto int_in = [&](const json::Value* v, const char* owner, const char* name, int fallback,
                          int lo, int hi) {
    const json::Value* x = sub(v, name);
    if (!x) return fallback;
    if (!x->is_integer() || x->integer() < lo || x->integer() > hi)
      fail(source, "{}.{} is {}, expected an integer in {} to {}", owner, name,
           x->is_number() ? fmt::format("{}", x->number()) : x->kind_name(), lo, hi);
    return static_cast<int>(x->integer());
  };
  const auto known = [&](const json::Value* v, const char* owner, std::initializer_list<const char*> keys) {
    if (!v) return;
    for (const auto& [key, value] : v->object()) {
      (void)value;
      bool ok = false;
      for (const char* k : keys) ok = ok || key == k;
      if (!ok)
        fail(source, "unknown field '{}.{}': recur does not know what it changes in the model",
             owner, key);
    }
  };
  // mixer: BaseConv. kernel_sizes (plural) is what the training configs say; the published
  // code reads kernel_size and falls back to 3 (docs/based.md).
  const json::Value* conv = spec("mixer", "BaseConv");
  if (!conv && c.linear_layers.size() + c.window_layers.size() < std::size_t(c.num_hidden_layers))
    fail(source, "mixer is missing: the layers not in alt_mixer_layers or alt_mixer_2_layers need it");
  known(conv, "mixer", {"_target_", "l_max", "use_bias", "expand_proj", "kernel_sizes",
                        "kernel_size", "implicit_long_conv", "use_cuda"});
  c.conv_expand = int_in(conv, "mixer", "expand_proj", 4, 2, 64);
  if (c.conv_expand % 2 != 0) fail(source, "mixer.expand_proj is {}, expected an even number", c.conv_expand);
  const int ks = int_in(conv, "mixer", "kernel_sizes", 3, 1, 64);
  c.conv_kernel = int_in(conv, "mixer", "kernel_size", ks, 1, 64);
  if (const json::Value* b = sub(conv, "use_bias")) {
    if (!b->is_bool()) fail(source, "mixer.use_bias is {}, expected true or false", b->kind_name());
    c.conv_bias = b->boolean();
  }
  if (const json::Value* u = sub(conv, "use_cuda"); u && u->is_bool() && u->boolean())
    fail(source, "mixer.use_cuda is true: that variant's convolution has a bias and a fused "
                 "activation that the published checkpoints do not use");
  // alt_mixer: Taylor linear attention.
  const json::Value* la = spec("alt_mixer", "LinearAttention");
  if (!la && !c.linear_layers.empty()) fail(source, "alt_mixer is missing but alt_mixer_layers is set");
  known(la, "alt_mixer", {"_target_", "l_max", "feature_map", "feature_dim", "num_heads",
                          "num_key_value_heads", "parallel_implementation", "eps", "causal",
                          "train_view", "feature_name", "mem_save"});
  c.la_heads = int_in(la, "alt_mixer", "num_heads", 16, 1, kMax);
  c.la_feature_dim = int_in(la, "alt_mixer", "feature_dim", 16, 1, 256);
  if (int_in(la, "alt_mixer", "num_key_value_heads", c.la_heads, 1, kMax) != c.la_heads)
    fail(source, "alt_mixer.num_key_value_heads differs from num_heads; Based's layers have as many");
  if (const json::Value* fm = sub(la, "feature_map")) {
    if (!fm->is_object() || target_class(*fm) != "TaylorExp")
      fail(source, "alt_mixer.feature_map is not a TaylorExp; Based's checkpoints use the Taylor map");
    known(fm, "alt_mixer.feature_map", {"_target_", "input_dim", "head_dim_idx", "temp", "eps"});
    if (int_in(fm, "alt_mixer.feature_map", "input_dim", c.la_feature_dim, 1, 256) != c.la_feature_dim)
      fail(source, "alt_mixer.feature_map.input_dim differs from alt_mixer.feature_dim");
  }
  // alt_mixer_2: sliding-window attention.
  const json::Value* win = spec("alt_mixer_2", "SlidingAttention");
  if (!win && !c.window_layers.empty()) fail(source, "alt_mixer_2 is missing but alt_mixer_2_layers is set");
  known(win, "alt_mixer_2", {"_target_", "window_size", "num_heads", "causal", "l_max",
                             "do_update", "dropout"});
  c.window_size = int_in(win, "alt_mixer_2", "window_size", 256, 1, 1 << 24);
  if (int_in(win, "alt_mixer_2", "num_heads", c.window_heads, 1, kMax) != c.window_heads)
    fail(source, "alt_mixer_2.num_heads differs from n_head; the published code uses n_head");
  if (const json::Value* causal = sub(win, "causal"); causal && !(causal->is_bool() && causal->boolean()))
    fail(source, "alt_mixer_2.causal is not true");
}

// quantization_config as `recur quantize` writes it: {"quant_method": "recur", "format": "q8"
// or "q4", "block_size": 32, "scale_dtype": "float16", "head_format": ...}. Another tool's
// quantization (gptq, awq, bitsandbytes...) stores other tensors: refused by name, not guessed.
void read_quantization(const json::Value& q, const std::string& source, ModelConfig& c) {
  if (!q.is_object()) fail(source, "quantization_config is {}, expected an object", q.kind_name());
  for (const auto& [key, value] : q.object()) {
    (void)value;
    if (key != "quant_method" && key != "format" && key != "block_size" &&
        key != "scale_dtype" && key != "head_format")
      fail(source, "unknown field 'quantization_config.{}': recur does not know what it changes "
                   "in the model", key);
  }
  const auto text = [&](const char* name) -> std::string {
    const json::Value* v = q.find(name);
    if (!v || v->is_null()) return "";
    if (!v->is_string())
      fail(source, "quantization_config.{} is {}, expected a string", name, v->kind_name());
    return v->string();
  };
  const std::string method = text("quant_method");
  if (method != "recur")
    fail(source, "quantization_config.quant_method is '{}': recur reads the quantized models it "
                 "writes itself (quant_method \"recur\", `recur quantize`), not another tool's",
         method);
  c.quantization = text("format");
  if (c.quantization.empty()) fail(source, "quantization_config.format is missing (q8 or q4)");
  const std::string head = text("head_format");
  c.quantization_head = head.empty() ? c.quantization : head;
  const json::Value* block = q.find("block_size");
  if (!block || !block->is_integer() || block->integer() != 32)
    fail(source, "quantization_config.block_size is {}, expected 32 (the only block size recur's "
                 "kernels take)",
         block ? (block->is_number() ? fmt::format("{}", block->number()) : block->kind_name())
               : "missing");
  const std::string scales = text("scale_dtype");
  if (!scales.empty() && scales != "float16")
    fail(source, "quantization_config.scale_dtype is '{}', expected float16", scales);
}

// Based's derived sizes and its layer schedule.
void resolve_based(ModelConfig& c, const std::string& source) {
  const int d = c.hidden_size;
  if (c.window_heads < 1 || d % c.window_heads != 0 || (d / c.window_heads) % 2 != 0)
    fail(source, "n_embd {} is not n_head {} heads of an even width (rotary turns pairs)", d,
         c.window_heads);
  if (c.la_heads < 1 || d % c.la_heads != 0)
    fail(source, "n_embd {} is not a multiple of alt_mixer.num_heads {}", d, c.la_heads);
  if (c.la_feature_dim < 1 || c.la_feature_dim > 256)
    fail(source, "alt_mixer.feature_dim is {}, expected 1 to 256", c.la_feature_dim);
  if (c.conv_expand < 2 || c.conv_expand % 2 != 0 || c.conv_kernel < 1 || c.window_size < 1 ||
      c.pad_vocab_multiple < 1)
    fail(source, "mixer.expand_proj {} (even, >= 2), kernel size {}, window_size {} and "
                 "pad_vocab_size_multiple {} must be positive", c.conv_expand, c.conv_kernel,
         c.window_size, c.pad_vocab_multiple);
  for (const auto* list : {&c.linear_layers, &c.window_layers})
    for (const int l : *list)
      if (l < 0 || l >= c.num_hidden_layers)
        fail(source, "layer index {} is outside 0 to n_layer - 1 = {}", l, c.num_hidden_layers - 1);
  c.mixers.assign(std::size_t(c.num_hidden_layers), MixerKind::kShortConv);
  for (const int l : c.linear_layers) c.mixers[std::size_t(l)] = MixerKind::kLinearAttention;
  for (const int l : c.window_layers) c.mixers[std::size_t(l)] = MixerKind::kWindowAttention;
  if (c.intermediate_size == 0)  // GatedMlp: n_inner, else 8/3 of the width
    c.intermediate_size = checked_dim(source, "8/3 n_embd", std::floor(8.0 * d / 3.0));
  // GatedMlp rounds the width up to a multiple of 256, whatever n_inner says.
  c.intermediate_size = checked_dim(source, "n_inner rounded up to 256",
                                    256.0 * std::ceil(double(c.intermediate_size) / 256.0));
  c.embedding_rows = checked_dim(source, "vocab_size rounded up to pad_vocab_size_multiple",
                                 double(c.pad_vocab_multiple) *
                                     std::ceil(double(c.vocab_size) / double(c.pad_vocab_multiple)));
  c.num_heads = c.la_heads;
  c.num_kv_heads = c.la_heads;
  c.kv_groups = 1;
  c.key_dim = c.la_heads * c.la_feature_dim;
  c.value_dim = d;
  c.head_k_dim = c.la_feature_dim;
  c.head_v_dim = d / c.la_heads;
  c.d_feature = 1 + c.la_feature_dim + c.la_feature_dim * c.la_feature_dim;
  c.attn_scale = 1.0f;
  c.attn_eps = 1e-12;  // LinearAttention's eps in the published layer
  c.norm_feature_map = true;
  c.tie_word_embeddings = true;
}
}  // namespace

const char* ModelConfig::feature_map_name(ModelFeatureMap map) {
  for (const auto& f : kFeatureMaps)
    if (f.map == map) return f.name;
  return "?";
}

ModelConfig ModelConfig::from_file(const std::string& path) {
  const auto text = detail::read_file(path);
  if (!text) throw FormatError(fmt::format("[ModelConfig] {}: cannot read the file", path));
  return from_json(*text, path);
}

ModelConfig ModelConfig::from_json(const std::string& text, const std::string& source) {
  const json::Value root = json::parse(text, "ModelConfig] " + source + ": [config");
  if (!root.is_object()) fail(source, "the config is {}, not an object", root.kind_name());
  Fields f(root, source);
  ModelConfig c;
  const std::string type = f.string("model_type", "");
  constexpr int kMax = kMaxDim;
  if (type == "linear_attn") {
    c.architecture = Architecture::kLinearAttn;
    const std::string mode = f.string("attn_mode", "fused_chunk");
    if (mode != "chunk" && mode != "fused_chunk" && mode != "fused_recurrent")
      fail(source, "attn_mode is '{}', expected chunk, fused_chunk or fused_recurrent", mode);
    c.hidden_size = f.integer("hidden_size", 2048, 1, kMax);
    c.expand_k = f.number("expand_k", 1.0, 1e-6, 1e6);
    c.expand_v = f.number("expand_v", 1.0, 1e-6, 1e6);
    c.hidden_ratio = f.number("hidden_ratio", 4, 1e-6, 1e6);
    c.intermediate_size = f.integer("intermediate_size", 0, 1, kMax);
    c.num_hidden_layers = f.integer("num_hidden_layers", 24, 1, 4096);
    c.num_heads = f.integer("num_heads", 4, 1, kMax);
    c.num_kv_heads = f.integer("num_kv_heads", 0, 1, kMax);
    const std::string map = f.string("feature_map", "elementwise_product");
    bool known = false;
    for (const auto& fm : kFeatureMaps)
      if (map == fm.name) {
        c.feature_map = fm.map;
        known = true;
      }
    if (!known)
      fail(source, "feature_map is '{}', expected one of elu, relu, identity, hedgehog, t2r, "
                   "dpfp, elementwise_product", map);
    c.tie_feature_map_qk = f.boolean("tie_feature_map_qk", false);
    c.norm_q = f.boolean("norm_q", false);
    c.norm_k = f.boolean("norm_k", false);
    c.norm_feature_map = f.boolean("norm_feature_map", false);
    c.hidden_act = f.string("hidden_act", "swish");
    if (c.hidden_act != "swish")
      fail(source, "hidden_act is '{}'; the linear_attn MLP supports only swish", c.hidden_act);
    f.integer("max_position_embeddings", 2048, 0, 1 << 30);  // no positional encoding: unused
    // null means false here, as in the library (RMSNorm(elementwise_affine=None) has no weight).
    const json::Value* affine = f.get("elementwise_affine");
    if (affine && !affine->is_bool())
      fail(source, "elementwise_affine is {}, expected true, false or null", affine->kind_name());
    c.elementwise_affine = root.find("elementwise_affine") == nullptr ? true
                           : affine                               ? affine->boolean()
                                                                  : false;
    c.norm_eps = f.number("norm_eps", 1e-6, 0.0, 1.0);
    if (f.get("attn"))
      fail(source, "attn is set: hybrid models with softmax-attention layers are not supported");
    c.vocab_size = f.integer("vocab_size", 32000, 1, 1 << 24);
    c.tie_word_embeddings = f.boolean("tie_word_embeddings", false);
    c.attn_eps = 1e-10;
  } else if (type == "transformers_are_rnns") {
    c.architecture = Architecture::kTransformersAreRnns;
    c.vocab_size = f.integer("vocab_size", 256, 1, 1 << 24);
    c.hidden_size = f.integer("hidden_size", 512, 1, kMax);
    c.num_hidden_layers = f.integer("num_hidden_layers", 6, 1, 4096);
    c.num_heads = f.integer("num_heads", 8, 1, kMax);
    c.intermediate_size = f.integer("intermediate_size", 4 * c.hidden_size, 1, kMax);
    c.hidden_act = f.string("hidden_act", "relu");
    if (c.hidden_act != "relu" && c.hidden_act != "gelu")
      fail(source, "hidden_act is '{}', expected relu or gelu", c.hidden_act);
    const std::string map = f.string("feature_map", "elu");
    if (map == "elu") c.feature_map = ModelFeatureMap::kElu;
    else if (map == "relu") c.feature_map = ModelFeatureMap::kRelu;
    else fail(source, "feature_map is '{}', expected elu or relu for this model type", map);
    c.norm_eps = f.number("norm_eps", 1e-5, 0.0, 1.0);
    c.attn_eps = f.number("attn_eps", 1e-6, 0.0, 1.0);
    c.tie_word_embeddings = f.boolean("tie_word_embeddings", false);
    c.norm_feature_map = true;
    c.elementwise_affine = false;
  } else if (type == "gla" || type == "retnet" || type == "hgrn2") {
    std::set<std::string> used;
    fla::read_config(root, type, source, c, used);
    for (const auto& name : used) f.mark(name);
  } else if (type == "based" || (type == "gpt2" && (root.find("alt_mixer") || root.find("mixer")))) {
    read_based(root, f, source, c);
  } else if (type == "gpt2") {
    fail(source, "model_type is 'gpt2' without Based's mixer fields: a softmax GPT-2, which "
                 "recur does not run");
  } else if (type.empty()) {
    fail(source, "model_type is missing; expected linear_attn, transformers_are_rnns or a "
                 "Based checkpoint's gpt2");
  } else {
    fail(source, "model_type is '{}'; recur reads linear_attn, transformers_are_rnns, gla, retnet, "
                 "hgrn2 and Based (gpt2 with alt_mixer)", type);
  }
  if (const json::Value* eos = f.get("eos_token_id")) {
    const auto add = [&](const json::Value& v) {
      if (!v.is_integer() || v.integer() < 0 || v.integer() >= c.vocab_size)
        fail(source, "eos_token_id holds {}, expected ids in 0 to vocab_size - 1 = {}",
             v.is_number() ? fmt::format("{}", v.number()) : v.kind_name(), c.vocab_size - 1);
      c.eos_token_ids.push_back(static_cast<int>(v.integer()));
    };
    if (eos->is_array()) {
      for (const auto& v : eos->array()) add(v);
    } else {
      add(*eos);
    }
  }
  if (const json::Value* q = f.get("quantization_config")) read_quantization(*q, source, c);
  if (c.architecture == Architecture::kBased)
    for (const auto& name : kBasedIgnored) f.get(name.c_str());
  f.reject_unknown();
  c.resolve(source);
  return c;
}

void ModelConfig::resolve(const std::string& source) {
  const auto quant_ok = [](const std::string& f) { return f == "q8" || f == "q4"; };
  if (!quantization.empty() || !quantization_head.empty()) {
    if (!quant_ok(quantization))
      fail(source, "quantization_config.format is '{}', expected q8 or q4", quantization);
    if (quantization_head.empty()) quantization_head = quantization;
    if (!quant_ok(quantization_head))
      fail(source, "quantization_config.head_format is '{}', expected q8 or q4", quantization_head);
  }
  if (vocab_size < 1 || hidden_size < 1 || num_hidden_layers < 1 || num_heads < 1)
    fail(source, "vocab_size, hidden_size, num_hidden_layers and num_heads must be positive");
  if (vocab_size > (1 << 24) || hidden_size > kMaxDim || num_hidden_layers > 4096 ||
      num_heads > kMaxDim || intermediate_size > kMaxDim || num_kv_heads > kMaxDim ||
      num_kv_heads < 0 || intermediate_size < 0)
    fail(source, "a size is out of range (vocab_size {}, hidden_size {}, num_hidden_layers {}, "
                 "num_heads {}, num_kv_heads {}, intermediate_size {})",
         vocab_size, hidden_size, num_hidden_layers, num_heads, num_kv_heads, intermediate_size);
  if (!(expand_k > 0 && expand_k <= 1e6 && expand_v > 0 && expand_v <= 1e6 && hidden_ratio > 0 &&
        hidden_ratio <= 1e6))
    fail(source, "expand_k {}, expand_v {} and hidden_ratio {} must lie in (0, 1e6]", expand_k,
         expand_v, hidden_ratio);
  if (architecture == Architecture::kBased) {
    resolve_based(*this, source);
    return;
  }
  if (gated_family()) {
    fla::resolve(*this, source);
    return;
  }
  mixers.assign(std::size_t(num_hidden_layers), MixerKind::kLinearAttention);
  embedding_rows = vocab_size;
  if (architecture == Architecture::kLinearAttn) {
    if (num_kv_heads == 0) num_kv_heads = num_heads;
    if (num_kv_heads < 1 || num_heads % num_kv_heads != 0)
      fail(source, "num_heads {} is not a multiple of num_kv_heads {}", num_heads, num_kv_heads);
    kv_groups = num_heads / num_kv_heads;
    // As the library: int(hidden_size * expand), truncating. The product is checked in double
    // before it becomes an int, so that no value of the config reaches an overflow.
    key_dim = checked_dim(source, "key dim hidden_size * expand_k", double(hidden_size) * expand_k);
    value_dim = checked_dim(source, "value dim hidden_size * expand_v", double(hidden_size) * expand_v);
    if (key_dim < 1 || key_dim % num_heads != 0)
      fail(source, "key dim hidden_size * expand_k = {} * {} = {} is not a positive multiple of "
                   "num_heads {}", hidden_size, expand_k, key_dim, num_heads);
    if (value_dim < 1 || value_dim % num_heads != 0)
      fail(source, "value dim hidden_size * expand_v = {} * {} = {} is not a positive multiple of "
                   "num_heads {}", hidden_size, expand_v, value_dim, num_heads);
    if (intermediate_size == 0) {
      // The library's rule: 2/3 of hidden_size * hidden_ratio, rounded up to a multiple of 256.
      const int raw = checked_dim(source, "hidden_size * hidden_ratio * 2/3",
                                  double(hidden_size) * hidden_ratio * 2.0 / 3.0);
      intermediate_size = checked_dim(source, "intermediate_size rounded up to 256",
                                      256.0 * std::ceil(double(raw) / 256.0));
    }
  } else {
    num_kv_heads = num_heads;
    kv_groups = 1;
    if (hidden_size % num_heads != 0)
      fail(source, "hidden_size {} is not a multiple of num_heads {}", hidden_size, num_heads);
    key_dim = value_dim = hidden_size;
  }
  if (intermediate_size < 1) fail(source, "intermediate_size is {}, expected >= 1", intermediate_size);
  head_k_dim = key_dim / num_heads;
  head_v_dim = value_dim / num_heads;
  const int expansion = feature_map == ModelFeatureMap::kHedgehog ? 2
                        : feature_map == ModelFeatureMap::kDpfp   ? 8  // 2 d, rolled nu = 4 times
                                                                  : 1;
  // The attention layer's limits, checked here so that a bad config is a FormatError that names
  // config.json rather than an error from deep inside the model.
  if (head_k_dim > kMaxHeadDim || head_v_dim > kMaxHeadDim ||
      std::int64_t(head_k_dim) * expansion > kMaxHeadDim)
    fail(source, "per-head sizes key {}, value {}, feature {} exceed the limit of {}", head_k_dim,
         head_v_dim, std::int64_t(head_k_dim) * expansion, kMaxHeadDim);
  d_feature = head_k_dim * expansion;
  if (architecture == Architecture::kLinearAttn) {
    // scale = K^-1/2 with K the key size after the feature map (chunk_linear_attn's default),
    // applied to q in the numerator and, when normalized, in the denominator.
    attn_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d_feature)));
  } else {
    attn_scale = 1.0f;
  }
}

std::string ModelConfig::to_json() const {
  std::string s = "{\n";
  const auto add = [&](const char* key, const std::string& value) {
    s += fmt::format("  \"{}\": {},\n", key, value);
  };
  const auto num = [](double x) { return fmt::format("{}", x); };
  const auto boolean = [](bool b) { return std::string(b ? "true" : "false"); };
  if (architecture == Architecture::kBased) {
    // The published checkpoints' layout: a GPT2Config with Based's mixer specs.
    const auto list = [](const std::vector<int>& v) {
      std::string out = "[";
      for (std::size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + std::to_string(v[i]);
      return out + "]";
    };
    add("model_type", "\"gpt2\"");
    add("architectures", "[\"GPTLMHeadModel\"]");
    add("vocab_size", num(vocab_size));
    add("n_embd", num(hidden_size));
    add("n_inner", num(intermediate_size));
    add("n_layer", num(num_hidden_layers));
    add("n_head", num(window_heads));
    add("layer_norm_epsilon", num(norm_eps));
    add("rotary_emb_base", num(rope_theta));
    add("rotary_emb_fraction", "1");
    add("max_position_embeddings", "0");
    add("pad_vocab_size_multiple", num(pad_vocab_multiple));
    add("rms_norm", "true");
    add("activation_function", "\"swiglu\"");
    add("residual_in_fp32", "true");
    add("alt_mixer_layers", list(linear_layers));
    add("alt_mixer_2_layers", list(window_layers));
    add("mixer", fmt::format("{{\"_target_\": \"based.models.mixers.convolution.BaseConv\", "
                             "\"l_max\": 2048, \"use_bias\": {}, \"expand_proj\": {}, "
                             "\"kernel_sizes\": {}}}", boolean(conv_bias), conv_expand, conv_kernel));
    add("alt_mixer", fmt::format("{{\"_target_\": \"based.models.mixers.linear_attention.LinearAttention\", "
                                 "\"l_max\": 2048, \"feature_map\": {{\"_target_\": "
                                 "\"based.models.mixers.linear_attention.TaylorExp\", \"input_dim\": {}}}, "
                                 "\"feature_dim\": {}, \"num_heads\": {}}}",
                                 la_feature_dim, la_feature_dim, la_heads));
    add("alt_mixer_2", fmt::format("{{\"_target_\": \"based.models.mixers.slide_attention.SlidingAttention\", "
                                   "\"window_size\": {}, \"num_heads\": {}, \"causal\": true}}",
                                   window_size, window_heads));
  } else if (gated_family()) {
    s += fla::to_json_fields(*this);
  } else if (architecture == Architecture::kLinearAttn) {
    add("model_type", "\"linear_attn\"");
    add("architectures", "[\"LinearAttentionForCausalLM\"]");
    add("attn_mode", "\"fused_chunk\"");
    add("vocab_size", num(vocab_size));
    add("hidden_size", num(hidden_size));
    add("num_hidden_layers", num(num_hidden_layers));
    add("num_heads", num(num_heads));
    add("num_kv_heads", num(num_kv_heads));
    add("expand_k", num(expand_k));
    add("expand_v", num(expand_v));
    add("intermediate_size", num(intermediate_size));
    add("hidden_act", json::quote(hidden_act));
    add("feature_map", json::quote(feature_map_name(feature_map)));
    add("tie_feature_map_qk", boolean(tie_feature_map_qk));
    add("norm_q", boolean(norm_q));
    add("norm_k", boolean(norm_k));
    add("norm_feature_map", boolean(norm_feature_map));
    add("elementwise_affine", boolean(elementwise_affine));
    add("norm_eps", num(norm_eps));
  } else {
    add("model_type", "\"transformers_are_rnns\"");
    add("vocab_size", num(vocab_size));
    add("hidden_size", num(hidden_size));
    add("num_hidden_layers", num(num_hidden_layers));
    add("num_heads", num(num_heads));
    add("intermediate_size", num(intermediate_size));
    add("hidden_act", json::quote(hidden_act));
    add("feature_map", json::quote(feature_map_name(feature_map)));
    add("norm_eps", num(norm_eps));
    add("attn_eps", num(attn_eps));
  }
  if (!quantization.empty())
    add("quantization_config",
        fmt::format("{{\"quant_method\": \"recur\", \"format\": {}, \"block_size\": 32, "
                    "\"scale_dtype\": \"float16\", \"head_format\": {}}}",
                    json::quote(quantization), json::quote(quantization_head)));
  if (!eos_token_ids.empty()) {
    std::string ids;
    for (std::size_t i = 0; i < eos_token_ids.size(); ++i) ids += (i ? ", " : "") + std::to_string(eos_token_ids[i]);
    add("eos_token_id", eos_token_ids.size() == 1 ? ids : "[" + ids + "]");
  }
  s += fmt::format("  \"tie_word_embeddings\": {}\n}}\n", boolean(tie_word_embeddings));
  return s;
}

}  // namespace recur
