#include <fmt/format.h>

#include <cmath>
#include <fstream>
#include <set>

#include "recur/error.h"
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
  } else if (type.empty()) {
    fail(source, "model_type is missing; expected linear_attn or transformers_are_rnns");
  } else {
    fail(source, "model_type is '{}'; recur reads linear_attn and transformers_are_rnns", type);
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
  f.reject_unknown();
  c.resolve(source);
  return c;
}

void ModelConfig::resolve(const std::string& source) {
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
  if (architecture == Architecture::kLinearAttn) {
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
  if (!eos_token_ids.empty()) {
    std::string ids;
    for (std::size_t i = 0; i < eos_token_ids.size(); ++i) ids += (i ? ", " : "") + std::to_string(eos_token_ids[i]);
    add("eos_token_id", eos_token_ids.size() == 1 ? ids : "[" + ids + "]");
  }
  s += fmt::format("  \"tie_word_embeddings\": {}\n}}\n", boolean(tie_word_embeddings));
  return s;
}

}  // namespace recur
