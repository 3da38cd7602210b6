// Mamba-2 and its hybrids (engine/models/mamba2, granite, nemotron_h; layers/ssd_mixer): every
// committed fixture's logits at every position against the float64 reference
// (tests/mamba2/expected.json, tests/nemotron_h/expected.json); bad input and bad state bytes
// are refused with the state unchanged; configs the model cannot run are refused by name; a
// configuration written out reads back as itself. What every family must do (exactness across
// chunks, threads, instruction sets and batches, saved states) is test_conformance's, over its
// Mamba-2, Granite and Nemotron-H fixtures.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "model/family.h"
#include "model/model_impl.h"
#include "model/random_weights.h"
#include "recur/error.h"
#include "recur/gla_recurrence.h"
#include "recur/model.h"
#include "support/probe_logits.h"
#include "support/published_keys.h"

namespace {

using recur::ArgumentError;
using recur::Decoder;
using recur::DecoderOptions;
using recur::FormatError;
using recur::Model;
using recur::ModelConfig;
using recur::RandomWeights;
using Catch::Matchers::Contains;

const std::string kFixtures = RECUR_MAMBA2_FIXTURES;
const std::string kNemotronFixtures = RECUR_NEMOTRON_H_FIXTURES;

// transformers' layout: 2 groups of 2 heads of 8, state 16, biases, a clamp that bites.
const char* const kGroups = R"({
  "model_type": "mamba2", "vocab_size": 96, "hidden_size": 16, "num_hidden_layers": 2,
  "state_size": 16, "expand": 2, "conv_kernel": 4, "n_groups": 2, "num_heads": 4,
  "head_dim": 8, "use_bias": true, "use_conv_bias": true, "time_step_limit": [0.002, 0.05]})";

// mamba_ssm's layout: norm before the gate, one group, d_state 24 (not a multiple of the
// scan's padding), no conv bias, tied, vocabulary 90 padded to 96.
const char* const kMambaSsm = R"({
  "d_model": 24, "d_intermediate": 0, "n_layer": 2, "vocab_size": 90,
  "ssm_cfg": {"layer": "Mamba2", "d_state": 24, "d_conv": 3, "expand": 2, "headdim": 12,
              "ngroups": 1, "norm_before_gate": true, "conv_bias": false,
              "dt_limit": [0.0, Infinity]},
  "attn_layer_idx": [], "attn_cfg": {}, "rms_norm": true, "residual_in_fp32": true,
  "fused_add_norm": true, "pad_vocab_size_multiple": 16, "tie_embeddings": true})";

// granitemoehybrid, dense: Mamba-2, attention (no positions), Mamba-2, attention, Granite's
// multipliers; and IBM's non-hybrid layout (attention with rotary only).
const char* const kGranite = R"({
  "model_type": "granitemoehybrid", "vocab_size": 96, "hidden_size": 16, "num_hidden_layers": 4,
  "num_attention_heads": 4, "num_key_value_heads": 2, "shared_intermediate_size": 24,
  "intermediate_size": 24, "num_local_experts": 0, "num_experts_per_tok": 0,
  "layer_types": ["mamba", "attention", "mamba", "attention"], "position_embedding_type": "nope",
  "mamba_n_heads": 4, "mamba_d_head": 8, "mamba_d_state": 16, "mamba_n_groups": 2,
  "mamba_expand": 2, "embedding_multiplier": 12, "residual_multiplier": 0.22,
  "attention_multiplier": 0.25, "logits_scaling": 8, "time_step_limit": [0.0, Infinity]})";
const char* const kGraniteDense = R"({
  "model_type": "granitemoehybrid", "vocab_size": 96, "hidden_size": 16, "num_hidden_layers": 2,
  "num_attention_heads": 2, "num_key_value_heads": 1, "shared_intermediate_size": 24,
  "num_local_experts": 0, "layer_types": ["attention", "attention"],
  "position_embedding_type": "rope", "rope_theta": 10000, "mamba_n_heads": 4, "mamba_d_head": 8,
  "tie_word_embeddings": true})";

// nemotron_h: every block kind (Mamba-2 in 2 groups, MLP, attention of 4 heads over 2 kv heads
// of 12, no positions), attention and MLP biases.
const char* const kNemotron = R"({
  "model_type": "nemotron_h", "vocab_size": 96, "hidden_size": 16, "num_hidden_layers": 5,
  "hybrid_override_pattern": "M-*M-", "num_attention_heads": 4, "num_key_value_heads": 2,
  "head_dim": 12, "attention_bias": true, "intermediate_size": 40, "mlp_bias": true,
  "mamba_num_heads": 4, "mamba_head_dim": 6, "ssm_state_size": 8, "n_groups": 2,
  "time_step_limit": [0.0, Infinity]})";

ModelConfig config(const char* text) { return ModelConfig::from_json(text, "config.json"); }

std::shared_ptr<const Model> model_of(const char* text) {
  const ModelConfig c = config(text);
  return Model::from_weights(c, RandomWeights(c, 5));
}

std::vector<int> tokens(int n) {
  std::vector<int> out;
  std::uint32_t x = 2024;
  for (int i = 0; i < n; ++i) {
    x = x * 1103515245u + 12345u;
    out.push_back(int((x >> 16) % 90u));
  }
  return out;
}

// A config.json text refused with a FormatError whose message holds every one of `parts`.
void bad(const std::string& text, const std::vector<std::string>& parts) {
  try {
    ModelConfig::from_json(text, "cfg.json");
    FAIL("accepted: " << text);
  } catch (const FormatError& e) {
    CHECK_THAT(e.what(), Contains("cfg.json"));
    for (const auto& p : parts) CHECK_THAT(e.what(), Contains(p));
  }
}

}  // namespace

// The reference's logits of 8 ids at each of 300 positions, against recur's: the normwise
// relative error of each position, |difference| over the largest |logit| of that position (a
// logit near 0 has no relative error of its own), within 1e-6, or within the error of the same
// reference computed in float32 by PyTorch (expected.json's float32_reference_normwise_error,
// 5e-7 to 1.4e-6 on these fixtures) where float32's own rounding goes past 1e-6: recur in
// float32 is asked to be as close to float64 as float32 arithmetic gets, not closer.
constexpr double kLogitTolerance = 1e-6;

TEST_CASE("every Mamba-2 fixture's logits at every position are the float64 reference's",
          "[mamba2][model][reference]") {
  const std::vector<int> ids = recur::testing::read_ids(kFixtures + "/prompt_ids.txt");
  REQUIRE(ids.size() == 300);
  recur::testing::check_reference_fixtures(kFixtures, ids, 6, kLogitTolerance);
  recur::testing::check_reference_fixtures(kNemotronFixtures, ids, 2, kLogitTolerance);
}

TEST_CASE("a Mamba-2 state is fixed in size and refuses bytes of another shape, a NaN or "
          "mismatched counts, keeping its own", "[mamba2][model]") {
  const auto m = model_of(kGroups);
  Decoder d(m, DecoderOptions{8, 1});
  d.prefill(tokens(20));
  const std::string before = d.save_bytes();
  CHECK_THROWS_AS(d.prefill({3, 4, 96, 5}), ArgumentError);
  CHECK_THROWS_AS(d.step(-1), ArgumentError);
  CHECK(d.save_bytes() == before);
  const std::size_t bytes20 = d.state_bytes();
  d.prefill(tokens(500));
  CHECK(d.state_bytes() == bytes20);

  const auto& net = *recur::model::impl_of(*m).network;
  auto state = net.make_state(0);
  auto other = net.make_state(0);
  CHECK(state->kind() == recur::MixerKind::kDecayedRecurrence);
  // S: format, 4 heads of 16 x 8 floats, the count; the window: 3 rows of 32 + 2 * 2 * 16
  // channels, the count.
  const std::size_t s_bytes = 4 + 4 * 16 * 8 * 4 + 8;
  CHECK(state->raw_size() == s_bytes + 3 * 96 * 4 + 8);
  std::vector<unsigned char> bytes = state->raw_bytes();
  const auto kept = other->raw_bytes();
  CHECK_THROWS_AS(other->load_raw_bytes(bytes.data(), bytes.size() - 4), FormatError);
  std::vector<unsigned char> nan = bytes;
  const float bad = std::numeric_limits<float>::quiet_NaN();
  std::memcpy(nan.data() + 8, &bad, sizeof bad);
  CHECK_THROWS_WITH(other->load_raw_bytes(nan.data(), nan.size()), Contains("non-finite"));
  std::vector<unsigned char> counts = bytes;  // the recurrence says 5 tokens, the window 0
  const std::int64_t five = 5;
  std::memcpy(counts.data() + s_bytes - 8, &five, sizeof five);
  CHECK_THROWS_WITH(other->load_raw_bytes(counts.data(), counts.size()), Contains("tokens"));
  CHECK(other->raw_bytes() == kept);
}

TEST_CASE("a Mamba-2 config the model cannot run is refused, naming the field", "[mamba2][config]") {
  const std::string base = R"("model_type": "mamba2", "hidden_size": 16, "num_hidden_layers": 1, )"
                           R"("vocab_size": 32, "state_size": 8, "n_groups": 1, "head_dim": 8)";
  bad("{" + base + R"(, "num_heads": 3})", {"num_heads 3", "expand"});
  // base without n_groups, for the tests of that field.
  const std::string ungrouped = R"("model_type": "mamba2", "hidden_size": 16, "num_hidden_layers": 1, )"
                                R"("vocab_size": 32, "state_size": 8, "head_dim": 8, "num_heads": 4)";
  bad("{" + ungrouped + R"(, "n_groups": 3})", {"heads are not a multiple of n_groups 3"});
  bad("{" + base + R"(, "num_heads": 4, "rms_norm": false})", {"rms_norm"});
  bad("{" + base + R"(, "num_heads": 4, "time_step_limit": [0.1, 0.01]})", {"time_step_limit"});
  bad("{" + base + R"(, "num_heads": 4, "time_step_limit": [-1, Infinity]})", {"time_step_limit"});
  bad("{" + base + R"(, "num_heads": 4, "time_step_limit": 3})", {"time_step_limit is 3"});
  bad("{" + base + R"(, "num_heads": 4, "intermediate_size": 64})", {"intermediate_size is 64"});
  bad("{" + base + R"(, "num_heads": 4, "hidden_act": "gelu"})", {"hidden_act"});
  bad("{" + base + R"(, "num_heads": 4, "mystery": 1})", {"mystery"});
  bad(R"({"d_model": 16, "n_layer": 1, "vocab_size": 32, "d_intermediate": 64,
          "ssm_cfg": {"layer": "Mamba2", "headdim": 8}})", {"d_intermediate"});
  bad(R"({"d_model": 16, "n_layer": 1, "vocab_size": 32, "attn_layer_idx": [0],
          "ssm_cfg": {"layer": "Mamba2", "headdim": 8}})", {"attn_layer_idx"});
  bad(R"({"d_model": 16, "n_layer": 1, "vocab_size": 32,
          "ssm_cfg": {"layer": "Mamba2", "headdim": 8, "D_has_hdim": true}})", {"D_has_hdim"});
  bad(R"({"d_model": 16, "n_layer": 1, "vocab_size": 32,
          "ssm_cfg": {"layer": "Mamba2", "headdim": 8, "mystery": 2}})", {"ssm_cfg.mystery"});
  bad(R"({"d_model": 16, "n_layer": 1, "vocab_size": 32,
          "ssm_cfg": {"layer": "Mamba1"}})", {"model_type is missing"});
  const std::string granite = R"("model_type": "granitemoehybrid", "hidden_size": 16, )"
                              R"("num_hidden_layers": 2, "num_attention_heads": 2, "vocab_size": 32, )"
                              R"("mamba_n_heads": 4, "mamba_d_head": 8, "mamba_d_state": 8)";
  bad("{" + granite + R"(, "layer_types": ["mamba", "attention"]})", {"num_local_experts is 8", "mixture-of-experts"});
  bad("{" + granite + R"(, "num_local_experts": 62, "layer_types": ["mamba", "attention"]})", {"num_local_experts is 62"});
  bad("{" + granite + R"(, "num_local_experts": 0})", {"layer_types is missing"});
  bad("{" + granite + R"(, "num_local_experts": 0, "layer_types": ["mamba", "mlp"]})", {"layer_types holds \"mlp\""});
  bad("{" + granite + R"(, "num_local_experts": 0, "layer_types": ["mamba", "attention"], "position_embedding_type": "alibi"})", {"position_embedding_type"});
  bad(R"({"model_type": "granitemoehybrid", "hidden_size": 16, "num_hidden_layers": 2,
          "num_attention_heads": 2, "vocab_size": 32, "mamba_n_heads": 5, "mamba_d_head": 8,
          "num_local_experts": 0, "layer_types": ["mamba", "attention"]})", {"mamba_n_heads 5 * mamba_d_head 8"});
  bad("{" + granite + R"(, "num_local_experts": 0, "layer_types": ["mamba", "attention"], "rope_scaling": {"type": "linear"}})", {"rope_scaling"});
  // Each field the tables declare, refused by its key (nested ones by their path).
  bad("{" + ungrouped + R"(, "n_groups": 0})", {"n_groups is 0"});
  bad("{" + base + R"(, "num_heads": 4, "use_bias": 1})", {"use_bias is 1"});
  bad("{" + base + R"(, "num_heads": 4, "hidden_act": "relu"})", {"hidden_act is 'relu'", "silu or swish"});
  const std::string ssm = R"("d_model": 16, "n_layer": 1, "vocab_size": 32, )";
  bad("{" + ssm + R"("ssm_cfg": {"layer": "Mamba2", "headdim": 8, "dt_limit": [1]}})", {"ssm_cfg.dt_limit is"});
  bad("{" + ssm + R"("ssm_cfg": {"layer": "Mamba2", "headdim": 8, "rmsnorm": false}})", {"ssm_cfg.rmsnorm is false"});
  bad("{" + ssm + R"("ssm_cfg": {"layer": "Mamba2", "headdim": 8, "d_ssm": 16}})", {"ssm_cfg.d_ssm is 16", "32"});
  bad("{" + ssm + R"("ssm_cfg": {"layer": "Mamba2", "headdim": 8, "activation": "gelu"}})", {"ssm_cfg.activation is 'gelu'"});
  bad("{" + ssm + R"("ssm_cfg": {"layer": "Mamba2", "headdim": 12}})", {"ssm_cfg.headdim 12"});
  bad("{" + ssm + R"("ssm_cfg": {"layer": "Mamba2", "headdim": 8}, "tie_embeddings": false, "tie_word_embeddings": true})",
      {"tie_word_embeddings is true but tie_embeddings is false"});
  bad("{" + ssm + R"("ssm_cfg": {"layer": "Mamba2", "headdim": 8}, "attn_cfg": {"num_heads": 2}})", {"attn_cfg is"});
  bad("{" + granite + R"(, "num_local_experts": 0, "layer_types": ["mamba"]})", {"layer_types is", "expected 2 entries (num_hidden_layers)"});
  bad("{" + granite + R"(, "num_local_experts": 0, "layer_types": "mamba"})", {"layer_types is \"mamba\""});
  bad(R"({"model_type": "granitemoehybrid", "hidden_size": 16, "num_hidden_layers": 2,
          "num_attention_heads": 2, "vocab_size": 32, "mamba_n_heads": 4, "mamba_d_head": "big",
          "num_local_experts": 0, "layer_types": ["mamba", "attention"]})", {"mamba_d_head is \"big\""});
  bad("{" + granite + R"(, "num_local_experts": 0, "layer_types": ["mamba", "attention"], "rope_parameters": {"rope_type": "yarn"}})", {"rope_parameters.rope_type is 'yarn'"});
  bad("{" + granite + R"(, "num_local_experts": 0, "layer_types": ["mamba", "attention"], "normalization_function": "layernorm"})", {"normalization_function is \"layernorm\""});
  bad("{" + granite + R"(, "num_local_experts": 0, "layer_types": ["mamba", "attention"], "time_step_limit": [0]})", {"time_step_limit is"});
}

TEST_CASE("a Nemotron-H config the model cannot run is refused, naming the field",
          "[mamba2][nemotron_h][config]") {
  const std::string base = R"("model_type": "nemotron_h", "hidden_size": 16, "vocab_size": 32, )"
                           R"("num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 8, )"
                           R"("mamba_num_heads": 4, "mamba_head_dim": 8, "ssm_state_size": 8, )"
                           R"("n_groups": 2, "intermediate_size": 32)";
  const auto with = [&](const std::string& more) { return "{" + base + ", " + more + "}"; };
  CHECK_NOTHROW(ModelConfig::from_json(
      with(R"("num_hidden_layers": 3, "hybrid_override_pattern": "M*-")"), "cfg.json"));
  bad(with(R"("num_hidden_layers": 3, "hybrid_override_pattern": "ME*")"),
      {"hybrid_override_pattern has E", "layer 1", "mixture-of-experts"});
  bad(with(R"("num_hidden_layers": 3, "hybrid_override_pattern": "M*X")"),
      {"hybrid_override_pattern has 'X' at layer 2"});
  bad(with(R"("num_hidden_layers": 4, "hybrid_override_pattern": "M*-")"),
      {"hybrid_override_pattern has 3 letters for num_hidden_layers 4"});
  bad(with(R"("num_hidden_layers": 2, "hybrid_override_pattern": "--")"), {"no M or * layer"});
  bad(with(R"("num_hidden_layers": 2)"), {"hybrid_override_pattern is missing"});
  bad(with(R"("num_hidden_layers": 2, "hybrid_override_pattern": "M-", "mlp_hidden_act": "silu")"),
      {"mlp_hidden_act is 'silu'", "relu2"});
  bad(with(R"("num_hidden_layers": 2, "hybrid_override_pattern": "M-", "mamba_proj_bias": true)"),
      {"mamba_proj_bias"});
  bad(with(R"("num_hidden_layers": 2, "hybrid_override_pattern": "*-", "sliding_window": 128)"),
      {"sliding_window"});
  bad(with(R"("num_hidden_layers": 2, "hybrid_override_pattern": "M-", "n_routed_experts": 8)"),
      {"n_routed_experts"});
  std::string kv3 = with(R"("num_hidden_layers": 2, "hybrid_override_pattern": "*-")");
  kv3.replace(kv3.find("\"num_key_value_heads\": 1"), 24, "\"num_key_value_heads\": 3");
  bad(kv3, {"num_attention_heads 2 is not a multiple of num_key_value_heads 3"});
  bad(with(R"("num_hidden_layers": 2, "hybrid_override_pattern": "M-", "n_groups": 3)"),
      {"n_groups"});
  // NVIDIA's name for the heads' size (Nemotron-H 8B's config.json), alone or agreeing.
  std::string nvidia = with(R"("num_hidden_layers": 2, "hybrid_override_pattern": "*-")");
  nvidia.replace(nvidia.find("\"head_dim\": 8"), 13, "\"attention_head_dim\": 24");
  CHECK(ModelConfig::from_json(nvidia, "cfg.json").to_json().find("\"head_dim\": 24") !=
        std::string::npos);
  bad(with(R"("num_hidden_layers": 2, "hybrid_override_pattern": "*-", "attention_head_dim": 16)"),
      {"head_dim is 8 and attention_head_dim 16"});
}

// The fields of Nemotron-H 8B's config.json as a unit test of NVIDIA's TensorRT-LLM quotes them
// (a Python dict, not the file verbatim, so not a published fixture), written as JSON: every key
// is read or accepted, attention_head_dim (NVIDIA's name) among them.
TEST_CASE("Nemotron-H 8B's config.json fields read as its shape", "[mamba2][nemotron_h][config]") {
  const ModelConfig c = config(R"({
    "architectures": ["NemotronHForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
    "attention_head_dim": 128, "bos_token_id": 1, "chunk_size": 256, "conv_kernel": 4,
    "eos_token_id": 2, "expand": 2, "hidden_dropout": 0.0, "hidden_size": 4096,
    "hybrid_override_pattern": "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-",
    "initializer_range": 0.02, "intermediate_size": 21504, "layer_norm_epsilon": 1e-05,
    "mamba_head_dim": 64, "mamba_hidden_act": "silu", "mamba_num_heads": 128,
    "mamba_proj_bias": false, "max_position_embeddings": 8192, "mlp_bias": false,
    "mlp_hidden_act": "relu2", "model_type": "nemotron_h", "n_groups": 8,
    "num_attention_heads": 32, "num_hidden_layers": 52, "num_key_value_heads": 8,
    "num_logits_to_keep": 1, "pad_token_id": 0, "rescale_prenorm_residual": true,
    "residual_in_fp32": false, "rms_norm_eps": 1e-05, "sliding_window": null,
    "ssm_state_size": 128, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
    "use_bias": false, "use_cache": true, "use_conv_bias": true, "use_mamba_kernels": true,
    "vocab_size": 131072})");
  CHECK(c.num_hidden_layers == 52);
  // 24 Mamba-2 and 4 attention layers keep a state; the 24 MLP blocks none.
  CHECK(std::count(c.mixers.begin(), c.mixers.end(), recur::MixerKind::kDecayedRecurrence) == 24);
  CHECK(std::count(c.mixers.begin(), c.mixers.end(), recur::MixerKind::kAttention) == 4);
  CHECK(c.mixers.size() == 28);
  CHECK_THAT(c.to_json(), Contains("\"head_dim\": 128"));
}

TEST_CASE("a Nemotron-H MLP block keeps no state, and only the attention layers' state grows",
          "[mamba2][nemotron_h][model]") {
  const auto m = model_of(kNemotron);
  const auto& net = *recur::model::impl_of(*m).network;
  REQUIRE(net.n_layers() == 3);  // M, *, M: the two MLP blocks have no state
  CHECK(net.make_state(0)->kind() == recur::MixerKind::kDecayedRecurrence);
  CHECK(net.make_state(1)->kind() == recur::MixerKind::kAttention);
  CHECK(net.make_state(2)->kind() == recur::MixerKind::kDecayedRecurrence);
  Decoder d(m, DecoderOptions{8, 1});
  d.prefill(tokens(10));
  const std::size_t ssd = d.state_bytes(recur::MixerKind::kDecayedRecurrence);
  const std::size_t kv = d.state_bytes(recur::MixerKind::kAttention);
  d.prefill(tokens(50));
  CHECK(d.state_bytes(recur::MixerKind::kDecayedRecurrence) == ssd);
  CHECK(d.state_bytes(recur::MixerKind::kAttention) > kv);  // keys and values of 2 kv heads of 12
}

TEST_CASE("a Mamba-2 configuration written out reads back as itself", "[mamba2][config]") {
  for (const char* text : {kGroups, kMambaSsm, kGranite, kGraniteDense, kNemotron}) {
    const ModelConfig c = config(text);
    const std::string once = c.to_json();
    const ModelConfig back = ModelConfig::from_json(once, "written");
    CHECK(back.to_json() == once);
    CHECK(back.vocab_size == c.vocab_size);
  }
  CHECK(config(kMambaSsm).vocab_size == 96);
  CHECK_THAT(config(kMambaSsm).to_json(), Contains("\"dt_limit\": [0, Infinity]"));
}

TEST_CASE("every Mamba-2 and Granite fixture's config.json, written by recur, reads back as itself "
          "and keeps the keys the published files have", "[mamba2][config]") {
  // Written by the checkpoints' tools, not the architecture: sampling ids, dtype, caching.
  const std::set<std::string> tooling = {"torch_dtype", "bos_token_id", "pad_token_id", "use_cache",
                                         "initializer_range"};
  // Codestral Mamba's own additions to transformers' keys (mamba2-groups copies them).
  const std::set<std::string> codestral = {"norm_before_gate", "time_step_scale", "time_step_init_scheme"};
  for (const char* name : {"mamba2-plain", "mamba2-groups", "mamba2-clamped", "mamba-ssm",
                           "granite-dense", "granite-hybrid"}) {
    INFO(name);
    const std::string published = recur::testing::slurp(kFixtures + "/" + name + "/config.json");
    const ModelConfig c = ModelConfig::from_json(published, name);
    const std::string written = c.to_json();
    const ModelConfig back = ModelConfig::from_json(written, "written");
    CHECK(back.to_json() == written);
    CHECK(back.mixers == c.mixers);
    std::set<std::string> ignored = tooling;
    if (std::string(name) == "mamba2-groups") ignored.insert(codestral.begin(), codestral.end());
    CHECK(recur::testing::keys_left_out(published, written, ignored) == std::vector<std::string>{});
  }
  // What recur wrote before it wrote the published keys is what the fingerprint hashes, so that
  // states saved then still load (tests/golden's states: the bytes of those lines).
  const ModelConfig groups = config(kGroups);
  CHECK_THAT(groups.to_json(), Contains("\"architectures\"") && Contains("\"chunk_size\": 256"));
  const std::string hashed = recur::model::fingerprint_text(groups);
  CHECK_THAT(hashed, !Contains("\"architectures\"") && !Contains("\"chunk_size\"") &&
                         Contains("\"layer_norm_epsilon\": 1e-05,\n  \"hidden_act\": \"silu\",\n  \"rms_norm\": true,\n"));
  // IBM's dense Granite files repeat the MLP's width as intermediate_size, and say there are no
  // experts (llama.cpp's converter reads both).
  const std::string dense = config(kGraniteDense).to_json();
  CHECK_THAT(dense, Contains("\"intermediate_size\": 24,") && Contains("\"shared_intermediate_size\": 24,") &&
                        Contains("\"num_local_experts\": 0,") && Contains("\"architectures\": [\"GraniteMoeHybridForCausalLM\"]"));
}

// The decay bounds S, so the float32 state should not drift from float64 over long streams.
// One SSD head at the published models' shape (d_state 128, head_dim 64), fed as the mixer feeds
// the gated walk (every key row decayed by a = exp(dt A)), with dt = softplus(dt_raw + dt_bias)
// for dt_bias drawn as mamba_ssm draws it (softplus in 0.001-0.1), A in 1-16, and x, B, C of unit
// variance, fresh every 4,096 tokens; y against the float64 recurrence from the same inputs,
// worst max |y - y64| / max |y64| per window, printed at powers of 4 (docs/mamba2.md).
TEST_CASE("a million tokens of the SSD walk stay within 1e-6 of float64", "[.][mamba2][fidelity]") {
  constexpr int N = 128, P = 64, kBlock = 4096, kBlocks = (1 << 20) / kBlock;
  recur::GlaRecurrenceConfig gc;
  gc.n_heads = 1;
  gc.d_key = N;
  gc.d_value = P;
  gc.scale = 1.0f;
  const recur::GlaRecurrence scan(gc);
  recur::GlaState st = scan.make_state();
  std::vector<double> S64(std::size_t(N) * P, 0.0);
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  std::uniform_real_distribution<double> unit;
  const double A = -(1.0 + 15.0 * unit(rng));
  const double dt0 = std::exp(std::log(1e-3) + unit(rng) * (std::log(0.1) - std::log(1e-3)));
  const double dt_bias = dt0 + std::log(-std::expm1(-dt0));
  double worst = 0;
  recur::RowMatrix Q(kBlock, N), K(kBlock, N), V(kBlock, P), Al(kBlock, N), O(kBlock, P);
  for (int blk = 0; blk < kBlocks; ++blk) {
    std::vector<double> y64(std::size_t(kBlock) * P);
    for (int t = 0; t < kBlock; ++t) {
      const double raw = double(normal(rng)) + dt_bias;
      const float dt = float(raw > 20.0 ? raw : std::log1p(std::exp(raw)));
      const float a = float(std::exp(double(dt) * A));
      for (int i = 0; i < N; ++i) {
        Q(t, i) = normal(rng);
        K(t, i) = normal(rng);
        Al(t, i) = a;
      }
      for (int j = 0; j < P; ++j) V(t, j) = dt * normal(rng);
      for (int i = 0; i < N; ++i)
        for (int j = 0; j < P; ++j) {
          double& s = S64[std::size_t(i) * P + std::size_t(j)];
          s = double(a) * s + double(K(t, i)) * double(V(t, j));
          y64[std::size_t(t) * P + std::size_t(j)] += s * double(Q(t, i));
        }
    }
    scan.prefill(st, Q, K, V, Al, O, recur::PrefillOptions{kBlock, 1});
    double diff = 0, scale = 0;
    for (int t = 0; t < kBlock; ++t)
      for (int j = 0; j < P; ++j) {
        const double w = y64[std::size_t(t) * P + std::size_t(j)];
        diff = std::max(diff, std::abs(double(O(t, j)) - w));
        scale = std::max(scale, std::abs(w));
      }
    worst = std::max(worst, diff / scale);
    const int tokens = (blk + 1) * kBlock;
    const bool power_of_4 = (tokens & (tokens - 1)) == 0 && (tokens & 0x55555555) != 0;
    if (power_of_4 || blk + 1 == kBlocks)
      WARN("after " << tokens << " tokens: worst relative error " << worst << " (this window "
                    << diff / scale << "; A " << A << ", softplus(dt_bias) " << dt0 << ")");
  }
  CHECK(worst < 1e-6);
}
