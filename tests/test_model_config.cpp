// Based's config.json as its checkpoints write it: every refusal names the field it refuses,
// and the hydra class name the training configs put at the top level is accepted only when it
// names a known config class.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "recur/error.h"
#include "models/linear/linear.h"
#include "recur/model.h"

namespace {

using recur::FormatError;
using recur::ModelConfig;

// A valid Based config.json (three layers: BaseConv, Taylor attention, a window), its top-level
// fields in order; `with` replaces a field's raw JSON value, adds it if absent, or removes it
// when the value is empty.
std::string based_json(const std::vector<std::pair<std::string, std::string>>& with = {}) {
  std::vector<std::pair<std::string, std::string>> fields = {
      {"model_type", "\"gpt2\""},
      {"vocab_size", "256"},
      {"n_embd", "32"},
      {"n_inner", "256"},
      {"n_layer", "3"},
      {"n_head", "4"},
      {"layer_norm_epsilon", "1e-05"},
      {"rotary_emb_fraction", "1"},
      {"pad_vocab_size_multiple", "8"},
      {"rms_norm", "true"},
      {"activation_function", "\"swiglu\""},
      {"alt_mixer_layers", "[1]"},
      {"alt_mixer_2_layers", "[2]"},
      {"mixer", "{\"_target_\": \"based.models.mixers.convolution.BaseConv\", \"l_max\": 2048, "
                "\"use_bias\": true, \"expand_proj\": 4, \"kernel_sizes\": 3}"},
      {"alt_mixer", "{\"_target_\": \"based.models.mixers.linear_attention.LinearAttention\", "
                    "\"feature_map\": {\"_target_\": \"based.models.mixers.linear_attention."
                    "TaylorExp\", \"input_dim\": 8}, \"feature_dim\": 8, \"num_heads\": 4}"},
      {"alt_mixer_2", "{\"_target_\": \"based.models.mixers.slide_attention.SlidingAttention\", "
                      "\"window_size\": 16, \"num_heads\": 4, \"causal\": true}"},
      {"tie_word_embeddings", "true"}};
  for (const auto& [key, value] : with) {
    bool found = false;
    for (auto it = fields.begin(); it != fields.end(); ++it) {
      if (it->first != key) continue;
      found = true;
      if (value.empty()) fields.erase(it);
      else it->second = value;
      break;
    }
    if (!found && !value.empty()) fields.emplace_back(key, value);
  }
  std::string out = "{";
  for (const auto& [key, value] : fields)
    out += (out.size() > 1 ? ", \"" : "\"") + key + "\": " + value;
  return out + "}";
}

ModelConfig read(const std::string& json) {
  ModelConfig c = ModelConfig::from_json(json, "config.json");
  c.resolve("config.json");
  return c;
}

// The config with `with` applied is refused, and the message holds `names`.
void refused(const std::vector<std::pair<std::string, std::string>>& with, const std::string& names) {
  const std::string json = based_json(with);
  INFO(json);
  try {
    read(json);
    FAIL("accepted");
  } catch (const FormatError& e) {
    CHECK_THAT(e.what(), Catch::Contains(names) && Catch::Contains("config.json"));
  }
}

}  // namespace

TEST_CASE("the Based config of these tests is read, with its three mixers", "[model][based][config]") {
  const ModelConfig c = read(based_json());
  CHECK(c.architecture == recur::Architecture::kBased);
  REQUIRE(c.mixers.size() == 3);
  CHECK(c.mixers[0] == recur::MixerKind::kShortConv);
  CHECK(c.mixers[1] == recur::MixerKind::kLinearAttention);
  CHECK(c.mixers[2] == recur::MixerKind::kWindowAttention);
}

TEST_CASE("every Based config refusal names what it refuses", "[model][based][config]") {
  // The model's own fields.
  refused({{"tie_word_embeddings", "false"}}, "tie_word_embeddings");
  refused({{"rms_norm", "false"}}, "rms_norm");
  refused({{"activation_function", "\"gelu_new\""}}, "activation_function is 'gelu_new'");
  refused({{"mlp_fc1_bias", "true"}}, "mlp_fc1_bias");
  refused({{"out_proj_bias", "true"}}, "out_proj_bias");
  refused({{"rotary_emb_fraction", "0.5"}}, "rotary_emb_fraction");
  refused({{"max_position_embeddings", "2048"}}, "max_position_embeddings");
  refused({{"rotary_emb_dim", "8"}}, "rotary_emb_dim");
  refused({{"n_embd", "0"}}, "n_embd");
  refused({{"n_layer", "5000"}}, "n_layer");
  refused({{"bogus_field", "1"}}, "bogus_field");
  // The layer lists.
  refused({{"alt_mixer_layers", "1"}}, "alt_mixer_layers is");
  refused({{"alt_mixer_layers", "[3]"}}, "alt_mixer_layers holds 3");
  refused({{"alt_mixer_layers", "[1, 1]"}}, "names layer 1 twice");
  refused({{"alt_mixer_2_layers", "[1]"}}, "layer 1 is in both");
  // The mixers' specs.
  refused({{"mixer", "[]"}}, "mixer is an array");
  refused({{"mixer", "{\"_target_\": \"based.models.mixers.convolution.LongConv\"}"}},
          "mixer._target_ is 'based.models.mixers.convolution.LongConv'");
  refused({{"mixer", ""}}, "mixer is missing");
  refused({{"mixer", "{\"_target_\": \"x.BaseConv\", \"expand_proj\": 3}"}}, "mixer.expand_proj is 3");
  refused({{"mixer", "{\"_target_\": \"x.BaseConv\", \"expand_proj\": 100}"}}, "mixer.expand_proj is 100");
  refused({{"mixer", "{\"_target_\": \"x.BaseConv\", \"use_bias\": 1}"}}, "mixer.use_bias");
  refused({{"mixer", "{\"_target_\": \"x.BaseConv\", \"use_cuda\": true}"}}, "mixer.use_cuda");
  refused({{"mixer", "{\"_target_\": \"x.BaseConv\", \"fused\": true}"}}, "mixer.fused");
  refused({{"alt_mixer", ""}}, "alt_mixer is missing");
  refused({{"alt_mixer", "{\"_target_\": \"x.LinearAttention\", \"num_heads\": 4, "
                         "\"num_key_value_heads\": 2}"}}, "num_key_value_heads");
  refused({{"alt_mixer", "{\"_target_\": \"x.LinearAttention\", \"feature_map\": "
                         "{\"_target_\": \"x.PosELU\"}}"}}, "TaylorExp");
  refused({{"alt_mixer", "{\"_target_\": \"x.LinearAttention\", \"feature_dim\": 8, \"feature_map\": "
                         "{\"_target_\": \"x.TaylorExp\", \"input_dim\": 4}}"}}, "input_dim");
  refused({{"alt_mixer", "{\"_target_\": \"x.LinearAttention\", \"feature_dim\": 300}"}},
          "alt_mixer.feature_dim is 300");
  refused({{"alt_mixer", "{\"_target_\": \"x.LinearAttention\", \"num_heads\": 3}"}},
          "alt_mixer.num_heads 3");
  refused({{"alt_mixer_2", ""}}, "alt_mixer_2 is missing");
  refused({{"alt_mixer_2", "{\"_target_\": \"x.SlidingAttention\", \"num_heads\": 2}"}},
          "alt_mixer_2.num_heads");
  refused({{"alt_mixer_2", "{\"_target_\": \"x.SlidingAttention\", \"causal\": false}"}},
          "alt_mixer_2.causal");
  // Derived sizes.
  refused({{"n_head", "3"}, {"alt_mixer_2", "{\"_target_\": \"x.SlidingAttention\"}"}},
          "n_embd 32 is not n_head 3 heads");
  refused({{"n_head", "32"}, {"alt_mixer_2", "{\"_target_\": \"x.SlidingAttention\"}"}},
          "n_head 32 heads of an even width");
  refused({{"pad_vocab_size_multiple", "0"}}, "pad_vocab_size_multiple");
}

TEST_CASE("a Based config's top-level _target_ is accepted when it names a known config class",
          "[model][based][config]") {
  // The hydra class name Based's training configs write.
  const ModelConfig a = read(based_json({{"_target_", "\"based.models.gpt.GPT2MixerConfig\""}}));
  CHECK(a.architecture == recur::Architecture::kBased);
  CHECK(a.mixers.size() == 3);
  CHECK_NOTHROW(read(based_json({{"_target_", "\"transformers.GPT2Config\""}})));
  refused({{"_target_", "\"based.models.gpt.LlamaConfig\""}}, "_target_ is 'based.models.gpt.LlamaConfig'");
  refused({{"_target_", "3"}}, "_target_ is 3, expected a string");
}

TEST_CASE("a configuration whose own fields are another family's is refused, naming its source",
          "[model][config]") {
  // Each family's fields live in ModelConfig::family; switching the architecture of a
  // configuration read for another family leaves fields that mean nothing to the new one.
  const std::pair<const char*, recur::Architecture> cases[] = {
      {R"({"model_type": "linear_attn", "hidden_size": 32, "num_heads": 2})",
       recur::Architecture::kBased},
      {R"({"model_type": "linear_attn", "hidden_size": 32, "num_heads": 2})",
       recur::Architecture::kGla},
      {R"({"model_type": "gla", "hidden_size": 32, "num_heads": 2})",
       recur::Architecture::kLinearAttn},
  };
  for (const auto& [json, other] : cases) {
    INFO(json);
    ModelConfig c = ModelConfig::from_json(json, "cfg.json");
    c.architecture = other;
    CHECK_THROWS_AS(c.resolve("in code"), FormatError);
    CHECK_THROWS_WITH(c.resolve("in code"),
                      Catch::Matchers::Contains("in code") &&
                          Catch::Matchers::Contains("another family's fields"));
  }
}

TEST_CASE("changing a family's fields in one copy of a configuration leaves the other as it was",
          "[model][config]") {
  namespace linear = recur::models::linear;
  const ModelConfig a = ModelConfig::from_json(
      R"({"model_type": "linear_attn", "hidden_size": 32, "num_heads": 2})", "cfg.json");
  ModelConfig b = a;
  linear::edit(b).feature_map = recur::models::linear::ModelFeatureMap::kRelu;
  linear::edit(b).expand_v = 2.0;
  b.resolve("in code");
  CHECK(linear::config_of(a).feature_map == recur::models::linear::ModelFeatureMap::kElementwiseProduct);
  CHECK(linear::config_of(a).value_dim == 32);
  CHECK(linear::config_of(b).feature_map == recur::models::linear::ModelFeatureMap::kRelu);
  CHECK(linear::config_of(b).value_dim == 64);
  CHECK(a.to_json() != b.to_json());
  // A configuration built in code without the family's fields takes the defaults config.json's
  // reader would: the same text as the config.json that names none of them.
  ModelConfig bare;
  bare.architecture = recur::Architecture::kLinearAttn;
  bare.hidden_size = 32;
  bare.num_heads = 2;
  bare.resolve("in code");
  CHECK(bare.to_json() == a.to_json());
}

namespace {

std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

// The published config.json files kept verbatim in tests/fixtures/published (SOURCES.md).
std::vector<std::filesystem::path> published_configs() {
  std::vector<std::filesystem::path> out;
  for (const auto& e : std::filesystem::directory_iterator(RECUR_PUBLISHED_FIXTURES))
    if (std::filesystem::exists(e.path() / "config.json")) out.push_back(e.path() / "config.json");
  return out;
}

// The message of the FormatError `json` raises, or "" when it is read.
std::string refusal(const std::string& json) {
  try {
    ModelConfig::from_json(json, "config.json");
  } catch (const FormatError& e) {
    return e.what();
  }
  return "";
}

// text with the first `from` replaced by `to` (which must be there).
std::string replaced(std::string text, const std::string& from, const std::string& to) {
  const auto at = text.find(from);
  REQUIRE(at != std::string::npos);
  return text.replace(at, from.size(), to);
}

}  // namespace

TEST_CASE("every published config.json kept as a fixture is read at its own size",
          "[model][config][published]") {
  const auto paths = published_configs();
  REQUIRE(!paths.empty());
  for (const auto& path : paths) {
    INFO(path.string());
    CHECK(refusal(read_text(path)).empty());
    CHECK_NOTHROW(ModelConfig::from_file(path.string()));
  }
}

TEST_CASE("Qwen3.5-0.8B's published config.json gives the shapes its model card states",
          "[model][config][published]") {
  const ModelConfig c = ModelConfig::from_file(std::string(RECUR_PUBLISHED_FIXTURES) +
                                               "/qwen3.5-0.8b/config.json");
  CHECK(c.architecture == recur::Architecture::kQwen35);
  CHECK(c.hidden_size == 1024);
  CHECK(c.num_hidden_layers == 24);
  CHECK(c.intermediate_size == 3584);
  CHECK(c.vocab_size == 248320);
  CHECK(c.tie_word_embeddings);
  CHECK(c.eos_token_ids == std::vector<int>{248044});
}

TEST_CASE("a non-empty mlp_only_layers in a Qwen3.5 config is refused by name",
          "[model][config][published]") {
  const std::string text = read_text(std::string(RECUR_PUBLISHED_FIXTURES) +
                                     "/qwen3.5-0.8b/config.json");
  const std::string moe = replaced(text, "\"mlp_only_layers\": []", "\"mlp_only_layers\": [3, 7]");
  CHECK_THAT(refusal(moe), Catch::Contains("text_config.mlp_only_layers is [3, 7]") &&
                               Catch::Contains("mixture-of-experts"));
  const std::string odd = replaced(text, "\"mlp_only_layers\": []", "\"mlp_only_layers\": 0");
  CHECK_THAT(refusal(odd), Catch::Contains("text_config.mlp_only_layers is 0"));
  // An unknown neighbour is still refused: accepting one field is not accepting any.
  const std::string unknown =
      replaced(text, "\"mlp_only_layers\": []", "\"mlp_only_layers\": [], \"num_experts\": 8");
  CHECK_THAT(refusal(unknown), Catch::Contains("unknown field 'text_config.num_experts'"));
}

TEST_CASE("fla's early norm_first is accepted when false and refused by name when true",
          "[model][config]") {
  for (const char* type : {"gated_deltanet", "delta_net"}) {
    INFO(type);
    const std::string base = std::string("{\"model_type\": \"") + type +
                             "\", \"vocab_size\": 64, \"hidden_size\": 32, "
                             "\"num_hidden_layers\": 2, \"num_heads\": 2, " +
                             (std::string(type) == "gated_deltanet" ? "\"head_dim\": 16, " : "") +
                             "\"fuse_cross_entropy\": true, \"norm_first\": ";
    CHECK(refusal(base + "false}").empty());
    CHECK_THAT(refusal(base + "true}"),
               Catch::Contains("norm_first is true") && Catch::Contains("recur does not run"));
  }
}

TEST_CASE("a family's tensor table is its loader run shape-only: no weight is held while it is "
          "listed", "[model][config]") {
  // A terabyte of weights: listing them must allocate none (a recorder that made zeros of a
  // matrix, or of the embedding, throws std::bad_alloc here).
  const std::int64_t V = 1 << 20, d = 1 << 18;  // each matrix alone is 256 GiB
  for (const bool tied : {false, true}) {
    INFO("tied " << tied);
    const ModelConfig c = ModelConfig::from_json(
        "{\"model_type\": \"linear_attn\", \"vocab_size\": " + std::to_string(V) +
            ", \"hidden_size\": " + std::to_string(d) +
            ", \"num_hidden_layers\": 2, \"num_heads\": 1024, \"intermediate_size\": 262144, "
            "\"tie_word_embeddings\": " + (tied ? "true" : "false") + "}",
        "config.json");
    const auto table = recur::model_tensor_shapes(c);
    REQUIRE(!table.empty());
    CHECK(table.front().first == "model.embeddings.weight");
    CHECK(table.front().second == std::vector<std::int64_t>{V, d});
    CHECK(table.back().first == (tied ? "model.norm.weight" : "lm_head.weight"));
    std::int64_t parameters = 0;
    for (const auto& [name, shape] : table) {
      std::int64_t n = 1;
      for (const auto s : shape) n *= s;
      parameters += n;
    }
    CHECK(parameters > (tied ? 1 : 2) * V * d);
  }
}
