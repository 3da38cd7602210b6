// Batched decoding: every sequence's logits in a batch are the bytes of the same sequence
// decoded alone, whoever else is in the batch, at whatever position, in whatever order, on any
// number of threads, whether it decodes one token or prefills a chunk in the call; bad batches
// are refused before anything changes; one sequence's overflow fails that sequence alone. The
// same schedule runs over every family's fixtures in test_conformance.
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <random>

#include "recur/error.h"
#include "model/random_weights.h"
#include "models/linear/linear.h"
#include "recur/model.h"
#include "support/quant_model.h"

using namespace recur;
using recur::models::linear::ModelFeatureMap;

namespace {

ModelConfig small(ModelFeatureMap map, bool normalized, int kv_heads = 0) {
  ModelConfig c;
  c.vocab_size = 300;
  c.hidden_size = 64;
  c.num_hidden_layers = 2;
  c.num_heads = 4;
  c.num_kv_heads = kv_heads;
  auto& l = models::linear::edit(c);
  l.feature_map = map;
  l.norm_feature_map = normalized;
  c.intermediate_size = 96;
  return c;
}

bool same_logits(const Decoder& a, const Decoder& b) {
  const auto la = a.logits(), lb = b.logits();
  return la.size() == lb.size() &&
         std::memcmp(la.data(), lb.data(), sizeof(float) * std::size_t(la.size())) == 0;
}

// A sequence in the schedule below: the decoder in the batch, its twin decoded alone, and its
// tokens.
struct Sequence {
  Decoder batched, alone;
  std::vector<int> tokens;
  std::size_t next = 0;
};

// Sequences of different prompt lengths join and leave at random steps, in random order, some
// taking a chunk of several tokens (prefill) and some one; after every call each one's logits
// must equal its twin's after Decoder::prefill or Decoder::step of the same tokens.
void check_schedule(const std::shared_ptr<const Model>& model, int threads, std::uint32_t seed) {
  std::mt19937 rng(seed);
  const int V = model->config().vocab_size;
  std::uniform_int_distribution<int> token(0, V - 1);
  std::vector<Sequence> seqs;
  for (int i = 0; i < 9; ++i) {
    Sequence s{Decoder(model, {8, threads}), Decoder(model, {8, 1}), {}};
    // Prompts of 0 to 40 tokens, prefilled in chunks by the batched one and token by token by
    // the twin.
    std::vector<int> prompt(std::size_t(i * 5));
    for (auto& t : prompt) t = token(rng);
    if (!prompt.empty()) {
      s.batched.prefill(prompt);
      for (const int t : prompt) s.alone.step(t);
    }
    for (int t = 0; t < 30; ++t) s.tokens.push_back(token(rng));
    seqs.push_back(std::move(s));
  }
  BatchDecoder batch(model, threads);
  std::bernoulli_distribution joins(0.6), chunk(0.3);
  std::uniform_int_distribution<int> chunk_size(2, 7);
  int steps = 0, largest = 0;
  for (;;) {
    std::vector<Sequence*> active;
    for (auto& s : seqs)
      if (s.next < s.tokens.size() && joins(rng)) active.push_back(&s);
    if (active.empty()) {
      if (std::none_of(seqs.begin(), seqs.end(), [](const Sequence& s) { return s.next < s.tokens.size(); }))
        break;
      continue;
    }
    std::shuffle(active.begin(), active.end(), rng);
    std::vector<BatchDecoder::Item> items;
    for (auto* s : active) {
      const int left = int(s->tokens.size() - s->next);
      const int count = std::min(left, chunk(rng) ? chunk_size(rng) : 1);
      items.push_back({&s->batched, s->tokens.data() + s->next, count});
    }
    REQUIRE(batch.run(items) == 0);
    for (std::size_t k = 0; k < active.size(); ++k) {
      Sequence* s = active[k];
      const int count = items[k].count;
      if (count == 1) s->alone.step(s->tokens[s->next]);
      else s->alone.prefill(std::vector<int>(s->tokens.begin() + std::ptrdiff_t(s->next),
                                             s->tokens.begin() + std::ptrdiff_t(s->next) + count));
      s->next += std::size_t(count);
      INFO("step " << steps << ", batch of " << active.size() << ", sequence at "
                   << s->alone.n_tokens() << " tokens, threads " << threads);
      REQUIRE(s->batched.n_tokens() == s->alone.n_tokens());
      REQUIRE(same_logits(s->batched, s->alone));
    }
    largest = std::max<int>(largest, int(active.size()));
    ++steps;
  }
  CHECK(largest >= 5);  // the schedule did batch several sequences together
  // And the states themselves: each batched sequence saves the bytes of its twin.
  for (auto& s : seqs) CHECK(s.batched.save_bytes() == s.alone.save_bytes());
}

}  // namespace

// Every family's fixtures get this schedule in test_conformance (float, bf16, q8 and q4 weights);
// here, the built-in test model (a byte vocabulary, its own widths).
TEST_CASE("each sequence of a batch gets the bytes it gets alone", "[batch][exact]") {
  for (const int threads : {1, 2}) check_schedule(Model::builtin(1), threads, 5u + std::uint32_t(threads));
}

namespace {

void check_64(const std::shared_ptr<const Model>& model) {
  std::vector<Decoder> batched, alone;
  for (int i = 0; i < 64; ++i) {
    batched.emplace_back(model, DecoderOptions{16, 2});
    alone.emplace_back(model, DecoderOptions{16, 1});
    std::vector<int> prompt(std::size_t(1 + i % 13), (i * 37) % 256);
    batched.back().prefill(prompt);
    alone.back().prefill(prompt);
  }
  std::vector<Decoder*> ptrs;
  for (auto& d : batched) ptrs.push_back(&d);
  BatchDecoder batch(model, 2);
  for (int step = 0; step < 3; ++step) {
    std::vector<int> tokens;
    for (int i = 0; i < 64; ++i) tokens.push_back((i * 11 + step * 5) % 256);
    batch.step(ptrs, tokens);
    for (int i = 0; i < 64; ++i) {
      alone[std::size_t(i)].step(tokens[std::size_t(i)]);
      INFO("sequence " << i << ", step " << step << ", weights " << model->weight_format());
      REQUIRE(same_logits(batched[std::size_t(i)], alone[std::size_t(i)]));
    }
  }
}

}  // namespace

TEST_CASE("a batch of 64 at different positions matches 64 decoders alone", "[batch][exact]") {
  check_64(Model::builtin(2));
  const ModelConfig c = Model::builtin_config();
  check_64(recur::testing::quantized_model(c, 2, "q8"));
  check_64(recur::testing::quantized_model(c, 2, "q4"));
}

TEST_CASE("a bad batch is refused with the call and the index, and changes nothing", "[batch]") {
  const ModelConfig c = small(ModelFeatureMap::kElu, true);
  const auto model = Model::from_weights(c, RandomWeights(c, 1));
  const auto other = Model::from_weights(c, RandomWeights(c, 2));
  Decoder a(model), b(model), stranger(other);
  a.prefill({1, 2, 3});
  const std::string a_before = a.save_bytes(), b_before = b.save_bytes();
  BatchDecoder batch(model, 1);
  const auto refused = [&](const std::vector<Decoder*>& ds, const std::vector<int>& ts,
                           const std::string& says) {
    INFO(says);
    CHECK_THROWS_AS(batch.step(ds, ts), ArgumentError);
    CHECK_THROWS_WITH(batch.step(ds, ts), Catch::Contains("BatchDecoder::") && Catch::Contains(says));
    CHECK(a.save_bytes() == a_before);
    CHECK(b.save_bytes() == b_before);
  };
  refused({&a, &b}, {1}, "2 decoders and 1 tokens");
  refused({&a, nullptr}, {1, 2}, "items[1].decoder is null");
  refused({&a, &b, &a}, {1, 2, 3}, "items[0] and items[2] have the same decoder");
  refused({&a, &stranger}, {1, 2}, "items[1].decoder runs another model");
  refused({&a, &b}, {1, 300}, "items[1].tokens[0] is 300, expected 0 to vocab_size - 1 = 299");
  refused({&a, &b}, {-1, 2}, "items[0].tokens[0] is -1");
  CHECK(batch.step({}, {}) == 0);
  // run(): a chunk with a bad token anywhere, or no tokens, changes nothing either.
  const int good[3] = {1, 2, 3}, bad[3] = {1, 2, 999};
  CHECK_THROWS_WITH(batch.run({{&a, good, 3}, {&b, bad, 3}}), Catch::Contains("items[1].tokens[2] is 999"));
  CHECK_THROWS_WITH(batch.run({{&a, good, 0}}), Catch::Contains("items[0] has 0 tokens"));
  CHECK(a.save_bytes() == a_before);
  CHECK(b.save_bytes() == b_before);
  CHECK_THROWS_WITH(BatchDecoder(model, -1), Catch::Contains("threads is -1"));
}

namespace {
// Random weights, except that one token's embedding is huge: that token overflows inside the
// model, every other token is fine.
class OneBadToken final : public WeightSource {
 public:
  OneBadToken(const ModelConfig& c, int bad) : base_(c, 1), bad_(bad), d_(c.hidden_size) {}
  bool has(const std::string& n) const override { return base_.has(n); }
  std::vector<std::int64_t> shape(const std::string& n) const override { return base_.shape(n); }
  std::vector<std::string> names() const override { return base_.names(); }
  std::string describe() const override { return "one bad token"; }
  std::vector<float> read(const std::string& n) const override {
    auto v = base_.read(n);
    if (n == "model.embeddings.weight")
      for (int i = 0; i < d_; ++i) v[std::size_t(bad_) * std::size_t(d_) + std::size_t(i)] = 3e38f;
    return v;
  }

 private:
  RandomWeights base_;
  int bad_, d_;
};
}  // namespace

TEST_CASE("an overflow fails its own sequence and no other", "[batch]") {
  // The paper's post-norm model feeds the embedding to the projections unnormalized.
  ModelConfig c = small(ModelFeatureMap::kElu, true);
  c.architecture = Architecture::kTransformersAreRnns;
  models::linear::edit(c).hidden_act = "relu";
  const auto model = Model::from_weights(c, OneBadToken(c, 5));
  Decoder alone(model, {8, 1});
  CHECK_THROWS_AS(alone.step(5), NumericError);  // the token does overflow alone
  std::vector<Decoder> ds;
  for (int i = 0; i < 3; ++i) ds.emplace_back(model, DecoderOptions{8, 2});
  BatchDecoder batch(model, 2);
  CHECK(batch.step({&ds[0], &ds[1], &ds[2]}, {1, 5, 2}) == 1);
  CHECK(ds[0].failure().empty());
  CHECK(ds[2].failure().empty());
  CHECK_THAT(ds[1].failure(), Catch::Contains("non-finite"));
  CHECK_THROWS_WITH(batch.step({&ds[1]}, {1}), Catch::Contains("items[0].decoder failed in an earlier call"));
  // The healthy ones are where they would be alone.
  Decoder one(model, {8, 1}), two(model, {8, 1});
  one.step(1);
  two.step(2);
  CHECK(same_logits(ds[0], one));
  CHECK(same_logits(ds[2], two));
  ds[1].reset();
  CHECK(ds[1].failure().empty());
  CHECK(batch.step({&ds[1], &ds[0]}, {3, 4}) == 0);
}
