// LFM2's config.json in its two forms (transformers' Lfm2Config reads both): the first, as
// Liquid published LFM2 (full_attn_idxs, block_ff_dim, a top-level rope_theta, and the training
// code's block_* / conv_* keys beside them), and the later one of LFM2.5 (layer_types,
// intermediate_size, rope_parameters). The tensors are named where lfm2.cpp reads them.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "model/config_schema.h"
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

using Schema = model::Schema<Lfm2Config>;
using Value = std::function<double(const ModelConfig&, const Lfm2Config&)>;

bool first_form(const ModelConfig&, const Lfm2Config& g) { return g.first_form; }
bool later_form(const ModelConfig&, const Lfm2Config& g) { return !g.first_form; }
bool is_true(const json::Value& v) { return v.is_bool() && v.boolean(); }

// A key of Liquid's training code that repeats another value (block_dim, num_heads): accepted
// when it does, refused by name when it says something else (another model than the one the
// tensors describe); written in the first form, which carries it.
Schema& repeats(Schema& t, const char* key, Value value, const char* what) {
  return t
      .custom(
          key,
          [key, value, what](Fields& f, ModelConfig& c, Lfm2Config& g) {
            const double v = value(c, g);
            f.accept_when(
                key, [v](const json::Value& j) { return j.is_number() && j.number() == v; },
                "repeats the value recur reads elsewhere", what);
          },
          nullptr)
      .written_as([value](const ModelConfig& c, const Lfm2Config& g) {
        return model::config_number(value(c, g));
      })
      .written_when(first_form)
      .for_other_tools();
}

// Which layers are attention, when config.json gives full_attn_idxs (the first form): they must
// agree with layer_types where both are given; neither means every layer is attention
// (transformers' rule).
void read_full_attn_idxs(Fields& f, ModelConfig& c, Lfm2Config& g) {
  const int n = c.num_hidden_layers;
  const json::Value* idx = f.get("full_attn_idxs");
  if (!idx) {
    if (c.mixers.empty()) c.mixers.assign(std::size_t(n), MixerKind::kAttention);
    return;
  }
  if (!idx->is_array())
    config_fail(f.source(), "full_attn_idxs is {}, expected a list of layers", describe_json(*idx));
  std::vector<MixerKind> from_idxs(std::size_t(n), MixerKind::kShortConv);
  for (const auto& v : idx->array()) {
    if (!v.is_integer() || v.integer() < 0 || v.integer() >= n)
      config_fail(f.source(), "full_attn_idxs holds {}, expected layers 0 to {}", describe_json(v),
                  n - 1);
    from_idxs[std::size_t(v.integer())] = MixerKind::kAttention;
  }
  if (!c.mixers.empty() && c.mixers != from_idxs)
    config_fail(f.source(),
                "layer_types and full_attn_idxs name different attention layers: which "
                "one the weights follow is not known");
  g.first_form = c.mixers.empty();
  c.mixers = from_idxs;
}

// The later form writes it null, as transformers saves it beside layer_types.
std::string full_attn_idxs_text(const ModelConfig& c, const Lfm2Config& g) {
  if (!g.first_form) return "null";
  std::string idx;
  for (std::size_t i = 0; i < c.mixers.size(); ++i)
    if (c.mixers[i] == MixerKind::kAttention)
      idx += fmt::format("{}{}", idx.empty() ? "" : ", ", i);
  return "[" + idx + "]";
}

// rope_parameters (transformers 5) or rope_scaling: the default rotary, whose theta they may give.
std::function<void(Fields&, ModelConfig&, Lfm2Config&)> rope_object(const char* key) {
  return [key](Fields& f, ModelConfig&, Lfm2Config& g) {
    const json::Value* rp = f.get(key);
    if (!rp) return;
    if (!rp->is_object())
      config_fail(f.source(), "{} is {}, expected an object", key, describe_json(*rp));
    Fields r(*rp, f.source(), key);
    std::string type = r.string("rope_type", "");
    if (type.empty()) type = r.string("type", "default");
    if (type != "default")
      config_fail(f.source(), "{}.rope_type is '{}': recur runs LFM2's default rotary (no scaling)",
                  key, type);
    g.rope_theta = r.number("rope_theta", g.rope_theta, 1.0 + 1e-9, 1e12);
    r.reject_unknown("recur does not know what it changes in the rotary embedding");
  };
}

// block_ff_dim, which transformers takes over intermediate_size (read before it; the two are
// compared after the table, once the adjustment's fields are read).
void read_block_ff_dim(Fields& f, ModelConfig&, Lfm2Config& g) {
  if (f.get("block_ff_dim")) g.ff_dim = f.integer("block_ff_dim", 12288, 1, kMaxDim);
}

// A file giving both widths is read when intermediate_size repeats block_ff_dim or the width it
// adjusts to (a converter's copy), and refused when it says a third thing.
void check_widths(Fields& f, const Lfm2Config& g) {
  if (!f.has("block_ff_dim") || !f.has("intermediate_size")) return;
  const int inter = f.integer("intermediate_size", 12288, 1, kMaxDim);
  if (inter != g.ff_dim && inter != g.mlp_width())
    config_fail(f.source(),
                "block_ff_dim {} (an MLP of {}) and intermediate_size {} say different "
                "widths",
                g.ff_dim, g.mlp_width(), inter);
}

// make-model writes the later form unless --first-form; the attention layers are every
// --full-attention-interval-th (its default, 2, is declared in make_options()).
bool made_first(const model::MakeOptions& o) { return o.flag("first-form"); }
bool made_later(const model::MakeOptions& o) { return !o.flag("first-form"); }

bool made_attention(const model::MakeOptions& o, int layer) {
  return (layer + 1) % o.integer("full-attention-interval", 1, 4096) == 0;
}

std::string made_layer_types(const model::MakeOptions& o, const ModelConfig& c, const Lfm2Config&) {
  std::string types;
  for (int i = 0; i < c.num_hidden_layers; ++i)
    types += fmt::format("{}\"{}\"", i ? ", " : "", made_attention(o, i) ? "full_attention" : "conv");
  return "[" + types + "]";
}

std::string made_full_attn_idxs(const model::MakeOptions& o, const ModelConfig& c, const Lfm2Config&) {
  std::string idxs;
  for (int i = 0; i < c.num_hidden_layers; ++i)
    if (made_attention(o, i)) idxs += fmt::format("{}{}", idxs.empty() ? "" : ", ", i);
  return "[" + idxs + "]";
}

// transformers' Lfm2Config in both forms. The fields recur wrote before it wrote the rest of
// Liquid's keys keep their order, which the fingerprint of saved states hashes; the first form's
// training keys come last.
const Schema& schema() {
  static const Schema s = [] {
    const auto hidden = [](const ModelConfig& c, const Lfm2Config&) {
      return double(c.hidden_size);
    };
    Schema t;
    t.written("model_type", "\"lfm2\"")
        .written("architectures", "[\"Lfm2ForCausalLM\"]")
        .integer("vocab_size", &ModelConfig::vocab_size, 65536, 1, 1 << 24).common_option("vocab")
        .integer("hidden_size", &ModelConfig::hidden_size, 2560, 1, kMaxDim).common_option("hidden")
        .integer("num_hidden_layers", &ModelConfig::num_hidden_layers, 32, 1, 4096)
        .common_option("layers")
        .integer("num_attention_heads", &Lfm2Config::n_heads, 32, 1, kMaxHeads).common_option("heads")
        .integer("num_key_value_heads", &Lfm2Config::n_kv_heads, 8, 1, kMaxHeads)
        .option("attn-kv-heads", "the attention layers' kv heads (default: as many as heads)",
                [](const ModelConfig&, const Lfm2Config& g) { return double(g.n_heads); })
        // 0: hidden_size / num_attention_heads, as transformers takes it when absent.
        .integer("head_dim", &Lfm2Config::head_dim, 0, 2, model::kMaxHeadDim)
        .written_when([](const ModelConfig&, const Lfm2Config& g) { return g.head_dim > 0; })
        .option("head-dim", "the attention layers' head size (default hidden / heads)")
        .number("norm_eps", &ModelConfig::norm_eps, 1e-5, 0.0, 1.0)
        .integer("conv_L_cache", &Lfm2Config::conv_L, 3, 1, 64)
        .option("conv-taps", "the convolution's taps (conv_L_cache)", "3")
        .boolean("conv_bias", &Lfm2Config::conv_bias, false)
        .flag("conv-bias", "biases in the convolution blocks (conv_bias)")
        // The MLP's width (the later form's name, then the first form's, which wins) and its
        // adjustment; make-model's is --intermediate before the adjustment, or three times hidden.
        .integer("intermediate_size", &Lfm2Config::ff_dim, 12288, 1, kMaxDim)
        .written_when(later_form)
        .common_option("intermediate", true, [](const ModelConfig& c, const Lfm2Config&) {
          return 3.0 * c.hidden_size;
        })
        .made_when(made_later)
        .custom("block_ff_dim", read_block_ff_dim, nullptr)
        .written_as(
            [](const ModelConfig&, const Lfm2Config& g) { return model::config_number(g.ff_dim); })
        .written_when(first_form)
        .made_from([](const model::MakeOptions&, const ModelConfig&, const Lfm2Config& g) {
          return double(g.ff_dim);
        })
        .made_when(made_first)
        .boolean("block_auto_adjust_ff_dim", &Lfm2Config::auto_adjust, true)
        .flag("no-ff-adjust", "the MLP width as given (block_auto_adjust_ff_dim false)", false)
        // Absent: transformers' default 1.0; null: no multiplier (and no rounding to the multiple).
        .custom(
            "block_ffn_dim_multiplier",
            [](Fields& f, ModelConfig&, Lfm2Config& g) {
              g.ffn_multiplier = f.number("block_ffn_dim_multiplier", 1.0, 1e-6, 1e6);
              g.has_multiplier = !f.null("block_ffn_dim_multiplier");
            },
            nullptr)
        .written_as([](const ModelConfig&, const Lfm2Config& g) {
          return g.has_multiplier ? model::config_number(g.ffn_multiplier) : std::string("null");
        })
        .made_as("1.0")
        .integer("block_multiple_of", &Lfm2Config::multiple_of, 256, 1, kMaxDim)
        .option("ff-multiple-of", "block_multiple_of, the MLP width's rounding", "16", 1 << 20)
        .integer("max_position_embeddings", &Lfm2Config::max_position_embeddings, 128000, 0,
                 1 << 30)
        .boolean("tie_word_embeddings", &ModelConfig::tie_word_embeddings, true)
        .not_written()
        .common_flag("tie-embeddings")
        // transformers' Lfm2Config reads tie_embedding over tie_word_embeddings.
        .custom(
            "tie_embedding",
            [](Fields& f, ModelConfig& c, Lfm2Config&) {
              const bool tie = c.tie_word_embeddings;
              c.tie_word_embeddings = f.boolean("tie_embedding", tie);
              if (f.get("tie_word_embeddings") && f.get("tie_embedding") &&
                  tie != c.tie_word_embeddings)
                config_fail(f.source(), "tie_embedding is {} but tie_word_embeddings is {}",
                            c.tie_word_embeddings, tie);
            },
            nullptr)
        // Which layers attend: layer_types (the later form), full_attn_idxs (the first; null in
        // the later, as transformers saves it).
        .list("layer_types", &ModelConfig::mixers,
              {{MixerKind::kShortConv, "conv"}, {MixerKind::kAttention, "full_attention"}},
              &ModelConfig::num_hidden_layers, "num_hidden_layers")
        .written_when(later_form)
        .made_as(made_layer_types)
        .made_when(made_later)
        .custom("full_attn_idxs", read_full_attn_idxs, nullptr)
        .written_as(full_attn_idxs_text)
        .for_other_tools(later_form)
        .made_as(made_full_attn_idxs)
        .made_when(made_first)
        // The rotary base: rope_theta (or theta) at the top, which rope_parameters overrides.
        .number("rope_theta", &Lfm2Config::rope_theta, 1000000, 1.0 + 1e-9, 1e12)
        .written_when(first_form)
        .custom(
            "theta",
            [](Fields& f, ModelConfig&, Lfm2Config& g) {
              g.rope_theta = f.number("theta", g.rope_theta, 1.0 + 1e-9, 1e12);
            },
            nullptr)
        .custom("rope_parameters", rope_object("rope_parameters"), nullptr)
        .written_as([](const ModelConfig&, const Lfm2Config& g) {
          return fmt::format("{{\"rope_type\": \"default\", \"rope_theta\": {}}}",
                             model::config_number(g.rope_theta));
        })
        .written_when(later_form)
        .custom("rope_scaling", rope_object("rope_scaling"), nullptr)
        .custom(
            "num_experts",
            [](Fields& f, ModelConfig&, Lfm2Config&) {
              if (f.get("num_experts"))
                config_fail(f.source(),
                            "num_experts is set: an LFM2 mixture-of-experts configuration, "
                            "which recur does not run");
            },
            nullptr)
        // The training code's keys, which Liquid's files of the first form carry.
        .accepted_when("block_use_swiglu", is_true, "true: what transformers' Lfm2 always does",
                       "false would be another MLP than transformers' SwiGLU")
        .written_as("true")
        .written_when(first_form)
        .for_other_tools()
        .accepted_when("use_pos_enc", is_true, "true: what transformers' Lfm2 always does",
                       "false would drop the rotary embedding transformers' LFM2 always applies")
        .written_as("true")
        .written_when(first_form)
        .for_other_tools()
        .accepted("block_mlp_init_scale", kInit)
        .written_as("1.0")
        .written_when(first_form)
        .for_other_tools()
        .accepted("block_out_init_scale", kInit)
        .written_as("1.0")
        .written_when(first_form)
        .for_other_tools()
        .accepted("block_use_xavier_init", kInit)
        .written_as("true")
        .written_when(first_form)
        .for_other_tools()
        .accepted("conv_use_xavier_init", kInit)
        .written_as("true")
        .written_when(first_form)
        .for_other_tools();
    repeats(t, "block_dim", hidden, "the block width is hidden_size in transformers' LFM2");
    repeats(t, "conv_dim", hidden, "the convolution's width is hidden_size in transformers' LFM2");
    repeats(t, "conv_dim_out", hidden,
            "the convolution's width is hidden_size in transformers' LFM2");
    repeats(
        t, "num_heads", [](const ModelConfig&, const Lfm2Config& g) { return double(g.n_heads); },
        "the attention heads are num_attention_heads");
    repeats(
        t, "block_norm_eps", [](const ModelConfig& c, const Lfm2Config&) { return c.norm_eps; },
        "every RMSNorm of transformers' LFM2 takes norm_eps");
    return t;
  }();
  return s;
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

void read_config(const std::string& type, const json::Value&, Fields& f, ModelConfig& c) {
  if (type == "lfm2_moe")
    config_fail(f.source(),
                "model_type is 'lfm2_moe' (LFM2-8B-A1B and the other LFM2 "
                "mixture-of-experts models): recur runs the dense LFM2 and LFM2.5, not "
                "experts");
  Lfm2Config g;
  c.type = "lfm2";
  c.mixers.clear();
  schema().read(f, c, g);
  check_widths(f, g);
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

std::string config_fields(const ModelConfig& c, bool fingerprint) {
  model::FieldWriter w;
  schema().write(w, c, config_of(c), fingerprint);
  return w.text();
}

std::vector<model::MakeOption> make_options() {
  auto out = schema().make_options({"lfm2"});
  out.push_back({"full-attention-interval", "2", "every N-th layer is full attention",
                 false, {"lfm2"}});
  out.push_back({"first-form",
                 nullptr,
                 "write the first config form (full_attn_idxs, "
                 "block_ff_dim, rope_theta) instead of the later one",
                 true,
                 {"lfm2"}});
  return out;
}

std::string make_config(const model::MakeOptions& o) {
  return "{\"model_type\": \"lfm2\", " + schema().make_fields(o) + "}";
}

}  // namespace recur::models::lfm2
