// Falcon-H1 (engine/models/falcon_h1): every committed fixture's logits at every position
// against the float64 reference (tests/falcon_h1/expected.json); the state is the Mamba-2 part,
// fixed, and the attention's keys and values, growing; configs the model cannot run are refused
// by name; both rotary forms and the sizes config.json may leave null or "auto" read back as
// written. What every family is checked for (exactness across chunkings, threads, instruction
// sets and batches, quantized weights, saved states, refusals of bad tensors and bytes) is
// test_conformance's.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "model/model_impl.h"
#include "model/random_weights.h"
#include "recur/error.h"
#include "recur/model.h"
#include "support/probe_logits.h"

namespace {

using recur::Decoder;
using recur::DecoderOptions;
using recur::FormatError;
using recur::Model;
using recur::ModelConfig;
using Catch::Matchers::Contains;

const std::string kFixtures = RECUR_FALCON_H1_FIXTURES;
const std::string kPrompt = RECUR_MAMBA2_FIXTURES "/prompt_ids.txt";

// 2 layers; attention of 4 heads over 2 kv heads of 8 (head_dim apart from hidden_size / heads),
// Mamba-2 of 4 heads of 8, state 16, 2 groups, the gated norm; transformers 5's rope_parameters.
const char* const kSmall = R"({
  "model_type": "falcon_h1", "vocab_size": 96, "hidden_size": 16, "intermediate_size": 24,
  "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8,
  "mamba_d_ssm": null, "mamba_n_heads": 4, "mamba_d_head": "auto", "mamba_d_state": 16,
  "mamba_n_groups": 2, "mamba_rms_norm": true, "embedding_multiplier": 3.0,
  "ssm_multipliers": [0.5, 1.5, 1.0, 0.8, 1.2], "mlp_multipliers": [1.1, 0.7],
  "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0}})";

ModelConfig config(const std::string& text) { return ModelConfig::from_json(text, "config.json"); }

// The logits recur's float32 gets within: 1e-6 of each position's largest logit, or PyTorch's
// float32 distance from float64 where that is larger (expected.json's figure per fixture), as
// test_mamba2 holds Mamba-2's fixtures.
constexpr double kLogitTolerance = 1e-6;

}  // namespace

TEST_CASE("every Falcon-H1 fixture's logits at every position are the float64 reference's",
          "[falcon_h1][model][reference]") {
  const std::vector<int> ids = recur::testing::read_ids(kPrompt);
  REQUIRE(ids.size() == 300);
  recur::testing::check_reference_fixtures(kFixtures, ids, 3, kLogitTolerance);
}

TEST_CASE("a Falcon-H1 state is the Mamba-2 part, fixed, and the attention's keys and values, "
          "growing", "[falcon_h1][model]") {
  const ModelConfig c = config(kSmall);
  const auto m = Model::from_weights(c, recur::RandomWeights(c, 5));
  const auto& net = *recur::model::impl_of(*m).network;
  REQUIRE(net.n_layers() == 4);  // per layer: the Mamba-2 mixer, then the attention
  CHECK(net.make_state(0)->kind() == recur::MixerKind::kDecayedRecurrence);
  CHECK(net.make_state(1)->kind() == recur::MixerKind::kAttention);
  Decoder d(m, DecoderOptions{8, 1});
  d.prefill({1, 2, 3, 4, 5});
  const std::size_t five = d.state_bytes();
  d.prefill({6, 7, 8});
  // Three tokens more: in each of the 2 layers, a key and a value of 2 kv heads of 8 floats.
  CHECK(d.state_bytes() - five == 3 * 2 * 2 * 2 * 8 * sizeof(float));
  const recur::MixerKind gated = recur::MixerKind::kDecayedRecurrence;
  CHECK(d.state_bytes(gated) == recur::model::new_state_bytes(net, &gated));
}

TEST_CASE("a Falcon-H1 config the model cannot run is refused, naming the field",
          "[falcon_h1][config]") {
  const auto bad = [](const std::string& text, const std::vector<std::string>& parts) {
    try {
      config(text);
      FAIL("accepted: " << text);
    } catch (const FormatError& e) {
      for (const auto& p : parts) CHECK_THAT(e.what(), Contains(p));
    }
  };
  const std::string base = R"("model_type": "falcon_h1", "vocab_size": 32, "hidden_size": 16, )"
                           R"("intermediate_size": 16, "num_hidden_layers": 1, )"
                           R"("num_attention_heads": 2, "mamba_n_heads": 4, "mamba_d_state": 8)";
  const auto with = [&](const std::string& more) { return "{" + base + ", " + more + "}"; };
  bad(with(R"("num_key_value_heads": 3)"), {"num_key_value_heads 3"});
  bad(with(R"("mamba_d_head": 16)"), {"mamba_n_heads 4 * mamba_d_head 16", "mamba_d_ssm"});
  bad(with(R"("mamba_d_ssm": 30)"), {"mamba_n_heads 4 does not divide", "30"});
  bad(with(R"("mamba_n_groups": 3)"), {"n_groups 3"});
  bad(with(R"("ssm_multipliers": [1, 1, 1, 1])"), {"ssm_multipliers", "5 numbers"});
  bad(with(R"("mlp_multipliers": [1, "x"])"), {"mlp_multipliers", "2 numbers"});
  bad(with(R"("time_step_limit": [0.1, 0.01])"), {"time_step_limit"});
  bad(with(R"("rope_scaling": {"type": "linear", "factor": 2})"), {"rope_scaling"});
  bad(with(R"("rope_parameters": {"rope_type": "yarn", "rope_theta": 1e6})"), {"rope_type is 'yarn'"});
  bad(with(R"("attn_layer_indices": [0])"), {"attn_layer_indices"});
  bad(with(R"("hidden_act": "gelu")"), {"hidden_act"});
  bad(with(R"("head_dim": "auto")"), {"head_dim is \"auto\""});
  bad(with(R"("mamba_use_mlp": true)"), {"mamba_use_mlp"});
}

TEST_CASE("a Falcon-H1 configuration written out reads back as itself, its null and auto sizes "
          "as the values they stand for", "[falcon_h1][config]") {
  const std::string v4 = R"({"model_type": "falcon_h1", "vocab_size": 32, "hidden_size": 16,
    "intermediate_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2,
    "num_key_value_heads": null, "mamba_n_heads": 4, "mamba_d_state": 8, "rope_theta": 1e11,
    "rope_scaling": null, "time_step_limit": [0.0, Infinity]})";
  for (const std::string& text : {std::string(kSmall), v4}) {
    const ModelConfig c = config(text);
    const std::string once = c.to_json();
    CHECK(config(once).to_json() == once);
  }
  const std::string small = config(kSmall).to_json();
  CHECK_THAT(small, Contains("\"mamba_d_ssm\": 32"));
  CHECK_THAT(small, Contains("\"mamba_d_head\": 8"));
  CHECK_THAT(small, Contains("\"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": 1000000}"));
  const std::string old = config(v4).to_json();
  CHECK_THAT(old, Contains("\"num_key_value_heads\": 2"));
  CHECK_THAT(old, Contains("\"head_dim\": 8"));
  CHECK_THAT(old, Contains("\"rope_theta\": 100000000000"));
  CHECK_THAT(old, Contains("\"time_step_limit\": [0, Infinity]"));
}
