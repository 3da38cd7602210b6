// Sampling and the byte tokenizer.
#include <catch2/catch.hpp>

#include <cmath>
#include <map>

#include "recur/error.h"
#include "recur/sampling.h"

using namespace recur;

namespace {
SamplerOptions opts(float t, int k, float p, float rep, std::uint64_t seed) {
  SamplerOptions o;
  o.temperature = t;
  o.top_k = k;
  o.top_p = p;
  o.repetition_penalty = rep;
  o.seed = seed;
  return o;
}
}  // namespace

TEST_CASE("greedy takes the largest logit, the lowest id on ties", "[sampling]") {
  Sampler s(opts(0, 0, 1, 1, 0));
  Eigen::VectorXf l(5);
  l << 0.1f, 2.0f, -1.0f, 2.0f, 1.9f;
  CHECK(s.sample(l, {}) == 1);
  // top_k = 1 at any temperature is greedy too.
  Sampler k1(opts(5.0f, 1, 1, 1, 9));
  for (int i = 0; i < 20; ++i) CHECK(k1.sample(l, {}) == 1);
}

TEST_CASE("the repetition penalty divides positive and multiplies negative logits", "[sampling]") {
  Eigen::VectorXf l(3);
  l << 2.0f, 1.5f, -1.0f;
  Sampler greedy(opts(0, 0, 1, 1.5f, 0));
  CHECK(greedy.sample(l, {}) == 0);
  CHECK(greedy.sample(l, {0}) == 1);     // 2 / 1.5 < 1.5
  CHECK(greedy.sample(l, {0, 0, 0}) == 1);  // applied once per distinct token
  Eigen::VectorXf neg(2);
  neg << -1.0f, -1.2f;
  CHECK(greedy.sample(neg, {0}) == 1);   // -1 * 1.5 < -1.2
}

TEST_CASE("temperature sampling follows the softmax, top-k and top-p cut the tail", "[sampling]") {
  Eigen::VectorXf l(4);
  l << std::log(0.5f), std::log(0.3f), std::log(0.15f), std::log(0.05f);
  const int n = 40000;
  const auto frequencies = [&](const SamplerOptions& o) {
    Sampler s(o);
    std::map<int, int> count;
    for (int i = 0; i < n; ++i) ++count[s.sample(l, {})];
    return count;
  };
  auto f = frequencies(opts(1.0f, 0, 1.0f, 1.0f, 42));
  CHECK(std::abs(f[0] / double(n) - 0.5) < 0.01);
  CHECK(std::abs(f[1] / double(n) - 0.3) < 0.01);
  CHECK(std::abs(f[3] / double(n) - 0.05) < 0.005);
  f = frequencies(opts(1.0f, 2, 1.0f, 1.0f, 42));  // top-2: 0.5 / 0.8 and 0.3 / 0.8
  CHECK(f.count(2) == 0);
  CHECK(f.count(3) == 0);
  CHECK(std::abs(f[0] / double(n) - 0.625) < 0.01);
  f = frequencies(opts(1.0f, 0, 0.75f, 1.0f, 42));  // top-p 0.75: {0, 1} reach 0.8
  CHECK(f.count(2) == 0);
  CHECK(std::abs(f[1] / double(n) - 0.375) < 0.01);
  f = frequencies(opts(0.25f, 0, 1.0f, 1.0f, 42));  // a low temperature sharpens
  CHECK(f[0] / double(n) > 0.85);
}

TEST_CASE("the same seed gives the same tokens, another seed others", "[sampling]") {
  Eigen::VectorXf l = Eigen::VectorXf::LinSpaced(50, -1.0f, 1.0f);
  const auto draw = [&](std::uint64_t seed) {
    Sampler s(opts(1.0f, 0, 1.0f, 1.0f, seed));
    std::vector<int> out;
    for (int i = 0; i < 30; ++i) out.push_back(s.sample(l, {}));
    return out;
  };
  CHECK(draw(7) == draw(7));
  CHECK(draw(7) != draw(8));
}

TEST_CASE("ids at or past the vocabulary limit are never chosen, greedy or sampled", "[sampling]") {
  // A head wider than its tokenizer: the best logits sit in the rows past the limit.
  Eigen::VectorXf l(6);
  l << 0.5f, 1.0f, 0.8f, 1.0f, 9.0f, 8.0f;
  SamplerOptions greedy = opts(0, 0, 1, 1, 0);
  CHECK(Sampler(greedy).sample(l, {}) == 4);  // without the limit, the widest row wins
  greedy.vocab_limit = 4;
  CHECK(Sampler(greedy).sample(l, {}) == 1);  // the best of ids 0-3, the lower on the tie
  Sampler later(opts(0, 0, 1, 1, 0));
  later.set_vocab_limit(3);
  CHECK(later.sample(l, {}) == 1);
  later.set_vocab_limit(0);  // 0: no limit
  CHECK(later.sample(l, {}) == 4);
  greedy.vocab_limit = 100;  // a limit past the logits changes nothing
  CHECK(Sampler(greedy).sample(l, {}) == 4);
  // Sampled: the softmax of the ids below the limit alone (ids 0-3: weights e^0.5, e, e^0.8, e).
  const int n = 20000;
  for (const int limit : {0, 4}) {
    SamplerOptions o = opts(1.0f, 0, 1.0f, 1.0f, 11);
    o.vocab_limit = limit;
    Sampler s(o);
    std::map<int, int> count;
    for (int i = 0; i < n; ++i) ++count[s.sample(l, {})];
    if (limit == 0) {
      CHECK(count[4] > n / 2);  // the control: unlimited, the wide rows take most draws
    } else {
      CHECK(count.count(4) == 0);
      CHECK(count.count(5) == 0);
      const double z = std::exp(0.5) + 2 * std::exp(1.0) + std::exp(0.8);
      CHECK(std::abs(count[1] / double(n) - std::exp(1.0) / z) < 0.015);
      CHECK(std::abs(count[0] / double(n) - std::exp(0.5) / z) < 0.015);
    }
  }
  // Top-k counts among the ids below the limit.
  SamplerOptions top2 = opts(1.0f, 2, 1.0f, 1.0f, 5);
  top2.vocab_limit = 4;
  Sampler t2(top2);
  for (int i = 0; i < 200; ++i) {
    const int id = t2.sample(l, {});
    CHECK((id == 1 || id == 3));
  }
}

TEST_CASE("bad sampler options and logits are rejected", "[sampling]") {
  CHECK_THROWS_AS(Sampler(opts(-1, 0, 1, 1, 0)), ArgumentError);
  CHECK_THROWS_AS(Sampler(opts(1, -1, 1, 1, 0)), ArgumentError);
  CHECK_THROWS_AS(Sampler(opts(1, 0, 0, 1, 0)), ArgumentError);
  CHECK_THROWS_AS(Sampler(opts(1, 0, 1.5f, 1, 0)), ArgumentError);
  CHECK_THROWS_AS(Sampler(opts(1, 0, 1, 0, 0)), ArgumentError);
  SamplerOptions negative_limit;
  negative_limit.vocab_limit = -1;
  CHECK_THROWS_AS(Sampler(negative_limit), ArgumentError);
  CHECK_THROWS_AS(Sampler().set_vocab_limit(-1), ArgumentError);
  Sampler s;
  Eigen::VectorXf l(2);
  l << 1.0f, NAN;
  CHECK_THROWS_AS(s.sample(l, {}), NumericError);
  CHECK_THROWS_AS(s.sample(Eigen::VectorXf(0), {}), ShapeError);
}

TEST_CASE("the byte tokenizer round-trips any bytes", "[sampling]") {
  const ByteTokenizer t;
  std::string all;
  for (int b = 0; b < 256; ++b) all += static_cast<char>(b);
  const auto ids = t.encode(all);
  REQUIRE(ids.size() == 256);
  for (int b = 0; b < 256; ++b) CHECK(ids[static_cast<std::size_t>(b)] == b);
  CHECK(t.decode(ids) == all);
  CHECK(t.decode(300).empty());
  CHECK(log_probability(Eigen::VectorXf::Zero(4).eval().data(), 4, 2) == Approx(std::log(0.25)));
}
