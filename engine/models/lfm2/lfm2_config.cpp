// LFM2's config.json in its two forms (transformers' Lfm2Config reads both): the first, as
// Liquid published LFM2 (full_attn_idxs, block_ff_dim, a top-level rope_theta, and the training
// code's block_* / conv_* keys beside them), and the later one of LFM2.5 (layer_types,
// intermediate_size, rope_parameters). The tensors are named where lfm2.cpp reads them.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "models/lfm2/lfm2.h"
#include "recur/error.h"

namespace recur::models::lfm2 {

using model::config_fail;
using model::describe_json;
using model::Fields;
using model::kMaxDim;

namespace {

constexpr int kMaxHeads = 1 << 16;

constexpr const char* kInit = "how the training code initialised the weights: training only";
const std::vector<model::Accepted> kAccepted = {
    {"block_mlp_init_scale", kInit}, {"block_out_init_scale", kInit},
    {"block_use_xavier_init", kInit}, {"conv_use_xavier_init", kInit},
    {"max_position_embeddings", "the context trained on; recur's rotary has no table to size"}};

// A key of Liquid's training code that repeats another value: accepted when it does, refused
// by name when it says something else (another model than the one the tensors describe).
void accept_same(Fields& f, const char* key, double value, const char* what) {
  f.accept_when(
      key, [value](const json::Value& v) { return v.is_number() && v.number() == value; },
      "repeats the value recur reads elsewhere", what);
}

void accept_true(Fields& f, const char* key, const char* refusal) {
  f.accept_when(
      key, [](const json::Value& v) { return v.is_bool() && v.boolean(); },
      "true: what transformers' Lfm2 always does", refusal);
}

// Which layers are attention: layer_types (the later form) or full_attn_idxs (the first). Both
// present and non-null must agree; neither means every layer is attention (transformers' rule).
void read_layers(Fields& f, const std::string& source, ModelConfig& c, Lfm2Config& g) {
  const int n = c.num_hidden_layers;
  std::vector<MixerKind> from_types, from_idxs;
  if (const json::Value* lt = f.get("layer_types")) {
    if (!lt->is_array() || lt->array().size() != std::size_t(n))
      config_fail(source, "layer_types is {}, expected {} entries (num_hidden_layers)",
                  describe_json(*lt), n);
    for (const auto& v : lt->array()) {
      if (v.is_string() && v.string() == "conv") from_types.push_back(MixerKind::kShortConv);
      else if (v.is_string() && v.string() == "full_attention") from_types.push_back(MixerKind::kAttention);
      else config_fail(source, "layer_types holds {}, expected conv or full_attention", describe_json(v));
    }
  }
  if (const json::Value* idx = f.get("full_attn_idxs")) {
    if (!idx->is_array()) config_fail(source, "full_attn_idxs is {}, expected a list of layers", describe_json(*idx));
    from_idxs.assign(std::size_t(n), MixerKind::kShortConv);
    for (const auto& v : idx->array()) {
      if (!v.is_integer() || v.integer() < 0 || v.integer() >= n)
        config_fail(source, "full_attn_idxs holds {}, expected layers 0 to {}", describe_json(v), n - 1);
      from_idxs[std::size_t(v.integer())] = MixerKind::kAttention;
    }
  }
  if (!from_types.empty() && !from_idxs.empty() && from_types != from_idxs)
    config_fail(source, "layer_types and full_attn_idxs name different attention layers: which "
                        "one the weights follow is not known");
  g.first_form = from_types.empty() && !from_idxs.empty();
  if (!from_types.empty()) c.mixers = from_types;
  else if (!from_idxs.empty()) c.mixers = from_idxs;
  else c.mixers.assign(std::size_t(n), MixerKind::kAttention);
}

// rope_parameters (transformers 5) or rope_scaling, else the top-level rope_theta or theta.
void read_rope(Fields& f, const std::string& source, Lfm2Config& g) {
  g.rope_theta = f.number("rope_theta", 1000000, 1.0 + 1e-9, 1e12);
  g.rope_theta = f.number("theta", g.rope_theta, 1.0 + 1e-9, 1e12);
  for (const char* key : {"rope_parameters", "rope_scaling"}) {
    const json::Value* rp = f.get(key);
    if (!rp) continue;
    if (!rp->is_object()) config_fail(source, "{} is {}, expected an object", key, describe_json(*rp));
    Fields r(*rp, source, key);
    std::string type = r.string("rope_type", "");
    if (type.empty()) type = r.string("type", "default");
    if (type != "default")
      config_fail(source, "{}.rope_type is '{}': recur runs LFM2's default rotary (no scaling)",
                  key, type);
    g.rope_theta = r.number("rope_theta", g.rope_theta, 1.0 + 1e-9, 1e12);
    r.reject_unknown("recur does not know what it changes in the rotary embedding");
  }
}

// The MLP's width and its adjustment. transformers takes block_ff_dim over intermediate_size
// when both are given; a file giving both is read when intermediate_size repeats block_ff_dim or
// the width it adjusts to (a converter's copy), and refused when it says a third thing.
void read_mlp(Fields& f, const json::Value& root, const std::string& source, Lfm2Config& g) {
  g.auto_adjust = f.boolean("block_auto_adjust_ff_dim", true);
  g.multiple_of = f.integer("block_multiple_of", 256, 1, kMaxDim);
  // Absent: transformers' default 1.0; null: no multiplier (and no rounding to the multiple).
  g.has_multiplier = !(root.find("block_ffn_dim_multiplier") && !f.get("block_ffn_dim_multiplier"));
  g.ffn_multiplier = f.number("block_ffn_dim_multiplier", 1.0, 1e-6, 1e6);
  const bool block = f.get("block_ff_dim") != nullptr;
  const int inter = f.integer("intermediate_size", 12288, 1, kMaxDim);
  g.ff_dim = block ? f.integer("block_ff_dim", 12288, 1, kMaxDim) : inter;
  if (block && f.get("intermediate_size") && inter != g.ff_dim && inter != g.mlp_width())
    config_fail(source, "block_ff_dim {} (an MLP of {}) and intermediate_size {} say different "
                        "widths", g.ff_dim, g.mlp_width(), inter);
  accept_true(f, "block_use_swiglu", "false would be another MLP than transformers' SwiGLU");
}

}  // namespace

int Lfm2Config::mlp_width() const {
  if (!auto_adjust) return ff_dim;
  // Python's int(2 * ff / 3) (true division, then truncation), as transformers' Lfm2MLP.
  auto width = std::int64_t(double(2 * std::int64_t(ff_dim)) / 3.0);
  if (has_multiplier) {
    width = std::int64_t(ffn_multiplier * double(width));
    width = std::int64_t(multiple_of) * ((width + multiple_of - 1) / multiple_of);
  }
  return int(std::clamp<std::int64_t>(width, 0, std::int64_t(kMaxDim) + 1));
}

const Lfm2Config& config_of(const ModelConfig& c) {
  const auto* g = dynamic_cast<const Lfm2Config*>(c.family.get());
  if (!g) throw std::logic_error("[Model] internal: an LFM2 configuration without its fields");
  return *g;
}

void read_config(const std::string& type, const json::Value& root, Fields& f, ModelConfig& c) {
  const std::string& source = f.source();
  if (type == "lfm2_moe")
    config_fail(source, "model_type is 'lfm2_moe' (LFM2-8B-A1B and the other LFM2 "
                        "mixture-of-experts models): recur runs the dense LFM2 and LFM2.5, not "
                        "experts");
  if (f.get("num_experts"))
    config_fail(source, "num_experts is set: an LFM2 mixture-of-experts configuration, which "
                        "recur does not run");
  Lfm2Config g;
  c.type = "lfm2";
  c.vocab_size = f.integer("vocab_size", 65536, 1, 1 << 24);
  c.hidden_size = f.integer("hidden_size", 2560, 1, kMaxDim);
  c.num_hidden_layers = f.integer("num_hidden_layers", 32, 1, 4096);
  g.n_heads = f.integer("num_attention_heads", 32, 1, kMaxHeads);
  g.n_kv_heads = f.integer("num_key_value_heads", 8, 1, kMaxHeads);
  g.head_dim = f.integer("head_dim", 0, 2, model::kMaxHeadDim);
  c.norm_eps = f.number("norm_eps", 1e-5, 0.0, 1.0);
  g.conv_L = f.integer("conv_L_cache", 3, 1, 64);
  g.conv_bias = f.boolean("conv_bias", false);
  g.max_position_embeddings = f.integer("max_position_embeddings", 128000, 0, 1 << 30);
  // transformers' Lfm2Config reads tie_embedding over tie_word_embeddings.
  const bool tie = f.boolean("tie_word_embeddings", true);
  c.tie_word_embeddings = f.boolean("tie_embedding", tie);
  if (root.find("tie_word_embeddings") && root.find("tie_embedding") && tie != c.tie_word_embeddings)
    config_fail(source, "tie_embedding is {} but tie_word_embeddings is {}", c.tie_word_embeddings, tie);
  read_layers(f, source, c, g);
  read_rope(f, source, g);
  read_mlp(f, root, source, g);
  // The training code's names of the same sizes.
  accept_same(f, "block_dim", c.hidden_size, "the block width is hidden_size in transformers' LFM2");
  accept_same(f, "conv_dim", c.hidden_size, "the convolution's width is hidden_size in transformers' LFM2");
  accept_same(f, "conv_dim_out", c.hidden_size, "the convolution's width is hidden_size in transformers' LFM2");
  accept_same(f, "num_heads", g.n_heads, "the attention heads are num_attention_heads");
  accept_same(f, "block_norm_eps", c.norm_eps, "every RMSNorm of transformers' LFM2 takes norm_eps");
  accept_true(f, "use_pos_enc", "false would drop the rotary embedding transformers' LFM2 always applies");
  f.accept(kAccepted);
  c.family = std::make_shared<Lfm2Config>(g);
}

void resolve(ModelConfig& c, const std::string& source) {
  if (!c.family) config_fail(source, "an LFM2 configuration without its fields");
  Lfm2Config g = config_of(c);
  if (c.mixers.size() != std::size_t(c.num_hidden_layers))
    config_fail(source, "{} layer types for {} layers", c.mixers.size(), c.num_hidden_layers);
  if (g.n_heads % g.n_kv_heads != 0)
    config_fail(source, "num_attention_heads {} is not a multiple of num_key_value_heads {}",
                g.n_heads, g.n_kv_heads);
  if (g.head_dim == 0 && c.hidden_size % g.n_heads != 0)
    config_fail(source, "hidden_size {} is not num_attention_heads {} heads of one size (give "
                        "head_dim)", c.hidden_size, g.n_heads);
  const int d = g.head_size(c.hidden_size);
  if (d % 2 != 0 || std::int64_t(g.n_heads) * d > kMaxDim)
    config_fail(source, "the attention head size {} with {} heads: expected an even size within "
                        "range", d, g.n_heads);
  const int width = g.mlp_width();
  if (width < 1 || width > kMaxDim)
    config_fail(source, "the MLP width derived from {} {} is {}, out of range",
                g.first_form ? "block_ff_dim" : "intermediate_size", g.ff_dim, width);
  c.intermediate_size = width;
  c.family = std::make_shared<Lfm2Config>(g);
}

std::string config_fields(const ModelConfig& c) {
  const Lfm2Config& g = config_of(c);
  model::FieldWriter w;
  w.add("model_type", "\"lfm2\"");
  w.add("architectures", "[\"Lfm2ForCausalLM\"]");
  w.number("vocab_size", c.vocab_size);
  w.number("hidden_size", c.hidden_size);
  w.number("num_hidden_layers", c.num_hidden_layers);
  w.number("num_attention_heads", g.n_heads);
  w.number("num_key_value_heads", g.n_kv_heads);
  if (g.head_dim > 0) w.number("head_dim", g.head_dim);
  w.number("norm_eps", c.norm_eps);
  w.number("conv_L_cache", g.conv_L);
  w.boolean("conv_bias", g.conv_bias);
  w.number(g.first_form ? "block_ff_dim" : "intermediate_size", g.ff_dim);
  w.boolean("block_auto_adjust_ff_dim", g.auto_adjust);
  w.add("block_ffn_dim_multiplier",
        g.has_multiplier ? model::config_number(g.ffn_multiplier) : std::string("null"));
  w.number("block_multiple_of", g.multiple_of);
  w.number("max_position_embeddings", g.max_position_embeddings);
  if (g.first_form) {
    std::string idx;
    for (std::size_t i = 0; i < c.mixers.size(); ++i)
      if (c.mixers[i] == MixerKind::kAttention) idx += fmt::format("{}{}", idx.empty() ? "" : ", ", i);
    w.add("full_attn_idxs", "[" + idx + "]");
    w.number("rope_theta", g.rope_theta);
    return w.text();
  }
  std::string types;
  for (std::size_t i = 0; i < c.mixers.size(); ++i)
    types += fmt::format("{}\"{}\"", i ? ", " : "",
                         c.mixers[i] == MixerKind::kAttention ? "full_attention" : "conv");
  w.add("layer_types", "[" + types + "]");
  w.add("rope_parameters", fmt::format("{{\"rope_type\": \"default\", \"rope_theta\": {}}}",
                                       model::config_number(g.rope_theta)));
  return w.text();
}

}  // namespace recur::models::lfm2
