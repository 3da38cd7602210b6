// Sampling and the byte tokenizer.
#include <catch2/catch.hpp>

#include <cmath>
#include <map>
#include <memory>
#include <random>
#include <algorithm>
#include <vector>

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

namespace {
// The sampler's stream (splitmix64, 53 bits), for the reference below.
struct Uniform {
  std::uint64_t state;
  double next() {
    std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return static_cast<double>(z >> 11) * 0x1.0p-53;
  }
};

// top_k 0 with top_p < 1 written the plain way: the numerators in id order, then the whole
// vocabulary sorted (most likely first, the lower id on ties), the shortest prefix whose mass
// reaches top_p, the draw over it in that order.
int top_p_reference(const Eigen::VectorXf& l, float t, float top_p, Uniform& u) {
  const auto V = static_cast<std::size_t>(l.size());
  const double top = static_cast<double>(l.maxCoeff()) / static_cast<double>(t);
  std::vector<double> p(V);
  double sum = 0.0;
  for (std::size_t i = 0; i < V; ++i) sum += p[i] = std::exp(static_cast<double>(l[Eigen::Index(i)]) / static_cast<double>(t) - top);
  std::vector<int> order(V);
  for (std::size_t i = 0; i < V; ++i) order[i] = int(i);
  std::sort(order.begin(), order.end(), [&](int a, int b) { return l[a] != l[b] ? l[a] > l[b] : a < b; });
  std::size_t n = V;
  double mass = 0.0;
  for (std::size_t i = 0; i < V; ++i) {
    mass += p[std::size_t(order[i])] / sum;
    if (mass >= static_cast<double>(top_p)) {
      n = i + 1;
      break;
    }
  }
  double total = 0.0;
  for (std::size_t i = 0; i < n; ++i) total += p[std::size_t(order[i])];
  double r = u.next() * total;
  for (std::size_t i = 0; i < n; ++i) {
    r -= p[std::size_t(order[i])];
    if (r < 0.0) return order[i];
  }
  return order[n - 1];
}
}  // namespace

TEST_CASE("top-p without top-k sorts only as far as its mass needs, and draws what a full sort draws", "[sampling]") {
  // 20,000 ids with many ties and a flat tail: a top-p of 0.9 needs thousands of them, so the
  // sampler's blocks (256, then four times larger) are each crossed; 0.2 stays in the first.
  std::mt19937_64 rng(5);
  std::uniform_int_distribution<int> level(0, 400);
  Eigen::VectorXf l(20000);
  for (Eigen::Index i = 0; i < l.size(); ++i) l[i] = static_cast<float>(level(rng)) / 100.0f;
  for (const float top_p : {0.2f, 0.9f, 0.999f}) {
    for (const float t : {0.7f, 1.5f}) {
      Sampler s(opts(t, 0, top_p, 1.0f, 11));
      Uniform u{11};
      for (int k = 0; k < 50; ++k) {
        INFO("top_p " << top_p << ", temperature " << t << ", draw " << k);
        REQUIRE(s.sample(l, {}) == top_p_reference(l, t, top_p, u));
      }
    }
  }
}

namespace {
// Ids 0-3 allowed, 4 and 5 (the best logits) masked; `size` ids in the mask.
std::shared_ptr<const TokenMask> first_four(std::size_t size = 6) {
  std::vector<char> allowed(size, 0);
  for (std::size_t i = 0; i < 4 && i < size; ++i) allowed[i] = 1;
  return std::make_shared<const TokenMask>(allowed);
}
}  // namespace

TEST_CASE("masked ids are never chosen, greedy or sampled, and the rest keep their softmax", "[sampling]") {
  // A head wider than its tokenizer: the best logits sit in the rows it cannot decode.
  Eigen::VectorXf l(6);
  l << 0.5f, 1.0f, 0.8f, 1.0f, 9.0f, 8.0f;
  SamplerOptions greedy = opts(0, 0, 1, 1, 0);
  CHECK(Sampler(greedy).sample(l, {}) == 4);  // the control: unmasked, the widest row wins
  greedy.mask = first_four();
  CHECK(Sampler(greedy).sample(l, {}) == 1);  // the best of ids 0-3, the lower on the tie
  greedy.mask = first_four(4);  // a mask shorter than the logits: the ids past it are masked
  CHECK(Sampler(greedy).sample(l, {}) == 1);
  Sampler later(opts(0, 0, 1, 1, 0));
  later.set_mask(first_four());
  CHECK(later.sample(l, {}) == 1);
  later.set_mask(nullptr);
  CHECK(later.sample(l, {}) == 4);
  // A gap inside the vocabulary (id 1 masked) is skipped as the rows past it are.
  greedy.mask = std::make_shared<const TokenMask>(std::vector<char>{1, 0, 1, 1, 0, 0});
  CHECK(Sampler(greedy).sample(l, {}) == 3);
  // Sampled, with every filter: the softmax of ids 0-3 alone (weights e^0.5, e, e^0.8, e).
  const int n = 20000;
  for (const bool masked : {false, true}) {
    SamplerOptions o = opts(1.0f, 0, 1.0f, 1.0f, 11);
    if (masked) o.mask = first_four();
    Sampler s(o);
    std::map<int, int> count;
    for (int i = 0; i < n; ++i) ++count[s.sample(l, {})];
    if (!masked) {
      CHECK(count[4] > n / 2);  // the control: unmasked, the wide rows take most draws
    } else {
      CHECK(count.count(4) == 0);
      CHECK(count.count(5) == 0);
      const double z = std::exp(0.5) + 2 * std::exp(1.0) + std::exp(0.8);
      CHECK(std::abs(count[1] / double(n) - std::exp(1.0) / z) < 0.015);
      CHECK(std::abs(count[0] / double(n) - std::exp(0.5) / z) < 0.015);
    }
  }
  // Top-k and top-p count among the allowed ids; a temperature and the penalty change nothing.
  for (const SamplerOptions& base : {opts(1.0f, 2, 1.0f, 1.0f, 5), opts(0.7f, 0, 0.5f, 1.0f, 5),
                                     opts(3.0f, 3, 0.9f, 1.3f, 5), opts(1.0f, 100, 1.0f, 2.0f, 5)}) {
    SamplerOptions o = base;
    o.mask = first_four();
    Sampler t(o);
    for (int i = 0; i < 300; ++i) {
      const int id = t.sample(l, {4, 5, 1});
      CHECK(id < 4);
      if (base.top_k == 2 || base.top_p == 0.5f) CHECK((id == 1 || id == 3));
    }
  }
}

TEST_CASE("log_normalizer normalises over the allowed ids alone", "[sampling]") {
  const float l[6] = {0.5f, 1.0f, 0.8f, 1.0f, 9.0f, 8.0f};
  const auto mask = first_four();
  const double z = log_normalizer(l, 6, mask.get());
  double sum = 0;
  for (int i = 0; i < 4; ++i) sum += std::exp(double(l[i]) - z);
  CHECK(std::abs(sum - 1.0) < 1e-15);
  CHECK(std::abs(log_normalizer(l, 6) - (double(l[4]) - log_probability(l, 6, 4))) < 1e-12);
}

TEST_CASE("bad sampler options and logits are rejected", "[sampling]") {
  CHECK_THROWS_AS(Sampler(opts(-1, 0, 1, 1, 0)), ArgumentError);
  CHECK_THROWS_AS(Sampler(opts(1, -1, 1, 1, 0)), ArgumentError);
  CHECK_THROWS_AS(Sampler(opts(1, 0, 0, 1, 0)), ArgumentError);
  CHECK_THROWS_AS(Sampler(opts(1, 0, 1.5f, 1, 0)), ArgumentError);
  CHECK_THROWS_AS(Sampler(opts(1, 0, 1, 0, 0)), ArgumentError);
  SamplerOptions negative_threads;
  negative_threads.threads = -1;
  CHECK_THROWS_WITH(Sampler(negative_threads), Catch::Contains("threads is -1"));
  // A mask that allows nothing, or nothing among the logits: refused, naming the sizes.
  CHECK_THROWS_WITH(TokenMask(std::vector<char>(3, 0)), Catch::Contains("[TokenMask]") && Catch::Contains("3 ids"));
  SamplerOptions past = opts(0, 0, 1, 1, 0);
  past.mask = std::make_shared<const TokenMask>(std::vector<char>{0, 0, 0, 1});
  Eigen::VectorXf three(3);
  three << 1.0f, 2.0f, 3.0f;
  CHECK_THROWS_WITH(Sampler(past).sample(three, {}),
                    Catch::Contains("Sampler::sample") && Catch::Contains("3 ids") && Catch::Contains("4 ids"));
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
