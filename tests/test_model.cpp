// The model against its float64 reference, for every supported configuration; and model-level
// exactness: logits after prefill in any chunking, split and thread count equal step() token by
// token, to the bit (every family's fixtures: test_conformance). Saved states and state files
// are in test_model_state.cpp.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "recur/error.h"
#include "model/random_weights.h"
#include "models/gla/gla.h"
#include "models/linear/linear.h"
#include "recur/model.h"
#include "recur/sampling.h"
#include "support/based_config.h"
#include "support/fla_gated_config.h"
#include "support/model_cases.h"
#include "support/model_reference.h"
#include "support/quant_model.h"
#include "support/temp_dir.h"

using namespace recur;
using recur::models::linear::ModelFeatureMap;
using recur::testing::quantized_model;
using recur::testing::small_based;
using recur::testing::TempDir;
using recur::testing::kSanitized;
using recur::testing::random_tokens;
using recur::testing::same_bytes;
using recur::testing::small_fla;

namespace {

// Largest logit error of a quantized model against its float weights, relative to the largest
// logit, on the model of the test below: measured 0.018 (q8) and 0.19 (q4); weights read in a
// wrong layout give errors of the logits' own size.
constexpr double kQ8LogitError = 0.04;
constexpr double kQ4LogitError = 0.35;

ModelConfig small_paper(const char* act) {
  ModelConfig c;
  c.architecture = Architecture::kTransformersAreRnns;
  c.vocab_size = 256;
  c.hidden_size = 64;
  c.num_hidden_layers = 2;
  c.num_heads = 4;
  c.intermediate_size = 128;
  c.norm_eps = 1e-5;
  auto& l = models::linear::edit(c);
  l.hidden_act = act;
  l.feature_map = ModelFeatureMap::kElu;
  l.norm_feature_map = true;
  l.attn_eps = 1e-6;
  l.elementwise_affine = false;
  return c;
}

struct Case {
  std::string name;
  ModelConfig config;
  DType dtype = DType::kF32;
  int shards = 1;
  std::string quant = "";       // "q8" or "q4": the model is quantized (docs/quantization.md)
  std::string quant_head = "";  // the head's format, when it differs
};

std::shared_ptr<const Model> make_model(const Case& c, std::uint64_t seed) {
  if (!c.quant.empty()) return quantized_model(c.config, seed, c.quant, c.quant_head, c.dtype);
  return Model::from_weights(c.config, RandomWeights(c.config, seed, c.dtype));
}

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  cases.push_back({"elu, normalized", small_fla(ModelFeatureMap::kElu, true)});
  cases.push_back({"elu, unnormalized", small_fla(ModelFeatureMap::kElu, false)});
  cases.push_back({"relu, normalized", small_fla(ModelFeatureMap::kRelu, true)});
  cases.push_back({"identity, unnormalized", small_fla(ModelFeatureMap::kIdentity, false)});
  cases.push_back({"hedgehog, normalized", small_fla(ModelFeatureMap::kHedgehog, true)});
  cases.push_back({"t2r, unnormalized", small_fla(ModelFeatureMap::kT2R, false)});
  cases.push_back({"dpfp, normalized", small_fla(ModelFeatureMap::kDpfp, true)});
  cases.push_back({"elementwise_product, unnormalized (the library's default)",
                   small_fla(ModelFeatureMap::kElementwiseProduct, false)});
  {
    Case c{"hedgehog, tied q/k maps, norm_q and norm_k", small_fla(ModelFeatureMap::kHedgehog, true)};
    auto& l = models::linear::edit(c.config);
    l.tie_feature_map_qk = true;
    l.norm_q = l.norm_k = true;
    cases.push_back(c);
  }
  {
    Case c{"elu, grouped kv heads (4 q, 2 kv), expand_k 0.5, expand_v 2",
           small_fla(ModelFeatureMap::kElu, true)};
    c.config.num_kv_heads = 2;
    models::linear::edit(c.config).expand_k = 0.5;
    models::linear::edit(c.config).expand_v = 2.0;
    cases.push_back(c);
  }
  {
    Case c{"t2r, no output-norm weight, tied embeddings", small_fla(ModelFeatureMap::kT2R, true)};
    models::linear::edit(c.config).elementwise_affine = false;
    c.config.tie_word_embeddings = true;
    cases.push_back(c);
  }
  {
    Case c{"elu, bf16 weights in 3 shards", small_fla(ModelFeatureMap::kElu, true)};
    c.dtype = DType::kBF16;
    c.shards = 3;
    cases.push_back(c);
  }
  {
    Case c{"elementwise_product, f16 weights", small_fla(ModelFeatureMap::kElementwiseProduct, false)};
    c.dtype = DType::kF16;
    cases.push_back(c);
  }
  cases.push_back({"transformers_are_rnns, relu MLP", small_paper("relu")});
  cases.push_back({"transformers_are_rnns, gelu MLP", small_paper("gelu")});
  return cases;
}

// Every position's logits, from one prefill call with a sink.
RowMatrix all_logits(Decoder& dec, const std::vector<int>& tokens) {
  const int V = dec.model().config().vocab_size;
  RowMatrix out(static_cast<Eigen::Index>(tokens.size()), V);
  dec.prefill(tokens, {}, [&](std::int64_t pos, const float* l) {
    std::memcpy(out.row(pos).data(), l, sizeof(float) * static_cast<std::size_t>(V));
  });
  return out;
}

}  // namespace

TEST_CASE("logits match the float64 reference for every supported configuration", "[model]") {
  const auto tokens = random_tokens(kSanitized ? 24 : 80, 256, 7);
  for (const auto& c : all_cases()) {
    SECTION(c.name) {
      TempDir dir;
      write_random_model(dir.str(), c.config, 11, c.dtype, c.shards);
      const auto model = Model::load(dir.str());
      Decoder dec(model, {16, 1});
      const RowMatrix got = all_logits(dec, tokens);
      const RowMatrixD want = recur::testing::reference_logits(dir.str(), tokens);
      const double err = recur::testing::relative_error(got.cast<double>(), want);
      INFO(c.name << ": relative error " << err);
      CHECK(err < 1e-5);
      // Not a vacuous comparison: the logits vary along the sequence and across the vocabulary.
      CHECK((want.row(0) - want.row(static_cast<Eigen::Index>(tokens.size()) - 1)).cwiseAbs().maxCoeff() > 1e-3);
      CHECK(want.row(0).maxCoeff() - want.row(0).minCoeff() > 1e-2);
    }
  }
}

TEST_CASE("a wrong weight is caught by the reference comparison", "[model]") {
  // Negative control for the test above: the same model with one weight changed by 1e-3 of a
  // typical value no longer matches.
  TempDir dir, other;
  const ModelConfig c = small_fla(ModelFeatureMap::kElu, true);
  write_random_model(dir.str(), c, 11);
  const auto model = Model::load(dir.str());
  // Rewrite with one layer's down projection nudged.
  auto store = TensorStore::open_dir(dir.str());
  std::vector<std::vector<float>> values;
  std::vector<TensorData> tensors;
  for (const auto& [name, info] : store.tensors()) values.push_back(store.read(name));
  std::size_t i = 0;
  for (const auto& [name, info] : store.tensors()) {
    if (name == "model.layers.1.mlp.down_proj.weight") values[i][5] *= 1.01f;
    tensors.push_back({name, info.shape, values[i].data()});
    ++i;
  }
  write_safetensors(other.file("model.safetensors"), tensors, DType::kF32);
  std::filesystem::copy_file(dir.file("config.json"), other.file("config.json"));
  const auto tokens = random_tokens(40, 256, 3);
  Decoder dec(model, {16, 1});
  const RowMatrix got = all_logits(dec, tokens);
  CHECK(recur::testing::relative_error(got.cast<double>(), recur::testing::reference_logits(dir.str(), tokens)) < 1e-5);
  CHECK(recur::testing::relative_error(got.cast<double>(), recur::testing::reference_logits(other.str(), tokens)) > 1e-5);
}

TEST_CASE("prefill in any chunking, split and thread count gives step()'s logits bit for bit",
          "[model][exact]") {
  // Every family's fixtures get this in test_conformance (float, bf16, q8, q4); here, what they
  // do not hold: the library's default feature map, and Based quantized from bf16 weights with
  // a head of another format.
  std::vector<Case> cases;
  cases.push_back({"elementwise_product, unnormalized", small_fla(ModelFeatureMap::kElementwiseProduct, false)});
  {
    Case c{"based, q4 weights with the head q8, from bf16", small_based()};
    c.dtype = DType::kBF16;
    c.quant = "q4";
    c.quant_head = "q8";
    cases.push_back(c);
  }
  // Past one fold of the attention state (256 tokens) so that prefill crosses it mid-chunk.
  const int T = kSanitized ? 70 : 300;
  for (const auto& c : cases) {
    SECTION(c.name) {
      const auto model = make_model(c, 5);
      if (!c.quant.empty()) REQUIRE(model->weight_format().rfind(c.quant, 0) == 0);
      const auto tokens = random_tokens(T, c.config.vocab_size, 9);
      const int V = c.config.vocab_size;
      const auto nV = static_cast<std::size_t>(V);

      // The reference bytes: step() on every token.
      Decoder ref(model, {1, 1});
      RowMatrix want(T, V);
      for (int t = 0; t < T; ++t) {
        const auto l = ref.step(tokens[static_cast<std::size_t>(t)]);
        std::memcpy(want.row(t).data(), l.data(), sizeof(float) * nV);
      }
      const auto next = ref.step(17);
      const Eigen::VectorXf want_next = next;

      int compared = 0;
      for (int chunk : {1, 7, 64, T}) {
        for (int threads : {1, 2, 3}) {
          Decoder dec(model, {chunk, threads});
          const RowMatrix got = all_logits(dec, tokens);
          for (int t = 0; t < T; ++t) {
            INFO("chunk " << chunk << ", threads " << threads << ", position " << t);
            REQUIRE(same_bytes(got.row(t).data(), want.row(t).data(), nV));
            ++compared;
          }
          const auto l = dec.step(17);
          REQUIRE(same_bytes(l.data(), want_next.data(), nV));
        }
      }
      // Splits into calls, mixed with steps, without a logits sink.
      const std::vector<std::vector<int>> splits = {{1, 5, 250}, {100, 100, 37}, {255, 2}, {3}};
      for (const auto& split : splits) {
        Decoder dec(model, {13, 2});
        std::size_t pos = 0;
        for (int part : split) {
          if (pos >= tokens.size()) break;
          const auto n = std::min<std::size_t>(static_cast<std::size_t>(part), tokens.size() - pos);
          const std::vector<int> piece(tokens.begin() + static_cast<std::ptrdiff_t>(pos),
                                       tokens.begin() + static_cast<std::ptrdiff_t>(pos + n));
          const auto l = dec.prefill(piece);
          pos += n;
          REQUIRE(same_bytes(l.data(), want.row(static_cast<Eigen::Index>(pos) - 1).data(), nV));
          if (pos < tokens.size()) {
            dec.step(tokens[pos]);
            ++pos;
            REQUIRE(same_bytes(dec.logits().data(), want.row(static_cast<Eigen::Index>(pos) - 1).data(), nV));
          }
          ++compared;
        }
        while (pos < tokens.size()) dec.step(tokens[pos++]);
        REQUIRE(same_bytes(dec.step(17).data(), want_next.data(), nV));
      }
      CHECK(compared > 8 * T);
    }
  }
}

TEST_CASE("greedy generation writes the same text whatever the chunk size", "[model][exact]") {
  const auto model = Model::builtin(3);
  const ByteTokenizer tok;
  const auto prompt = tok.encode("Linear attention is a recurrence: the state never grows. " 
                                 "Every chunking must agree.");
  std::vector<std::string> texts;
  for (int chunk : {1, 7, 64, 1000}) {
    Decoder dec(model, {chunk, 2});
    dec.prefill(prompt);
    Sampler greedy({0.0f, 0, 1.0f, 1.0f, 0, nullptr});
    std::vector<int> history = prompt, out;
    for (int i = 0; i < 40; ++i) {
      const int t = greedy.sample(dec.logits(), history);
      history.push_back(t);
      out.push_back(t);
      dec.step(t);
    }
    texts.push_back(tok.decode(out));
  }
  for (const auto& t : texts) CHECK(t == texts.front());
}

TEST_CASE("quantized models' logits stay near the float model's", "[model][quant]") {
  // Quantization changes the numbers, so this is a tolerance, not bytes: it catches a wrong
  // layout (nibble order, a row or block off, a scale misread), which gives noise.
  const ModelConfig c = small_fla(ModelFeatureMap::kElu, true);
  const auto f32 = Model::from_weights(c, RandomWeights(c, 6));
  const auto tokens = random_tokens(40, c.vocab_size, 7);
  Decoder ref(f32, {8, 1});
  const Eigen::VectorXf want = ref.prefill(tokens);
  const double scale = double(want.cwiseAbs().maxCoeff());
  for (const auto& [format, bound] : {std::pair<const char*, double>{"q8", kQ8LogitError},
                                      std::pair<const char*, double>{"q4", kQ4LogitError}}) {
    Decoder dec(quantized_model(c, 6, format), {8, 1});
    const Eigen::VectorXf got = dec.prefill(tokens);
    const double err = double((got - want).cwiseAbs().maxCoeff()) / scale;
    INFO(format << ": largest logit error " << err << " of the largest logit");
    CHECK(err < bound);
    CHECK(err > 0.0);  // the codes are in use, not float weights
  }
}

TEST_CASE("bad tokens and options are rejected with the call and the sizes", "[model]") {
  const auto model = Model::builtin(1);
  Decoder dec(model);
  CHECK_THROWS_WITH(dec.step(256), Catch::Contains("[Decoder::step]") && Catch::Contains("255"));
  CHECK_THROWS_WITH(dec.step(-1), Catch::Contains("token is -1"));
  CHECK_THROWS_WITH(dec.prefill({1, 2, 999}), Catch::Contains("tokens[2] is 999"));
  CHECK_THROWS_AS(dec.logits(), ArgumentError);
  CHECK(dec.n_tokens() == 0);
  CHECK_THROWS_AS(Decoder(model, {0, 1}), ArgumentError);
  CHECK_THROWS_AS(Decoder(model, {4, -1}), ArgumentError);
  CHECK_THROWS_AS(Decoder(nullptr), ArgumentError);
}

TEST_CASE("16-bit weights stay 16-bit in memory and give the logits of their float values",
          "[model]") {
  const ModelConfig c = small_fla(ModelFeatureMap::kElementwiseProduct, false);
  for (const DType dt : {DType::kBF16, DType::kF16}) {
    const auto narrow = Model::from_weights(c, RandomWeights(c, 4, dt));
    // The same values presented as float32.
    class AsFloat final : public WeightSource {
     public:
      explicit AsFloat(const RandomWeights& w) : w_(w) {}
      bool has(const std::string& n) const override { return w_.has(n); }
      std::vector<std::int64_t> shape(const std::string& n) const override { return w_.shape(n); }
      std::vector<float> read(const std::string& n) const override { return w_.read(n); }
      std::vector<std::string> names() const override { return w_.names(); }
      std::string describe() const override { return "as float"; }
     private:
      const RandomWeights& w_;
    };
    const RandomWeights source(c, 4, dt);
    const auto wide = Model::from_weights(c, AsFloat(source));
    CHECK(narrow->fingerprint() == wide->fingerprint());
    CHECK(double(narrow->weight_bytes_per_token()) < 0.6 * double(wide->weight_bytes_per_token()));
    Decoder a(narrow, {7, 2}), b(wide, {64, 1});
    const auto tokens = random_tokens(50, c.vocab_size, 5);
    const Eigen::VectorXf la = a.prefill(tokens);
    const Eigen::VectorXf lb = b.prefill(tokens);
    CHECK(same_bytes(la.data(), lb.data(), static_cast<std::size_t>(la.size())));
    CHECK(same_bytes(a.step(3).data(), b.step(3).data(), static_cast<std::size_t>(la.size())));
  }
}

// [long]: 100,000 tokens; the instruction-set reruns (each_isa.sh) leave it out.
TEST_CASE("a Based decoder's state has one size from 100 to 100,000 tokens", "[model][based][long]") {
  const ModelConfig c = small_based();
  const auto model = Model::from_weights(c, RandomWeights(c, 8));
  Decoder dec(model, {1024, 2});
  dec.prefill(random_tokens(100, c.vocab_size, 1));
  const auto bytes = dec.bytes();
  const auto state = dec.state_bytes();
  std::size_t by_kind = 0;
  for (const MixerKind k : {MixerKind::kShortConv, MixerKind::kLinearAttention, MixerKind::kWindowAttention}) {
    CHECK(dec.state_bytes(k) > 0);
    by_kind += dec.state_bytes(k);
  }
  CHECK(by_kind == state);
  const int more = kSanitized ? 10000 : 99900;
  dec.prefill(random_tokens(more, c.vocab_size, 2));
  for (int i = 0; i < 10; ++i) dec.step(i);
  CHECK(dec.n_tokens() == 100 + more + 10);
  CHECK(dec.bytes() == bytes);
  CHECK(dec.state_bytes() == state);
  CHECK(dec.logits().allFinite());
}

TEST_CASE("a gated model's state has one size from 100 to 100,000 tokens", "[model][fla][long]") {
  for (const ModelConfig& c : {recur::testing::small_gla(), recur::testing::small_retnet(),
                               recur::testing::small_hgrn2(), recur::testing::small_gla_window()}) {
    const auto model = Model::from_weights(c, RandomWeights(c, 8));
    Decoder dec(model, {1024, 2});
    dec.prefill(random_tokens(100, c.vocab_size, 1));
    const auto bytes = dec.bytes();
    const auto state = dec.state_bytes();
    CHECK(dec.state_bytes(MixerKind::kDecayedRecurrence) > 0);
    const int more = kSanitized ? 10000 : 99900;
    dec.prefill(random_tokens(more, c.vocab_size, 2));
    for (int i = 0; i < 10; ++i) dec.step(i);
    CHECK(dec.n_tokens() == 100 + more + 10);
    CHECK(dec.bytes() == bytes);
    CHECK(dec.state_bytes() == state);
    CHECK(dec.logits().allFinite());
  }
}

TEST_CASE("a hybrid's state grows by exactly its full-attention layers' keys and values",
          "[model][fla]") {
  const ModelConfig c = recur::testing::small_gla_full();
  const auto model = Model::from_weights(c, RandomWeights(c, 8));
  Decoder dec(model, {64, 2});
  dec.prefill(random_tokens(100, c.vocab_size, 1));
  const auto gated = dec.state_bytes(MixerKind::kDecayedRecurrence);
  const auto attn = dec.state_bytes(MixerKind::kAttention);
  CHECK(gated + attn == dec.state_bytes());
  // One full layer, 2 kv heads of 8: a key and a value of 16 floats each per token.
  const std::size_t per_token = 2 * 2 * 8 * sizeof(float);
  CHECK(attn == 100 * per_token + sizeof(std::int64_t));
  dec.prefill(random_tokens(900, c.vocab_size, 2));
  dec.step(3);
  CHECK(dec.state_bytes(MixerKind::kDecayedRecurrence) == gated);
  CHECK(dec.state_bytes(MixerKind::kAttention) == 1001 * per_token + sizeof(std::int64_t));
  // The saved state says so too, and loads back into a decoder that has seen nothing.
  const std::string saved = dec.save_bytes();
  Decoder other(model);
  other.load_bytes(saved, "saved");
  CHECK(other.state_bytes() == dec.state_bytes());
  CHECK(same_bytes(other.step(5).data(), dec.step(5).data(), std::size_t(c.vocab_size)));
  // A state cut short, or one with a token count that does not match its cache, is refused.
  Decoder fresh(model);
  CHECK_THROWS_AS(fresh.load_bytes(saved.substr(0, saved.size() - 40), "cut"), FormatError);
  CHECK(fresh.n_tokens() == 0);
}

TEST_CASE("fla configs: unknown, unsupported and contradictory fields are refused by name",
          "[model][fla]") {
  const auto refused = [](const std::string& fields, const std::string& names) {
    INFO(fields);
    try {
      recur::testing::fla_gated(fields);
      FAIL("accepted");
    } catch (const FormatError& e) {
      CHECK_THAT(e.what(), Catch::Contains(names));
    }
  };
  refused("\"model_type\": \"gla\", \"num_heads\": 4, \"use_gv\": true", "use_gv");
  refused("\"model_type\": \"gla\", \"num_heads\": 4, \"gate_fn\": \"swish\"", "gate_fn");
  refused("\"model_type\": \"gla\", \"num_heads\": 4, \"clamp_min\": 1", "clamp_min");
  refused("\"model_type\": \"gla\", \"num_heads\": 3", "num_heads");
  refused("\"model_type\": \"gla\", \"num_heads\": 4, \"num_kv_heads\": 3", "num_kv_heads");
  refused("\"model_type\": \"gla\", \"num_heads\": 4, \"feature_map\": \"elu\"", "feature_map");
  refused("\"model_type\": \"gla\", \"num_heads\": 4, \"hidden_act\": \"powlu\"", "hidden_act");
  refused("\"model_type\": \"gla\", \"num_heads\": 4, \"attnres_block_size\": 2", "attnres_block_size");
  refused("\"model_type\": \"hgrn2\", \"expand_ratio\": 5", "expand_ratio");
  refused("\"model_type\": \"retnet\", \"num_heads\": 2, \"attn_mode\": \"bogus\"", "attn_mode");
  refused("\"model_type\": \"gla\", \"num_heads\": 4, \"attn\": {\"layers\": [3], \"num_heads\": 4}", "attn.layers");
  refused("\"model_type\": \"gla\", \"num_heads\": 4, \"attn\": {\"layers\": [1]}", "attn.num_heads");
  refused("\"model_type\": \"gla\", \"num_heads\": 4, \"attn\": {\"layers\": [1], \"num_heads\": 4, "
          "\"qk_norm\": true}", "attn.qk_norm");
  refused("\"model_type\": \"gla\", \"num_heads\": 4, \"attn\": [{\"layers\": [1], \"num_heads\": 4}, "
          "{\"layers\": [1], \"num_heads\": 2}]", "attn[1].layers");
  refused("\"model_type\": \"gla\", \"num_heads\": 4, \"attn\": {\"layers\": [1], \"num_heads\": 3}",
          "num_heads 3");
  // What fla ignores is accepted: RetNet's short convolutions, GLA's use_gk, old norm names.
  CHECK_NOTHROW(recur::testing::fla_gated("\"model_type\": \"retnet\", \"num_heads\": 2, "
                                          "\"use_short_conv\": true, \"rms_norm_eps\": 1e-6"));
  CHECK(!recur::models::gla::config_of(
              recur::testing::fla_gated("\"model_type\": \"retnet\", \"num_heads\": 2, "
                                        "\"use_short_conv\": true"))
              .use_short_conv);
}

TEST_CASE("the decoder's memory does not grow with the sequence", "[model]") {
  const auto model = Model::builtin(1);
  Decoder dec(model, {64, 1});
  dec.prefill(random_tokens(100, 256, 1));
  const auto bytes = dec.bytes();
  const auto state = dec.state_bytes();
  dec.prefill(random_tokens(kSanitized ? 300 : 3000, 256, 2));
  for (int i = 0; i < 100; ++i) dec.step(i);
  CHECK(dec.bytes() == bytes);
  CHECK(dec.state_bytes() == state);
}

namespace {
// Random weights with one tensor scaled up until the arithmetic overflows.
class OverflowingWeights final : public WeightSource {
 public:
  OverflowingWeights(const ModelConfig& c, std::string layer, std::string scaled = "")
      : base_(c, 1), layer_(std::move(layer)), scaled_(std::move(scaled)) {}
  bool has(const std::string& n) const override { return base_.has(n); }
  std::vector<std::int64_t> shape(const std::string& n) const override { return base_.shape(n); }
  std::vector<float> read(const std::string& n) const override {
    auto v = base_.read(n);
    if (n == layer_ + "mlp.gate_proj.weight" || n == layer_ + "mlp.up_proj.weight")
      for (auto& x : v) x *= 1e30f;  // gate * up reaches 1e60: infinite in float32
    if (n == scaled_)
      for (auto& x : v) x = x > 0 ? 3e38f : -3e38f;  // finite weights whose sums are not
    return v;
  }
  std::vector<std::string> names() const override { return base_.names(); }
  std::string describe() const override { return "overflowing weights"; }

 private:
  RandomWeights base_;
  std::string layer_, scaled_;
};
}  // namespace

TEST_CASE("an overflow inside the model stops the decoder until reset or load", "[model]") {
  const ModelConfig c = small_fla(ModelFeatureMap::kElu, true);
  const auto model = Model::from_weights(c, OverflowingWeights(c, "model.layers.0."));
  Decoder dec(model, {8, 1});
  // Layer 0's MLP overflows; layer 1's attention sees the Inf and refuses it, after layer 0's
  // state has already taken the token.
  CHECK_THROWS_AS(dec.step(1), NumericError);
  CHECK_THROWS_WITH(dec.step(1), Catch::Contains("earlier call failed") && Catch::Contains("reset()"));
  CHECK_THROWS_WITH(dec.prefill({1, 2}), Catch::Contains("earlier call failed"));
  CHECK_THROWS_AS(dec.logits(), ArgumentError);
  dec.reset();
  CHECK_THROWS_AS(dec.prefill({1, 2, 3}), NumericError);  // the weights are still bad
  // A sound model's decoder is unaffected by any of this.
  Decoder good(Model::from_weights(c, RandomWeights(c, 1)));
  CHECK_NOTHROW(good.step(1));
}

TEST_CASE("finite weights whose logits overflow raise NumericError, never NaN scores", "[model]") {
  const ModelConfig c = small_fla(ModelFeatureMap::kElu, true);
  const auto model = Model::from_weights(c, OverflowingWeights(c, "none.", "lm_head.weight"));
  Decoder dec(model, {8, 1});
  CHECK_THROWS_WITH(dec.step(1), Catch::Contains("logits") && Catch::Contains("non-finite"));
  dec.reset();
  CHECK_THROWS_AS(dec.prefill({1, 2, 3}, {}, [](std::int64_t, const float*) {}), NumericError);
}
