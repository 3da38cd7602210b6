// The Gated DeltaNet models (engine/models/gdn): Qwen3.5's hybrid of Gated DeltaNet and gated
// full attention, fla's gated_deltanet (with its softmax layers) and delta_net, on random
// weights: bad state bytes are refused with the state unchanged; the multimodal checkpoint's
// extra tensors are skipped by name and any other refused; the attention layers' KV cache counts
// in the state's size; the family's config refusals; a partial rotary. What every family must do
// (exactness across chunks, threads, instruction sets and batches, saved states, quantization,
// refusals of tensors) is test_conformance's; the scores against the float64 reference are
// tests/model_test.sh's (gdn, with tests/gdn/suite.sh).
#include <catch2/catch.hpp>

#include <cstring>
#include <limits>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "model/model_impl.h"
#include "models/gdn/gdn.h"
#include "recur/causal_attention.h"
#include "model/random_weights.h"
#include "recur/error.h"
#include "recur/model.h"
#include "support/given_options.h"
#include "support/io_files.h"
#include "util/file.h"

namespace {

using recur::ArgumentError;
using recur::Decoder;
using recur::DecoderOptions;
using recur::FormatError;
using recur::Model;
using recur::ModelConfig;
using recur::RandomWeights;
using recur::WeightSource;
using Catch::Matchers::Contains;
using Shape = std::vector<std::int64_t>;

// Qwen3.5 as the Hub ships it (text_config inside the multimodal config): layers G A G A with
// 2 key heads of 24 (padded to 32 inside the kernel) over 4 value heads of 16, attention 4 heads
// over 2 kv heads of 16 with rotary on 4 dims.
const char* const kQwenHybrid = R"({
  "model_type": "qwen3_5", "architectures": ["Qwen3_5ForConditionalGeneration"],
  "tie_word_embeddings": false, "image_token_id": 90, "vision_config": {"depth": 1},
  "text_config": {"model_type": "qwen3_5_text", "vocab_size": 96, "hidden_size": 32,
    "intermediate_size": 48, "num_hidden_layers": 4, "num_attention_heads": 4,
    "num_key_value_heads": 2, "head_dim": 16, "rms_norm_eps": 1e-6, "hidden_act": "silu",
    "layer_types": ["linear_attention", "full_attention", "linear_attention", "full_attention"],
    "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 24,
    "linear_value_head_dim": 16, "linear_conv_kernel_dim": 4, "attn_output_gate": true,
    "mamba_ssm_dtype": "float32",
    "rope_parameters": {"rope_type": "default", "rope_theta": 10000000,
                        "partial_rotary_factor": 0.25, "mrope_section": [1, 1, 0],
                        "mrope_interleaved": true}}})";

// The same text model as Qwen3.5's text-only config.json (model_type qwen3_5_text), with the
// older rope_scaling and top-level rotary fields, and no layer_types (every 2nd layer full).
const char* const kQwenText = R"({
  "model_type": "qwen3_5_text", "vocab_size": 96, "hidden_size": 32, "intermediate_size": 48,
  "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
  "rms_norm_eps": 1e-5, "hidden_act": "swish", "full_attention_interval": 2,
  "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 24,
  "linear_value_head_dim": 16, "tie_word_embeddings": true, "rope_theta": 5000,
  "partial_rotary_factor": 0.5, "rope_scaling": {"type": "mrope", "mrope_section": [1, 1, 0]},
  "eos_token_id": [3, 4]})";

// fla's gated_deltanet with a softmax layer at 1, no convolutions, no gate, allow_neg_eigval.
const char* const kFlaHybrid = R"({
  "model_type": "gated_deltanet", "vocab_size": 96, "hidden_size": 32, "num_hidden_layers": 3,
  "num_heads": 2, "num_v_heads": 4, "head_dim": 16, "expand_v": 1, "use_gate": false,
  "use_short_conv": false, "allow_neg_eigval": true, "intermediate_size": 48,
  "attn": {"layers": [1], "num_heads": 4, "num_kv_heads": 2}})";

// fla's delta_net: no decay, relu on q and k, the sum norm, short convolutions, a gate.
const char* const kFlaDelta = R"({
  "model_type": "delta_net", "vocab_size": 96, "hidden_size": 32, "num_hidden_layers": 2,
  "num_heads": 2, "expand_k": 1, "expand_v": 1, "use_gate": true, "use_beta": true,
  "qk_activation": "relu", "qk_norm": "sum", "intermediate_size": 48})";

ModelConfig config(const char* json) { return ModelConfig::from_json(json, "config.json"); }

// Tensors in memory, copied from another source and then edited.
class Tensors final : public WeightSource {
 public:
  explicit Tensors(const WeightSource& from) {
    for (const auto& n : from.names()) t_[n] = {from.shape(n), from.read(n)};
  }
  bool has(const std::string& name) const override { return t_.count(name) != 0; }
  Shape shape(const std::string& name) const override { return t_.at(name).first; }
  std::vector<float> read(const std::string& name) const override { return t_.at(name).second; }
  std::vector<std::string> names() const override {
    std::vector<std::string> out;
    for (const auto& [n, v] : t_) out.push_back(n);
    return out;
  }
  std::string describe() const override { return "test tensors"; }
  void drop(const std::string& name) { t_.erase(name); }
  void put(const std::string& name, Shape shape, float value = 0.1f) {
    std::size_t n = 1;
    for (auto d : shape) n *= std::size_t(d);
    t_[name] = {std::move(shape), std::vector<float>(n, value)};
  }

 private:
  std::map<std::string, std::pair<Shape, std::vector<float>>> t_;
};

std::shared_ptr<const Model> model_of(const char* json) {
  const ModelConfig c = config(json);
  return Model::from_weights(c, RandomWeights(c, 11));
}

std::vector<int> tokens(int n) {
  std::vector<int> out;
  std::uint32_t x = 12345;
  for (int i = 0; i < n; ++i) {
    x = x * 1103515245u + 12345u;
    out.push_back(int((x >> 16) % 96u));
  }
  return out;
}

}  // namespace

TEST_CASE("a Gated DeltaNet layer's state refuses bytes of another shape or a NaN and keeps its own",
          "[gdn][model]") {
  const auto m = model_of(kQwenHybrid);
  const auto& net = *recur::model::impl_of(*m).network;
  auto state = net.make_state(0);
  auto other = net.make_state(0);
  CHECK(state->kind() == recur::MixerKind::kDeltaRule);
  // One conv (2 * 48 + 64 channels, 3 past inputs, its token count), S of 4 heads of 16 x 32
  // (d_k 24 padded to 32), the format and the token count.
  CHECK(state->raw_size() == 4 + (3 * 160 * 4 + 8) + 4 * 16 * 32 * 4 + 8);
  std::vector<unsigned char> bytes = state->raw_bytes();
  REQUIRE(bytes.size() == state->raw_size());
  const float one = 1.0f;
  std::memcpy(bytes.data() + 4 + 3 * 160 * 4 + 8 + 4, &one, sizeof one);  // an entry of S
  const auto before = other->raw_bytes();
  CHECK_THROWS_AS(other->load_raw_bytes(bytes.data(), bytes.size() - 4), FormatError);
  CHECK(other->raw_bytes() == before);
  std::vector<unsigned char> nan = bytes;
  const float bad = std::numeric_limits<float>::quiet_NaN();
  std::memcpy(nan.data() + 4 + 3 * 160 * 4 + 8 + 8, &bad, sizeof bad);
  CHECK_THROWS_WITH(other->load_raw_bytes(nan.data(), nan.size()), Contains("non-finite"));
  CHECK(other->raw_bytes() == before);
  // The record's frame: another format, a negative token count.
  std::vector<unsigned char> format = bytes;
  const std::uint32_t two = 2;
  std::memcpy(format.data(), &two, sizeof two);
  CHECK_THROWS_WITH(other->load_raw_bytes(format.data(), format.size()),
                    Contains("state format 2"));
  CHECK(other->raw_bytes() == before);
  std::vector<unsigned char> negative = bytes;
  const std::int64_t minus = -1;
  std::memcpy(negative.data() + negative.size() - 8, &minus, sizeof minus);
  CHECK_THROWS_WITH(other->load_raw_bytes(negative.data(), negative.size()),
                    Contains("token count is -1"));
  CHECK(other->raw_bytes() == before);
  std::vector<unsigned char> counts = bytes;  // the recurrence says 5 tokens, the conv 0
  const std::int64_t five = 5;
  std::memcpy(counts.data() + counts.size() - 8, &five, sizeof five);
  CHECK_THROWS_WITH(other->load_raw_bytes(counts.data(), counts.size()), Contains("tokens"));
  CHECK(other->raw_bytes() == before);
  other->load_raw_bytes(bytes.data(), bytes.size());
  CHECK(other->raw_bytes() == bytes);
}

TEST_CASE("the attention layers' KV cache counts in a Qwen3.5 state, the Gated DeltaNet layers' "
          "stays constant", "[gdn][model]") {
  const auto hybrid = model_of(kQwenHybrid);
  Decoder d(hybrid, DecoderOptions{64, 1});
  d.prefill(tokens(10));
  const std::size_t at10 = d.state_bytes(recur::MixerKind::kAttention);
  const std::size_t delta10 = d.state_bytes(recur::MixerKind::kDeltaRule);
  d.prefill(tokens(100));
  CHECK(d.state_grows());
  // Two attention layers, a key and a value of 2 kv heads of 16 floats per token.
  CHECK(d.state_bytes(recur::MixerKind::kAttention) - at10 == 100u * 2 * 2 * 2 * 16 * 4);
  CHECK(d.state_bytes(recur::MixerKind::kDeltaRule) == delta10);
  const auto pure = model_of(kFlaDelta);
  Decoder p(pure, DecoderOptions{64, 1});
  p.prefill(tokens(10));
  const std::size_t bytes10 = p.state_bytes();
  p.prefill(tokens(200));
  CHECK_FALSE(p.state_grows());
  CHECK(p.state_bytes() == bytes10);
}

TEST_CASE("a Qwen3.5 checkpoint's vision and multi-token-prediction tensors are skipped by name, "
          "any other unknown tensor refused by name", "[gdn][model]") {
  const ModelConfig c = config(kQwenHybrid);
  Tensors w{RandomWeights(c, 3)};
  w.put("model.visual.blocks.0.attn.qkv.weight", {6, 4});
  w.put("mtp.fc.weight", {4, 4});
  const auto m = Model::from_weights(c, w);
  Tensors other = w;
  other.put("model.language_model.layers.0.linear_attn.extra", {4});
  CHECK_THROWS_WITH(Model::from_weights(c, other),
                    Contains("model.language_model.layers.0.linear_attn.extra"));
  Tensors missing = w;
  missing.drop("model.language_model.layers.2.linear_attn.A_log");
  CHECK_THROWS_WITH(Model::from_weights(c, missing), Contains("linear_attn.A_log"));
  // fla's early-2025 attn.D is accepted by name in fla's layout, and nowhere else.
  const ModelConfig f = config(kFlaHybrid);
  Tensors fw{RandomWeights(f, 3)};
  fw.put("model.layers.0.attn.D", {2});
  CHECK_NOTHROW(Model::from_weights(f, fw));
  fw.put("model.layers.0.attn.E", {2});
  CHECK_THROWS_WITH(Model::from_weights(f, fw), Contains("model.layers.0.attn.E"));
}

TEST_CASE("a Gated DeltaNet config the model cannot run is refused, naming the field",
          "[gdn][model]") {
  const auto refusal = [](const std::string& json) {
    try {
      ModelConfig::from_json(json, "config.json");
    } catch (const FormatError& e) {
      return std::string(e.what());
    }
    return std::string("(read)");
  };
  std::string q = kQwenHybrid;
  const auto with = [&](const std::string& from, const std::string& to) {
    std::string s = q;
    const auto at = s.find(from);
    REQUIRE(at != std::string::npos);
    return s.replace(at, from.size(), to);
  };
  CHECK_THAT(refusal(with("\"hidden_act\": \"silu\"", "\"hidden_act\": \"gelu\"")),
             Contains("text_config.hidden_act"));
  CHECK_THAT(refusal(with("\"rope_type\": \"default\"", "\"rope_type\": \"yarn\"")),
             Contains("yarn"));
  CHECK_THAT(refusal(with("\"attn_output_gate\": true", "\"attn_output_gate\": true, \"sliding\": 3")),
             Contains("text_config.sliding"));
  CHECK_THAT(refusal(with("\"linear_num_value_heads\": 4", "\"linear_num_value_heads\": 3")),
             Contains("value heads"));
  CHECK_THAT(refusal(with("\"partial_rotary_factor\": 0.25", "\"partial_rotary_factor\": 0.3")),
             Contains("partial_rotary_factor"));
  CHECK_THAT(refusal(with("\"layer_types\": [\"linear_attention\", ", "\"layer_types\": [")),
             Contains("layer_types"));
  CHECK_THAT(refusal(R"({"model_type": "delta_net", "qk_norm": "l1"})"), Contains("qk_norm"));
  // fla's `attn` block is read as the GLA family reads it: a layer named twice, a layer in two
  // entries, window_size 1 and an unknown key are refused, naming the entry.
  const auto attn = [&](const std::string& block) {
    std::string s = kFlaHybrid;
    const std::string from = R"("attn": {"layers": [1], "num_heads": 4, "num_kv_heads": 2})";
    const auto at = s.find(from);
    REQUIRE(at != std::string::npos);
    return refusal(s.replace(at, from.size(), "\"attn\": " + block));
  };
  CHECK(attn(R"({"layers": [1], "num_heads": 4, "window_size": 2})") == "(read)");
  CHECK_THAT(attn(R"({"layers": [1, 1], "num_heads": 4})"),
             Contains("attn.layers names layer 1 twice"));
  CHECK_THAT(attn(R"([{"layers": [1], "num_heads": 4}, {"layers": [1], "num_heads": 2}])"),
             Contains("attn[1].layers names layer 1, which attn[0] already has"));
  CHECK_THAT(attn(R"({"layers": [1], "num_heads": 4, "window_size": 1})"),
             Contains("attn.window_size is 1 (a token attending to itself alone)"));
  CHECK_THAT(attn(R"({"layers": [1], "num_heads": 4, "causal": true})"), Contains("attn.causal"));
  CHECK_THAT(attn(R"({"layers": [1], "num_heads": 3})"), Contains("num_heads 3"));
}

TEST_CASE("attention's rotary over all of d_head is the default, and a partial rotary turns only "
          "its channels", "[gdn][attention]") {
  const auto run = [](int rotary_dim, const recur::RowMatrix& Q, const recur::RowMatrix& K,
                      const recur::RowMatrix& V) {
    recur::CausalAttentionConfig c;
    c.n_heads = 2;
    c.n_kv_heads = 1;
    c.d_head = 16;
    c.rope_theta = 100.0f;
    c.rotary_dim = rotary_dim;
    const recur::CausalAttention a(c);
    auto st = a.make_state();
    recur::RowMatrix O(Q.rows(), Q.cols());
    a.prefill(st, Q, K, V, O);
    return O;
  };
  recur::RowMatrix Q = recur::RowMatrix::Random(9, 32), K = recur::RowMatrix::Random(9, 16),
                   V = recur::RowMatrix::Random(9, 16);
  const recur::RowMatrix full = run(0, Q, K, V);
  CHECK(std::memcmp(run(16, Q, K, V).data(), full.data(), sizeof(float) * 9 * 32) == 0);
  // With the first 4 channels of q and k zero, a rotary over those 4 turns nothing, and the
  // other channels pass unturned: a query and key that are the same at every position score
  // alike at every position, unlike under the full rotary.
  for (int t = 0; t < 9; ++t) {
    for (int j = 0; j < 4; ++j) K(t, j) = 0.0f;
    for (int h = 0; h < 2; ++h)
      for (int j = 0; j < 4; ++j) Q(t, h * 16 + j) = 0.0f;
  }
  recur::RowMatrix Qs = Q, Ks = K;  // every row the same: positions alone could tell them apart
  for (int t = 1; t < 9; ++t) {
    Qs.row(t) = Q.row(0);
    Ks.row(t) = K.row(0);
  }
  const recur::RowMatrix same = run(4, Qs, Ks, V);
  // Identical queries and keys at every position: each token attends uniformly to the values so
  // far, whatever the position, since nothing is turned.
  for (int t = 0; t < 9; ++t)
    for (int c = 0; c < 16; ++c) {
      float mean = 0.0f;
      for (int u = 0; u <= t; ++u) mean += V(u, c);
      mean /= float(t + 1);
      CHECK(same(t, c) == Approx(mean).epsilon(1e-5));
    }
  CHECK(std::memcmp(run(0, Qs, Ks, V).data(), same.data(), sizeof(float) * 9 * 32) != 0);
  recur::CausalAttentionConfig bad;
  bad.d_head = 16;
  bad.rotary_dim = 5;
  CHECK_THROWS_AS(recur::CausalAttention(bad), ArgumentError);
  bad.rotary_dim = 18;
  CHECK_THROWS_WITH(recur::CausalAttention(bad), Contains("rotary_dim"));
}

namespace {

using recur::models::gdn::GdnConfig;

// Every field of the family's part of two configurations agrees.
void check_same(const ModelConfig& a, const ModelConfig& b) {
  const GdnConfig& g = recur::models::gdn::config_of(a);
  const GdnConfig& h = recur::models::gdn::config_of(b);
  CHECK(b.model_type() == a.model_type());
  CHECK(b.vocab_size == a.vocab_size);
  CHECK(b.hidden_size == a.hidden_size);
  CHECK(b.intermediate_size == a.intermediate_size);
  CHECK(b.num_hidden_layers == a.num_hidden_layers);
  CHECK(b.norm_eps == a.norm_eps);
  CHECK(b.tie_word_embeddings == a.tie_word_embeddings);
  CHECK(b.eos_token_ids == a.eos_token_ids);
  CHECK(b.mixers == a.mixers);
  CHECK(h.layout == g.layout);
  CHECK(h.n_k_heads == g.n_k_heads);
  CHECK(h.n_v_heads == g.n_v_heads);
  CHECK(h.d_k == g.d_k);
  CHECK(h.d_v == g.d_v);
  CHECK(h.conv_size == g.conv_size);
  CHECK(h.use_conv == g.use_conv);
  CHECK(h.use_gate == g.use_gate);
  CHECK(h.allow_neg_eigval == g.allow_neg_eigval);
  CHECK(h.qk_activation == g.qk_activation);
  CHECK(h.qk_sum_norm == g.qk_sum_norm);
  CHECK(h.use_beta == g.use_beta);
  CHECK(h.n_heads == g.n_heads);
  CHECK(h.n_kv_heads == g.n_kv_heads);
  CHECK(h.head_dim == g.head_dim);
  CHECK(h.partial_rotary_factor == g.partial_rotary_factor);
  CHECK(h.rope_theta == g.rope_theta);
  CHECK(h.max_position_embeddings == g.max_position_embeddings);
  CHECK(h.attn.specs.size() == g.attn.specs.size());
}

std::string published_qwen() {
  const auto text = recur::detail::read_file(std::string(RECUR_PUBLISHED_FIXTURES) +
                                             "/qwen3.5-0.8b/config.json");
  REQUIRE(text);
  return *text;
}

}  // namespace

TEST_CASE("every Gated DeltaNet layout's config.json, written and read again, is the same "
          "configuration", "[gdn][config]") {
  const std::vector<std::pair<const char*, std::string>> forms = {
      {"qwen3_5", kQwenHybrid}, {"qwen3_5_text", kQwenText}, {"gated_deltanet", kFlaHybrid},
      {"delta_net", kFlaDelta}, {"published Qwen3.5-0.8B", published_qwen()},
      // The defaults alone.
      {"qwen3_5 defaults", R"({"model_type": "qwen3_5", "text_config": {}})"},
      {"gated_deltanet defaults", R"({"model_type": "gated_deltanet"})"},
      {"delta_net defaults", R"({"model_type": "delta_net"})"}};
  for (const auto& [name, json] : forms) {
    INFO(name);
    const ModelConfig a = config(json.c_str());
    const std::string text = a.to_json();
    const ModelConfig b = ModelConfig::from_json(text, "written.json");
    CHECK(b.to_json() == text);
    check_same(a, b);
  }
  // What each form read, where the table's defaults and derived values decide.
  const ModelConfig text = config(kQwenText);
  const GdnConfig& t = recur::models::gdn::config_of(text);
  CHECK(text.mixers == std::vector<recur::MixerKind>{recur::MixerKind::kDeltaRule,
                                                      recur::MixerKind::kAttention,
                                                      recur::MixerKind::kDeltaRule,
                                                      recur::MixerKind::kAttention});
  CHECK(t.rope_theta == 5000);  // rope_scaling gives none: the top-level value
  CHECK(t.rotary_dim() == 8);
  CHECK(text.eos_token_ids == std::vector<int>{3, 4});
  CHECK(text.tie_word_embeddings);
  const ModelConfig fla_config = config(kFlaHybrid);
  const GdnConfig& fla = recur::models::gdn::config_of(fla_config);
  CHECK(fla.n_v_heads == 4);
  CHECK(fla.d_v == 16);  // head_dim 16 * expand_v 1
  const ModelConfig plain = config(R"({"model_type": "gated_deltanet", "num_heads": 3})");
  CHECK(recur::models::gdn::config_of(plain).n_v_heads == 3);  // num_v_heads' default: num_heads
  CHECK(recur::models::gdn::config_of(plain).d_v == 512);      // head_dim 256 * expand_v 2
  // text_config's eos ids count when the top level gives none; the top level's win.
  const std::string q = kQwenHybrid;
  const std::string with_eos = q.substr(0, q.size() - 2) + ", \"eos_token_id\": 7}}";
  CHECK(config(with_eos.c_str()).eos_token_ids == std::vector<int>{7});
  const std::string both = with_eos.substr(0, with_eos.size() - 1) + ", \"eos_token_id\": 5}";
  CHECK(config(both.c_str()).eos_token_ids == std::vector<int>{5});
}

TEST_CASE("a bad Gated DeltaNet field is refused naming its key, a nested one by its path",
          "[gdn][config]") {
  const auto refused = [](const std::string& json, std::vector<std::string> parts) {
    INFO(json);
    parts.push_back("bad.json");
    recur::testing::expect_format_error([&] { ModelConfig::from_json(json, "bad.json"); }, parts);
  };
  const std::string q = kQwenHybrid;
  const auto qwen = [&](const std::string& from, const std::string& to) {
    std::string s = q;
    const auto at = s.find(from);
    REQUIRE(at != std::string::npos);
    return s.replace(at, from.size(), to);
  };
  refused(qwen("\"linear_num_key_heads\": 2", "\"linear_num_key_heads\": 0"),
          {"text_config.linear_num_key_heads is 0", "1 to 65536"});
  refused(qwen("\"head_dim\": 16", "\"head_dim\": 16.5"), {"text_config.head_dim is 16.5"});
  refused(qwen("\"rope_theta\": 10000000", "\"rope_theta\": 1"),
          {"text_config.rope_parameters.rope_theta is 1"});
  refused(qwen("\"mrope_interleaved\": true", "\"mrope_interleaved\": true, \"factor\": 2"),
          {"unknown field 'text_config.rope_parameters.factor'", "rotary embedding"});
  refused(qwen("\"attn_output_gate\": true", "\"attn_output_gate\": false"),
          {"text_config.attn_output_gate is false", "output gate"});
  refused(qwen("\"mamba_ssm_dtype\": \"float32\"", "\"attention_bias\": true"),
          {"text_config.attention_bias is true"});
  refused(qwen("\"rms_norm_eps\": 1e-6", "\"rms_norm_eps\": 1e-6, \"eos_token_id\": 96"),
          {"text_config.eos_token_id holds 96", "vocab_size 96"});
  refused(qwen("\"rms_norm_eps\": 1e-6", "\"rms_norm_eps\": 1e-6, \"tie_word_embeddings\": true"),
          {"tie_word_embeddings is false but text_config.tie_word_embeddings is true"});
  refused(R"({"model_type": "qwen3_5", "text_config": 3})", {"without a text_config object"});
  refused(R"({"model_type": "qwen3_5", "text_config": {}, "hidden_size": 8})",
          {"unknown field 'hidden_size'"});
  refused(R"({"model_type": "qwen3_5_text", "rope_parameters": []})",
          {"rope_parameters is an array, expected an object"});
  refused(R"({"model_type": "qwen3_5_text", "layer_types": ["mamba"], "num_hidden_layers": 1})",
          {"layer_types holds \"mamba\""});
  refused(R"({"model_type": "gated_deltanet", "num_v_heads": 0})", {"num_v_heads is 0"});
  refused(R"({"model_type": "gated_deltanet", "use_gate": "yes"})",
          {"use_gate is \"yes\"", "true or false"});
  refused(R"({"model_type": "gated_deltanet", "hidden_act": "gelu"})",
          {"hidden_act is 'gelu'", "swish or silu"});
  refused(R"({"model_type": "gated_deltanet", "expand_k": 2})", {"unknown field 'expand_k'"});
  refused(R"({"model_type": "gated_deltanet", "attnres_block_size": 4})",
          {"attnres_block_size is 4"});
  refused(R"({"model_type": "delta_net", "qk_activation": "tanh"})",
          {"qk_activation is 'tanh'", "silu, relu, elu or identity"});
  refused(R"({"model_type": "delta_net", "head_dim": 16})", {"unknown field 'head_dim'"});
  refused(R"({"model_type": "delta_net", "hidden_size": 30, "num_heads": 4})",
          {"hidden_size 30 * expand_k = 30 is not num_heads 4 heads"});
}

TEST_CASE("make-model's Gated DeltaNet defaults derive from the shape options", "[gdn][config]") {
  using recur::testing::GivenOptions;
  using Given = GivenOptions::Values;
  const auto declared = recur::models::gdn::make_model_options();
  const auto made = [&](const char* arch, Given given) {
    const GivenOptions o(std::move(given), declared);
    return ModelConfig::from_json(recur::models::gdn::make_model_config(arch, o), "made.json");
  };
  const ModelConfig q = made("qwen35", Given{{"hidden", "32"}, {"heads", "2"}, {"layers", "4"}});
  const GdnConfig& g = recur::models::gdn::config_of(q);
  CHECK(q.model_type() == "qwen3_5");
  CHECK(q.intermediate_size == 96);  // 3 * hidden
  CHECK(g.head_dim == 16);           // hidden / heads
  CHECK(g.n_kv_heads == 2);          // heads
  CHECK(g.n_k_heads == 2);           // heads
  CHECK(g.n_v_heads == 4);           // twice the key heads
  CHECK(g.d_k == 16);
  CHECK(g.d_v == 16);  // the key head size
  CHECK(q.mixers.back() == recur::MixerKind::kAttention);
  const ModelConfig k_config =
      made("qwen35", Given{{"hidden", "32"}, {"heads", "2"}, {"gdn-k-heads", "3"},
                           {"gdn-head-dim", "8"}, {"intermediate", "40"}, {"text-only", ""}});
  const GdnConfig& k = recur::models::gdn::config_of(k_config);
  CHECK(k.layout == GdnConfig::Layout::kQwen35Text);
  CHECK(k.n_v_heads == 6);
  CHECK(k.d_v == 8);
  CHECK_THROWS_WITH(made("qwen35", Given{{"hidden", "30"}, {"heads", "4"}}),
                    Contains("give --head-dim"));
  const ModelConfig f = made("gated_deltanet", Given{{"hidden", "32"}, {"heads", "2"}});
  const GdnConfig& h = recur::models::gdn::config_of(f);
  CHECK(f.model_type() == "gated_deltanet");
  CHECK(h.n_v_heads == 2);  // the key heads
  CHECK(h.d_v == 32);       // twice the key head size
  CHECK(f.intermediate_size == 256);  // fla's rule from hidden_ratio
  const ModelConfig v_config =
      made("gated_deltanet", Given{{"gdn-head-dim", "12"}, {"gdn-v-dim", "18"},
                                   {"no-output-gate", ""}, {"gdn-no-conv", ""}});
  const GdnConfig& v = recur::models::gdn::config_of(v_config);
  CHECK(v.expand_v == 1.5);
  CHECK(v.d_v == 18);
  CHECK_FALSE(v.use_gate);
  CHECK_FALSE(v.use_conv);
}
