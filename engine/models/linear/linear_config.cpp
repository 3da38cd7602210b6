// config.json of the linear-attention family: flash-linear-attention's linear_attn, field by field
// as its configuration class reads it, and the paper's model (transformers_are_rnns); their
// derived sizes and the lines make-model writes.
#include <cmath>
#include <memory>
#include <stdexcept>
#include <utility>

#include "models/linear/linear.h"

namespace recur::models::linear {

using model::checked_dim;
using model::config_fail;
using model::kMaxDim;
using model::kMaxHeadDim;

namespace {

struct FeatureMapName {
  ModelFeatureMap map;
  const char* name;
};
constexpr FeatureMapName kFeatureMapNames[] = {
    {ModelFeatureMap::kElu, "elu"},
    {ModelFeatureMap::kRelu, "relu"},
    {ModelFeatureMap::kIdentity, "identity"},
    {ModelFeatureMap::kHedgehog, "hedgehog"},
    {ModelFeatureMap::kT2R, "t2r"},
    {ModelFeatureMap::kDpfp, "dpfp"},
    {ModelFeatureMap::kElementwiseProduct, "elementwise_product"},
};

}  // namespace

const LinearConfig& config_of(const ModelConfig& c) {
  const auto* lc = dynamic_cast<const LinearConfig*>(c.family.get());
  if (!lc)
    throw std::logic_error("[Model] internal: a linear-attention configuration without its fields");
  return *lc;
}

const char* feature_map_name(ModelFeatureMap map) {
  for (const auto& f : kFeatureMapNames)
    if (f.map == map) return f.name;
  return "?";
}

void read_config(const std::string& type, const json::Value& root, model::Fields& f,
                 ModelConfig& c) {
  const std::string& source = f.source();
  constexpr int kMax = kMaxDim;
  LinearConfig lc;
  if (type == "linear_attn") {
    c.architecture = Architecture::kLinearAttn;
    const std::string mode = f.string("attn_mode", "fused_chunk");
    if (mode != "chunk" && mode != "fused_chunk" && mode != "fused_recurrent")
      config_fail(source, "attn_mode is '{}', expected chunk, fused_chunk or fused_recurrent", mode);
    c.hidden_size = f.integer("hidden_size", 2048, 1, kMax);
    lc.expand_k = f.number("expand_k", 1.0, 1e-6, 1e6);
    lc.expand_v = f.number("expand_v", 1.0, 1e-6, 1e6);
    c.hidden_ratio = f.number("hidden_ratio", 4, 1e-6, 1e6);
    c.intermediate_size = f.integer("intermediate_size", 0, 1, kMax);
    c.num_hidden_layers = f.integer("num_hidden_layers", 24, 1, 4096);
    c.num_heads = f.integer("num_heads", 4, 1, kMax);
    c.num_kv_heads = f.integer("num_kv_heads", 0, 1, kMax);
    const std::string map = f.string("feature_map", "elementwise_product");
    bool known = false;
    for (const auto& fm : kFeatureMapNames)
      if (map == fm.name) {
        lc.feature_map = fm.map;
        known = true;
      }
    if (!known)
      config_fail(source, "feature_map is '{}', expected one of elu, relu, identity, hedgehog, "
                          "t2r, dpfp, elementwise_product", map);
    lc.tie_feature_map_qk = f.boolean("tie_feature_map_qk", false);
    lc.norm_q = f.boolean("norm_q", false);
    lc.norm_k = f.boolean("norm_k", false);
    lc.norm_feature_map = f.boolean("norm_feature_map", false);
    lc.hidden_act = f.string("hidden_act", "swish");
    if (lc.hidden_act != "swish")
      config_fail(source, "hidden_act is '{}'; the linear_attn MLP supports only swish", lc.hidden_act);
    f.integer("max_position_embeddings", 2048, 0, 1 << 30);  // no positional encoding: unused
    // null means false here, as in the library (RMSNorm(elementwise_affine=None) has no weight).
    const json::Value* affine = f.get("elementwise_affine");
    if (affine && !affine->is_bool())
      config_fail(source, "elementwise_affine is {}, expected true, false or null", affine->kind_name());
    lc.elementwise_affine = root.find("elementwise_affine") == nullptr ? true
                           : affine                               ? affine->boolean()
                                                                  : false;
    c.norm_eps = f.number("norm_eps", 1e-6, 0.0, 1.0);
    if (f.get("attn"))
      config_fail(source, "attn is set: hybrid models with softmax-attention layers are not supported");
    c.vocab_size = f.integer("vocab_size", 32000, 1, 1 << 24);
    c.tie_word_embeddings = f.boolean("tie_word_embeddings", false);
    lc.attn_eps = 1e-10;
    c.family = std::make_shared<LinearConfig>(std::move(lc));
    return;
  }
  c.architecture = Architecture::kTransformersAreRnns;
  c.vocab_size = f.integer("vocab_size", 256, 1, 1 << 24);
  c.hidden_size = f.integer("hidden_size", 512, 1, kMax);
  c.num_hidden_layers = f.integer("num_hidden_layers", 6, 1, 4096);
  c.num_heads = f.integer("num_heads", 8, 1, kMax);
  c.intermediate_size = f.integer("intermediate_size", 4 * c.hidden_size, 1, kMax);
  lc.hidden_act = f.string("hidden_act", "relu");
  if (lc.hidden_act != "relu" && lc.hidden_act != "gelu")
    config_fail(source, "hidden_act is '{}', expected relu or gelu", lc.hidden_act);
  const std::string map = f.string("feature_map", "elu");
  if (map == "elu") lc.feature_map = ModelFeatureMap::kElu;
  else if (map == "relu") lc.feature_map = ModelFeatureMap::kRelu;
  else config_fail(source, "feature_map is '{}', expected elu or relu for this model type", map);
  c.norm_eps = f.number("norm_eps", 1e-5, 0.0, 1.0);
  lc.attn_eps = f.number("attn_eps", 1e-6, 0.0, 1.0);
  c.tie_word_embeddings = f.boolean("tie_word_embeddings", false);
  lc.norm_feature_map = true;
  lc.elementwise_affine = false;
  c.family = std::make_shared<LinearConfig>(std::move(lc));
}

void resolve(ModelConfig& c, const std::string& source) {
  // A configuration built in code without the family's fields takes their defaults.
  const auto* given = dynamic_cast<const LinearConfig*>(c.family.get());
  if (c.family && !given)
    config_fail(source, "a linear-attention configuration holds another family's fields");
  LinearConfig lc = given ? *given : LinearConfig{};
  if (!(lc.expand_k > 0 && lc.expand_k <= 1e6 && lc.expand_v > 0 && lc.expand_v <= 1e6))
    config_fail(source, "expand_k {} and expand_v {} must lie in (0, 1e6]", lc.expand_k,
                lc.expand_v);
  c.mixers.assign(std::size_t(c.num_hidden_layers), MixerKind::kLinearAttention);
  lc.fla_layout = model::type_of(c) == "linear_attn";
  if (lc.fla_layout) {
    if (c.num_kv_heads == 0) c.num_kv_heads = c.num_heads;
    if (c.num_kv_heads < 1 || c.num_heads % c.num_kv_heads != 0)
      config_fail(source, "num_heads {} is not a multiple of num_kv_heads {}", c.num_heads,
                  c.num_kv_heads);
    lc.kv_groups = c.num_heads / c.num_kv_heads;
    // As the library: int(hidden_size * expand), truncating. The product is checked in double
    // before it becomes an int, so that no value of the config reaches an overflow.
    lc.key_dim = checked_dim(source, "key dim hidden_size * expand_k", double(c.hidden_size) * lc.expand_k);
    lc.value_dim = checked_dim(source, "value dim hidden_size * expand_v", double(c.hidden_size) * lc.expand_v);
    if (lc.key_dim < 1 || lc.key_dim % c.num_heads != 0)
      config_fail(source, "key dim hidden_size * expand_k = {} * {} = {} is not a positive "
                          "multiple of num_heads {}", c.hidden_size, lc.expand_k, lc.key_dim, c.num_heads);
    if (lc.value_dim < 1 || lc.value_dim % c.num_heads != 0)
      config_fail(source, "value dim hidden_size * expand_v = {} * {} = {} is not a positive "
                          "multiple of num_heads {}", c.hidden_size, lc.expand_v, lc.value_dim, c.num_heads);
    if (c.intermediate_size == 0) {
      // The library's rule: 2/3 of hidden_size * hidden_ratio, rounded up to a multiple of 256.
      const int raw = checked_dim(source, "hidden_size * hidden_ratio * 2/3",
                                  double(c.hidden_size) * c.hidden_ratio * 2.0 / 3.0);
      c.intermediate_size = checked_dim(source, "intermediate_size rounded up to 256",
                                        256.0 * std::ceil(double(raw) / 256.0));
    }
  } else {
    c.num_kv_heads = c.num_heads;
    lc.kv_groups = 1;
    if (c.hidden_size % c.num_heads != 0)
      config_fail(source, "hidden_size {} is not a multiple of num_heads {}", c.hidden_size, c.num_heads);
    lc.key_dim = lc.value_dim = c.hidden_size;
  }
  if (c.intermediate_size < 1)
    config_fail(source, "intermediate_size is {}, expected >= 1", c.intermediate_size);
  lc.head_k_dim = lc.key_dim / c.num_heads;
  lc.head_v_dim = lc.value_dim / c.num_heads;
  const int expansion = lc.feature_map == ModelFeatureMap::kHedgehog ? 2
                        : lc.feature_map == ModelFeatureMap::kDpfp   ? 8  // 2 d, rolled nu = 4 times
                                                                    : 1;
  // The attention layer's limits, checked here so that a bad config is a FormatError that names
  // config.json rather than an error from deep inside the model.
  if (lc.head_k_dim > kMaxHeadDim || lc.head_v_dim > kMaxHeadDim ||
      std::int64_t(lc.head_k_dim) * expansion > kMaxHeadDim)
    config_fail(source, "per-head sizes key {}, value {}, feature {} exceed the limit of {}",
                lc.head_k_dim, lc.head_v_dim, std::int64_t(lc.head_k_dim) * expansion, kMaxHeadDim);
  lc.d_feature = lc.head_k_dim * expansion;
  if (lc.fla_layout) {
    // scale = K^-1/2 with K the key size after the feature map (chunk_linear_attn's default),
    // applied to q in the numerator and, when normalized, in the denominator.
    lc.attn_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(lc.d_feature)));
  } else {
    lc.attn_scale = 1.0f;
  }
  c.family = std::make_shared<LinearConfig>(std::move(lc));
}

std::string config_fields(const ModelConfig& c) {
  const LinearConfig& lc = config_of(c);
  model::FieldWriter w;
  if (lc.fla_layout) {
    w.add("model_type", "\"linear_attn\"");
    w.add("architectures", "[\"LinearAttentionForCausalLM\"]");
    w.add("attn_mode", "\"fused_chunk\"");
    w.number("vocab_size", c.vocab_size);
    w.number("hidden_size", c.hidden_size);
    w.number("num_hidden_layers", c.num_hidden_layers);
    w.number("num_heads", c.num_heads);
    w.number("num_kv_heads", c.num_kv_heads);
    w.number("expand_k", lc.expand_k);
    w.number("expand_v", lc.expand_v);
    w.number("intermediate_size", c.intermediate_size);
    w.string("hidden_act", lc.hidden_act);
    w.string("feature_map", feature_map_name(lc.feature_map));
    w.boolean("tie_feature_map_qk", lc.tie_feature_map_qk);
    w.boolean("norm_q", lc.norm_q);
    w.boolean("norm_k", lc.norm_k);
    w.boolean("norm_feature_map", lc.norm_feature_map);
    w.boolean("elementwise_affine", lc.elementwise_affine);
    w.number("norm_eps", c.norm_eps);
  } else {
    w.add("model_type", "\"transformers_are_rnns\"");
    w.number("vocab_size", c.vocab_size);
    w.number("hidden_size", c.hidden_size);
    w.number("num_hidden_layers", c.num_hidden_layers);
    w.number("num_heads", c.num_heads);
    w.number("intermediate_size", c.intermediate_size);
    w.string("hidden_act", lc.hidden_act);
    w.string("feature_map", feature_map_name(lc.feature_map));
    w.number("norm_eps", c.norm_eps);
    w.number("attn_eps", lc.attn_eps);
  }
  return w.text();
}

}  // namespace recur::models::linear
