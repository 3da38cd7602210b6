// LFM2 and LFM2.5 (engine/models/lfm2): the committed random-weight fixtures (tests/lfm2) agree
// with the float64 reference in every logit of the checked positions; a state saved after fewer
// tokens than the convolution's taps continues as one run; the attention layers' KV cache counts
// in the state, the convolutions' does not grow; both config forms read back as written, with
// the MLP width transformers derives; what recur cannot run is refused by name. Exactness across
// chunks, threads, batches and instruction sets, and quantized round trips, are test_conformance's
// (its two LFM2 fixtures).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "model/model_impl.h"
#include "model/random_weights.h"
#include "recur/error.h"
#include "recur/model.h"
#include "support/published_keys.h"
#include "util/json.h"

namespace {

using recur::Decoder;
using recur::DecoderOptions;
using recur::FormatError;
using recur::Model;
using recur::ModelConfig;
using recur::RandomWeights;
using Catch::Matchers::Contains;

// The fixtures' agreement with the float64 reference (docs/lfm2.md): every logit at a checked
// position, relative to that position's largest. float32 arithmetic sets the floor: recur's
// worst is 1.34e-6 on these fixtures, PyTorch's own float32 forward pass of the same reference
// 3.2e-6 (over all positions), so 1e-6, the mean NLL's bound, is below what float32 gives here.
constexpr double kLogitTolerance = 2e-6;

const char* const kFixtures[] = {"lfm2-first", "lfm2.5-later", "lfm2-aliases"};

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  REQUIRE(f.good());
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

std::vector<int> prompt() {
  std::istringstream in(slurp(std::string(RECUR_LFM2_FIXTURES) + "/prompt_ids.txt"));
  std::vector<int> ids;
  for (int id; in >> id;) ids.push_back(id);
  return ids;
}

// Later form, every option away from its default (as the fixture lfm2.5-later).
const char* const kLater = R"({"model_type": "lfm2", "vocab_size": 96, "hidden_size": 32,
  "intermediate_size": 60, "num_hidden_layers": 4, "num_attention_heads": 4,
  "num_key_value_heads": 2, "head_dim": 6, "conv_L_cache": 4, "conv_bias": true,
  "layer_types": ["conv", "full_attention", "conv", "full_attention"], "block_multiple_of": 8,
  "block_ffn_dim_multiplier": 1.5, "tie_word_embeddings": false,
  "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}})";
// First form, tied by default.
const char* const kFirst = R"({"model_type": "lfm2", "vocab_size": 96, "hidden_size": 32,
  "block_ff_dim": 96, "num_hidden_layers": 3, "num_attention_heads": 2,
  "num_key_value_heads": 1, "full_attn_idxs": [2], "block_multiple_of": 16,
  "rope_theta": 1000000.0, "block_dim": 32, "conv_dim": 32, "num_heads": 2})";

ModelConfig config(const std::string& json) { return ModelConfig::from_json(json, "config.json"); }

std::shared_ptr<const Model> model_of(const char* json) {
  const ModelConfig c = config(json);
  return Model::from_weights(c, RandomWeights(c, 5));
}

std::vector<int> tokens(int n) {
  std::vector<int> out;
  std::uint32_t x = 777;
  for (int i = 0; i < n; ++i) {
    x = x * 1103515245u + 12345u;
    out.push_back(int((x >> 16) % 96u));
  }
  return out;
}

struct Run {
  std::vector<float> logits;
  std::string state;
};

Run prefilled(const std::shared_ptr<const Model>& m, const std::vector<int>& ids, int chunk,
              int threads) {
  Decoder d(m, DecoderOptions{chunk, threads});
  Run r;
  const auto vocab = std::size_t(m->config().vocab_size);
  d.prefill(ids, {}, [&](std::int64_t, const float* l) { r.logits.insert(r.logits.end(), l, l + vocab); });
  r.state = d.save_bytes();
  return r;
}

}  // namespace

TEST_CASE("every LFM2 fixture's logits agree with the float64 reference at the checked positions",
          "[lfm2][model][reference]") {
  const std::string dir = RECUR_LFM2_FIXTURES;
  const auto expected = recur::json::parse(slurp(dir + "/expected.json"), "expected.json");
  const std::vector<int> ids = prompt();
  REQUIRE(ids.size() == 300);
  for (const char* name : kFixtures) {
    INFO(name);
    const auto m = Model::load(dir + "/" + name);
    const Run r = prefilled(m, ids, 64, 2);
    const auto V = std::size_t(m->config().vocab_size);
    const auto* want = expected.find("fixtures")->find(name)->find("logits");
    REQUIRE(want != nullptr);
    int positions = 0;
    for (const auto& [key, row] : want->object()) {
      const auto p = std::size_t(std::stoi(key));
      REQUIRE(row.array().size() == V);
      double worst = 0, scale = 0;
      for (std::size_t i = 0; i < V; ++i) {
        const double w = row.array()[i].number();
        worst = std::max(worst, std::abs(double(r.logits[p * V + i]) - w));
        scale = std::max(scale, std::abs(w));
      }
      INFO("position " << p << ": largest difference " << worst << ", largest logit " << scale);
      CHECK(worst / scale < kLogitTolerance);
      ++positions;
    }
    CHECK(positions == 6);
  }
}

TEST_CASE("an LFM2 state saved before the convolution's window is full continues with the bytes of one run", "[lfm2][model]") {
  const std::vector<int> ids = tokens(90);
  const auto m = model_of(kLater);
  Decoder one(m, DecoderOptions{16, 1});
  one.prefill(ids);
  Decoder first(m, DecoderOptions{16, 1});
  first.prefill(std::vector<int>(ids.begin(), ids.begin() + 2));  // fewer tokens than the taps
  Decoder second(m, DecoderOptions{5, 2});
  second.load_bytes(first.save_bytes(), "saved");
  second.prefill(std::vector<int>(ids.begin() + 2, ids.end()));
  CHECK(second.save_bytes() == one.save_bytes());
  const auto a = one.logits(), b = second.logits();
  CHECK(std::memcmp(a.data(), b.data(), std::size_t(a.size()) * sizeof(float)) == 0);
}

TEST_CASE("an LFM2 state grows by the attention layers' keys and values alone",
          "[lfm2][model]") {
  const auto m = model_of(kLater);
  Decoder d(m, DecoderOptions{64, 1});
  d.prefill(tokens(10));
  const std::size_t attn10 = d.state_bytes(recur::MixerKind::kAttention);
  const std::size_t conv10 = d.state_bytes(recur::MixerKind::kShortConv);
  // Two conv layers: 3 past inputs of 32 channels and a token count each.
  CHECK(conv10 == 2 * (3 * 32 * 4 + 8));
  d.prefill(tokens(100));
  CHECK(d.state_grows());
  // Two attention layers, a key and a value of 2 kv heads of 6 floats per token.
  CHECK(d.state_bytes(recur::MixerKind::kAttention) - attn10 == 100u * 2 * 2 * 2 * 6 * 4);
  CHECK(d.state_bytes(recur::MixerKind::kShortConv) == conv10);
}

TEST_CASE("both LFM2 config forms read back as written, with the MLP width transformers derives",
          "[lfm2][model]") {
  const ModelConfig later = config(kLater);
  // int(2 * 60 / 3) = 40, times 1.5 = 60, rounded up to a multiple of 8: 64.
  CHECK(later.intermediate_size == 64);
  CHECK(config(later.to_json()).to_json() == later.to_json());
  CHECK_THAT(later.to_json(), Contains("\"layer_types\"") && Contains("\"rope_parameters\""));
  const ModelConfig first = config(kFirst);
  CHECK(first.intermediate_size == 64);  // int(2 * 96 / 3) = 64, a multiple of 16
  CHECK(first.tie_word_embeddings);      // transformers' default
  CHECK(config(first.to_json()).to_json() == first.to_json());
  CHECK_THAT(first.to_json(), Contains("\"full_attn_idxs\": [2]") && Contains("\"block_ff_dim\": 96"));
  const auto no_adjust = config(R"({"model_type": "lfm2", "vocab_size": 8, "hidden_size": 8,
    "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 2,
    "intermediate_size": 30, "block_auto_adjust_ff_dim": false})");
  CHECK(no_adjust.intermediate_size == 30);
  const auto no_multiplier = config(R"({"model_type": "lfm2", "vocab_size": 8, "hidden_size": 8,
    "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 2,
    "intermediate_size": 100, "block_ffn_dim_multiplier": null})");
  CHECK(no_multiplier.intermediate_size == 66);
  CHECK(config(no_multiplier.to_json()).intermediate_size == 66);
}

TEST_CASE("an LFM2 config recur cannot run is refused, naming the field", "[lfm2][model]") {
  const auto refusal = [](const std::string& extra) {
    const std::string json = R"({"model_type": "lfm2", "vocab_size": 8, "hidden_size": 8,
      "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1)" + extra + "}";
    try {
      config(json);
    } catch (const FormatError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  CHECK(refusal("") == "accepted");
  CHECK_THAT(refusal(R"(, "num_experts": 32)"), Contains("num_experts"));
  CHECK_THROWS_WITH(config(R"({"model_type": "lfm2_moe", "architectures": ["Lfm2MoeForCausalLM"],
    "vocab_size": 8, "hidden_size": 8, "num_hidden_layers": 2, "num_experts": 32})"),
                    Contains("lfm2_moe") && Contains("LFM2-8B-A1B"));
  CHECK_THAT(refusal(R"(, "block_dim": 16)"), Contains("block_dim"));
  CHECK_THAT(refusal(R"(, "num_heads": 4)"), Contains("num_heads"));
  CHECK_THAT(refusal(R"(, "use_pos_enc": false)"), Contains("use_pos_enc"));
  CHECK_THAT(refusal(R"(, "block_use_swiglu": false)"), Contains("block_use_swiglu"));
  CHECK_THAT(refusal(R"(, "layer_types": ["conv", "mamba"])"), Contains("layer_types"));
  CHECK_THAT(refusal(R"(, "layer_types": ["conv", "full_attention"], "full_attn_idxs": [0])"),
             Contains("full_attn_idxs"));
  CHECK(refusal(R"(, "layer_types": ["conv", "full_attention"], "full_attn_idxs": [1])") == "accepted");
  CHECK_THAT(refusal(R"(, "full_attn_idxs": [2])"), Contains("full_attn_idxs"));
  CHECK_THAT(refusal(R"(, "rope_parameters": {"rope_type": "yarn", "factor": 2})"), Contains("yarn"));
  CHECK_THAT(refusal(R"(, "tie_embedding": false, "tie_word_embeddings": true)"), Contains("tie_embedding"));
  CHECK_THAT(refusal(R"(, "block_ff_dim": 96, "intermediate_size": 50)"), Contains("intermediate_size"));
  CHECK(refusal(R"(, "block_ff_dim": 96, "intermediate_size": 256)") == "accepted");  // the adjusted width
  CHECK_THAT(refusal(R"(, "mystery": 1)"), Contains("mystery"));
  // Each field the table declares, refused by its key, naming the file.
  CHECK_THAT(refusal(R"(, "layer_types": ["conv"])"),
             Contains("config.json") && Contains("layer_types is") && Contains("expected 2 entries (num_hidden_layers)"));
  CHECK_THAT(refusal(R"(, "full_attn_idxs": 1)"), Contains("config.json") && Contains("full_attn_idxs is 1"));
  CHECK_THAT(refusal(R"(, "block_ffn_dim_multiplier": "x")"), Contains("block_ffn_dim_multiplier is \"x\""));
  CHECK_THAT(refusal(R"(, "rope_parameters": 3)"), Contains("rope_parameters is 3"));
  CHECK_THAT(refusal(R"(, "rope_parameters": {"rope_theta": 10000, "factor": 2})"), Contains("rope_parameters.factor"));
  CHECK_THAT(refusal(R"(, "conv_L_cache": 0)"), Contains("conv_L_cache is 0"));
  CHECK_THAT(refusal(R"(, "block_norm_eps": 0.1)"), Contains("block_norm_eps is 0.1"));
  CHECK_THAT(refusal(R"(, "block_use_xavier_init": false, "conv_bias": "no")"), Contains("conv_bias is \"no\""));
}

TEST_CASE("every LFM2 fixture's config.json, written by recur, reads back as itself and keeps the "
          "keys of its form", "[lfm2][model]") {
  // Written by the checkpoints' tools, not the architecture.
  const std::set<std::string> tooling = {"torch_dtype", "dtype", "bos_token_id", "pad_token_id",
                                         "use_cache", "initializer_range"};
  for (const char* name : kFixtures) {
    INFO(name);
    const std::string published = slurp(std::string(RECUR_LFM2_FIXTURES) + "/" + name + "/config.json");
    const ModelConfig c = ModelConfig::from_json(published, name);
    const std::string written = c.to_json();
    const ModelConfig back = config(written);
    CHECK(back.to_json() == written);
    CHECK(back.mixers == c.mixers);
    CHECK(back.intermediate_size == c.intermediate_size);
    // The aliases (tie_embedding, theta) are written under transformers' own names.
    if (std::string(name) != "lfm2-aliases")
      CHECK(recur::testing::keys_left_out(published, written, tooling) == std::vector<std::string>{});
  }
}
