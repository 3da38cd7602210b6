// config.json of the linear-attention family: flash-linear-attention's linear_attn, field by field
// as its configuration class reads it, and the paper's model (transformers_are_rnns); their
// derived sizes and the lines make-model writes.
#include <cmath>
#include <memory>
#include <stdexcept>
#include <utility>

#include "model/config_schema.h"
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

namespace {

std::vector<std::pair<ModelFeatureMap, const char*>> feature_map_names() {
  std::vector<std::pair<ModelFeatureMap, const char*>> out;
  for (const auto& f : kFeatureMapNames) out.emplace_back(f.map, f.name);
  return out;
}

}  // namespace

// fla's linear_attn: every field once, in the order config.json is written; make-model's
// options beside the fields they set.
const model::Schema<LinearConfig>& linear_attn_schema() {
  static const model::Schema<LinearConfig> s = [] {
    model::Schema<LinearConfig> t;
    t.written("model_type", "\"linear_attn\"")
        .written("architectures", "[\"LinearAttentionForCausalLM\"]")
        .same_function("attn_mode", {"chunk", "fused_chunk", "fused_recurrent"}, "fused_chunk",
                       "fla's kernel choice: every mode computes the same function")
        .integer("vocab_size", &ModelConfig::vocab_size, 32000, 1, 1 << 24).common_option("vocab")
        .integer("hidden_size", &ModelConfig::hidden_size, 2048, 1, kMaxDim).common_option("hidden")
        .integer("num_hidden_layers", &ModelConfig::num_hidden_layers, 24, 1, 4096)
        .common_option("layers")
        .integer("num_heads", &ModelConfig::num_heads, 4, 1, kMaxDim).common_option("heads")
        .integer("num_kv_heads", &ModelConfig::num_kv_heads, 0, 1, kMaxDim)
        .option("kv-heads", "key/value heads (default: as many as heads)", "", 1 << 16)
        .number("expand_k", &LinearConfig::expand_k, 1.0, 1e-6, 1e6)
        .option("expand-k", "key width / hidden size (default 1)")
        .number("expand_v", &LinearConfig::expand_v, 1.0, 1e-6, 1e6)
        .option("expand-v", "value width / hidden size (default 1)")
        .integer("intermediate_size", &ModelConfig::intermediate_size, 0, 1, kMaxDim)
        .common_option("intermediate", true)
        .number("hidden_ratio", &LinearConfig::hidden_ratio, 4, 1e-6, 1e6).not_written()
        .fixed("hidden_act", "swish", "the linear_attn MLP supports only swish")
        .choice("feature_map", &LinearConfig::feature_map, ModelFeatureMap::kElementwiseProduct,
                feature_map_names())
        .option("feature-map", "elu, relu, identity, hedgehog, t2r, dpfp, elementwise_product",
                "elu")
        .boolean("tie_feature_map_qk", &LinearConfig::tie_feature_map_qk, false)
        .flag("tie-feature-maps", "one learned feature map for q and k")
        .boolean("norm_q", &LinearConfig::norm_q, false)
        .flag("norm-q", "norm_q: divide phi(q) by its sum")
        .boolean("norm_k", &LinearConfig::norm_k, false)
        .flag("norm-k", "norm_k: divide phi(k) by its sum")
        .boolean("norm_feature_map", &LinearConfig::norm_feature_map, false)
        .flag("normalized", "the normalized form (norm_feature_map)")
        // null means false here, as in the library (RMSNorm(elementwise_affine=None) has no
        // weight).
        .boolean_or_null("elementwise_affine", &LinearConfig::elementwise_affine, true, false)
        .flag("no-affine", "no weight in the output norm", false)
        .number("norm_eps", &ModelConfig::norm_eps, 1e-6, 0.0, 1.0)
        .integer("max_position_embeddings", &LinearConfig::max_position_embeddings, 2048, 0, 1 << 30)
        .not_written()  // no positional encoding: unused
        .boolean("tie_word_embeddings", &ModelConfig::tie_word_embeddings, false).not_written()
        .common_flag("tie-embeddings");
    return t;
  }();
  return s;
}

// The paper's model (Katharopoulos et al.), with its own defaults.
const model::Schema<LinearConfig>& transformers_are_rnns_schema() {
  static const model::Schema<LinearConfig> s = [] {
    model::Schema<LinearConfig> t;
    t.written("model_type", "\"transformers_are_rnns\"")
        .integer("vocab_size", &ModelConfig::vocab_size, 256, 1, 1 << 24).common_option("vocab")
        .integer("hidden_size", &ModelConfig::hidden_size, 512, 1, kMaxDim).common_option("hidden")
        .integer("num_hidden_layers", &ModelConfig::num_hidden_layers, 6, 1, 4096)
        .common_option("layers")
        .integer("num_heads", &ModelConfig::num_heads, 8, 1, kMaxDim).common_option("heads")
        // Its default, 4 * hidden_size, depends on another field: read apart.
        .integer("intermediate_size", &ModelConfig::intermediate_size, 0, 1, kMaxDim).read_apart()
        .common_option("intermediate", true)
        .choice("hidden_act", &LinearConfig::hidden_act, std::string("relu"),
                {{"relu", "relu"}, {"gelu", "gelu"}})
        .option("hidden-act", "relu or gelu (default relu)")
        .choice("feature_map", &LinearConfig::feature_map, ModelFeatureMap::kElu,
                {{ModelFeatureMap::kElu, "elu"}, {ModelFeatureMap::kRelu, "relu"}},
                " for this model type")
        .option("feature-map", "elu, relu, identity, hedgehog, t2r, dpfp, elementwise_product",
                "elu")
        .number("norm_eps", &ModelConfig::norm_eps, 1e-5, 0.0, 1.0)
        .number("attn_eps", &LinearConfig::attn_eps, 1e-6, 0.0, 1.0)
        .boolean("tie_word_embeddings", &ModelConfig::tie_word_embeddings, false).not_written()
        .common_flag("tie-embeddings");
    return t;
  }();
  return s;
}

void read_config(const std::string& type, model::Fields& f, ModelConfig& c) {
  const std::string& source = f.source();
  LinearConfig lc;
  if (type == "linear_attn") {
    c.architecture = Architecture::kLinearAttn;
    linear_attn_schema().read(f, c, lc);
    if (f.get("attn"))
      config_fail(source, "attn is set: hybrid models with softmax-attention layers are not supported");
    lc.attn_eps = 1e-10;
  } else {
    c.architecture = Architecture::kTransformersAreRnns;
    transformers_are_rnns_schema().read(f, c, lc);
    c.intermediate_size = f.integer("intermediate_size", 4 * c.hidden_size, 1, kMaxDim);
    lc.norm_feature_map = true;
    lc.elementwise_affine = false;
  }
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
                                  double(c.hidden_size) * lc.hidden_ratio * 2.0 / 3.0);
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
  (lc.fla_layout ? linear_attn_schema() : transformers_are_rnns_schema()).write(w, c, lc);
  return w.text();
}

}  // namespace recur::models::linear
