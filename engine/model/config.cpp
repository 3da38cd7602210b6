// config.json: the fields every model has (eos_token_id, quantization_config, the fields of
// tooling and training that change nothing), and the family's own, which its module reads
// (engine/models/<family>/). Unknown fields are refused by name.
#include <fmt/format.h>

#include <vector>

#include "model/config_fields.h"
#include "model/family.h"
#include "recur/error.h"
#include "recur/model.h"
#include "util/file.h"
#include "util/json.h"

namespace recur {

using model::config_fail;
using model::Fields;
using model::kMaxDim;

namespace {

// The reasons a Hugging Face config's common fields change nothing recur computes.
constexpr const char* kIdentity =
    "names the checkpoint, its classes, its saved dtype or the tools that wrote it; the tensors' "
    "own dtypes and the family's fields decide the model";
constexpr const char* kGeneration =
    "a special token or a sampling default of transformers' generate; recur takes these from the "
    "command line (eos_token_id, which it does read, is apart)";
constexpr const char* kTraining =
    "a training, output or kernel switch: initialisation, caching, what the forward pass returns, "
    "fused training kernels; the function computed is the same";

// Fields of a Hugging Face config that describe training, saving or tooling, not the forward
// pass: accepted, each with its reason (docs/models.md, "Which fields are accepted").
const std::vector<model::Accepted> kAccepted = {
    {"architectures", kIdentity}, {"model_type", kIdentity}, {"torch_dtype", kIdentity},
    {"dtype", kIdentity}, {"transformers_version", kIdentity}, {"_name_or_path", kIdentity},
    {"auto_map", kIdentity}, {"tokenizer_class", kIdentity}, {"id2label", kIdentity},
    {"label2id", kIdentity}, {"problem_type", kIdentity}, {"finetuning_task", kIdentity},
    {"task_specific_params", kIdentity}, {"prefix", kIdentity}, {"use_bfloat16", kIdentity},
    {"bos_token_id", kGeneration}, {"pad_token_id", kGeneration}, {"sep_token_id", kGeneration},
    {"decoder_start_token_id", kGeneration}, {"max_length", kGeneration},
    {"min_length", kGeneration}, {"do_sample", kGeneration}, {"num_beams", kGeneration},
    {"temperature", kGeneration}, {"top_k", kGeneration}, {"top_p", kGeneration},
    {"repetition_penalty", kGeneration}, {"length_penalty", kGeneration},
    {"no_repeat_ngram_size", kGeneration}, {"num_return_sequences", kGeneration},
    {"early_stopping", kGeneration}, {"bad_words_ids", kGeneration},
    {"use_cache", kTraining}, {"initializer_range", kTraining}, {"return_dict", kTraining},
    {"output_hidden_states", kTraining}, {"output_attentions", kTraining},
    {"torchscript", kTraining}, {"use_return_dict", kTraining},
    {"chunk_size_feed_forward", kTraining}, {"is_encoder_decoder", kTraining},
    {"is_decoder", kTraining}, {"tie_encoder_decoder", kTraining}, {"pruned_heads", kTraining},
    {"add_cross_attention", kTraining}, {"tf_legacy_loss", kTraining},
    // Where the fused norm's numerics matter (fla's GLA, RetNet, HGRN2; RWKV-7's l2 norm) the
    // family reads it before this table is consulted.
    {"fuse_norm", "fla's fused RMSNorm kernel: the same function where the family does not read it"},
    {"fuse_swiglu", kTraining}, {"fuse_cross_entropy", kTraining},
    {"fuse_linear_cross_entropy", kTraining}, {"use_l2warp", kTraining}};

// quantization_config as `recur quantize` writes it: {"quant_method": "recur", "format": "q8"
// or "q4", "block_size": 32, "scale_dtype": "float16", "head_format": ...}. Another tool's
// quantization (gptq, awq, bitsandbytes...) stores other tensors: refused by name, not guessed.
void read_quantization(const json::Value& q, const std::string& source, ModelConfig& c) {
  if (!q.is_object()) config_fail(source, "quantization_config is {}, expected an object", q.kind_name());
  for (const auto& [key, value] : q.object()) {
    (void)value;
    if (key != "quant_method" && key != "format" && key != "block_size" &&
        key != "scale_dtype" && key != "head_format")
      config_fail(source, "unknown field 'quantization_config.{}': recur does not know what it changes "
                   "in the model", key);
  }
  const auto text = [&](const char* name) -> std::string {
    const json::Value* v = q.find(name);
    if (!v || v->is_null()) return "";
    if (!v->is_string())
      config_fail(source, "quantization_config.{} is {}, expected a string", name, v->kind_name());
    return v->string();
  };
  const std::string method = text("quant_method");
  if (method != "recur")
    config_fail(source, "quantization_config.quant_method is '{}': recur reads the quantized models it "
                 "writes itself (quant_method \"recur\", `recur quantize`), not another tool's",
         method);
  c.quantization = text("format");
  if (c.quantization.empty()) config_fail(source, "quantization_config.format is missing (q8 or q4)");
  const std::string head = text("head_format");
  c.quantization_head = head.empty() ? c.quantization : head;
  const json::Value* block = q.find("block_size");
  if (!block || !block->is_integer() || block->integer() != 32)
    config_fail(source, "quantization_config.block_size is {}, expected 32 (the only block size recur's "
                 "kernels take)",
         block ? (block->is_number() ? fmt::format("{}", block->number()) : block->kind_name())
               : "missing");
  const std::string scales = text("scale_dtype");
  if (!scales.empty() && scales != "float16")
    config_fail(source, "quantization_config.scale_dtype is '{}', expected float16", scales);
}

}  // namespace

std::string ModelConfig::model_type() const {
  return model::family_of(*this).model_type(*this);
}

ModelConfig ModelConfig::from_file(const std::string& path) {
  const auto text = detail::read_file(path);
  if (!text) throw FormatError(fmt::format("[ModelConfig] {}: cannot read the file", path));
  return from_json(*text, path);
}

ModelConfig ModelConfig::from_json(const std::string& text, const std::string& source) {
  const json::Value root = json::parse(text, "ModelConfig] " + source + ": [config",
                                          json::ParseOptions{true});
  if (!root.is_object()) config_fail(source, "the config is {}, not an object", root.kind_name());
  Fields f(root, source);
  ModelConfig c;
  const std::string type = f.string("model_type", "");
  const model::Family* family = model::family_reading(type, root);
  if (family) {
    family->read_config(type, root, f, c);
  } else if (type == "gpt2") {
    config_fail(source, "model_type is 'gpt2' without Based's mixer fields: a softmax GPT-2, which "
                        "recur does not run");
  } else if (type.empty()) {
    config_fail(source, "model_type is missing; recur reads {}", model::known_model_types());
  } else {
    config_fail(source, "model_type is '{}'; recur reads {}", type, model::known_model_types());
  }
  if (const json::Value* eos = f.get("eos_token_id")) {
    const auto add = [&](const json::Value& v) {
      if (!v.is_integer() || v.integer() < 0 || v.integer() >= c.vocab_size)
        config_fail(source, "eos_token_id holds {}, expected ids in 0 to vocab_size - 1 = {}",
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
  f.accept(kAccepted);
  f.reject_unknown("recur does not know what it changes in the model, so it will not guess "
                   "(remove it if it does not affect inference)");
  c.resolve(source);
  return c;
}

void ModelConfig::resolve(const std::string& source) {
  const auto quant_ok = [](const std::string& f) { return f == "q8" || f == "q4"; };
  if (!quantization.empty() || !quantization_head.empty()) {
    if (!quant_ok(quantization))
      config_fail(source, "quantization_config.format is '{}', expected q8 or q4", quantization);
    if (quantization_head.empty()) quantization_head = quantization;
    if (!quant_ok(quantization_head))
      config_fail(source, "quantization_config.head_format is '{}', expected q8 or q4",
                  quantization_head);
  }
  if (vocab_size < 1 || hidden_size < 1 || num_hidden_layers < 1 || num_heads < 1)
    config_fail(source, "vocab_size, hidden_size, num_hidden_layers and num_heads must be positive");
  if (vocab_size > (1 << 24) || hidden_size > kMaxDim || num_hidden_layers > 4096 ||
      num_heads > kMaxDim || intermediate_size > kMaxDim || num_kv_heads > kMaxDim ||
      num_kv_heads < 0 || intermediate_size < 0)
    config_fail(source, "a size is out of range (vocab_size {}, hidden_size {}, num_hidden_layers "
                        "{}, num_heads {}, num_kv_heads {}, intermediate_size {})",
                vocab_size, hidden_size, num_hidden_layers, num_heads, num_kv_heads,
                intermediate_size);
  const model::Family* own = model::family_named(model::type_of(*this));
  if (!own)
    config_fail(source, "type is '{}'; recur reads {}", model::type_of(*this),
                model::known_model_types());
  own->resolve(*this, source);
}

namespace {

// config.json: the family's fields, then the quantization, eos_token_id and tie_word_embeddings.
std::string with_common_fields(const ModelConfig& c, std::string s) {
  model::FieldWriter w;
  if (!c.quantization.empty())
    w.add("quantization_config",
          fmt::format("{{\"quant_method\": \"recur\", \"format\": {}, \"block_size\": 32, "
                      "\"scale_dtype\": \"float16\", \"head_format\": {}}}",
                      json::quote(c.quantization), json::quote(c.quantization_head)));
  if (!c.eos_token_ids.empty()) {
    std::string ids;
    for (std::size_t i = 0; i < c.eos_token_ids.size(); ++i)
      ids += (i ? ", " : "") + std::to_string(c.eos_token_ids[i]);
    w.add("eos_token_id", c.eos_token_ids.size() == 1 ? ids : "[" + ids + "]");
  }
  return "{\n" + s + w.text() +
         fmt::format("  \"tie_word_embeddings\": {}\n}}\n",
                     c.tie_word_embeddings ? "true" : "false");
}

}  // namespace

std::string ModelConfig::to_json() const {
  return with_common_fields(*this, model::family_of(*this).config_fields(*this));
}

std::string model::fingerprint_text(const ModelConfig& c) {
  // Where generation stops shapes no number.
  ModelConfig numeric = c;
  numeric.eos_token_ids.clear();
  return with_common_fields(numeric, family_of(c).fingerprint_fields(numeric));
}

}  // namespace recur
