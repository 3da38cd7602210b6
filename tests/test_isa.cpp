// The same bytes on every instruction set: each computation runs under every instruction set
// this machine supports (recur::available_isas(), which always includes the emulated "scalar"),
// and its outputs, states and logits are compared byte for byte with the scalar target's.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iomanip>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/dispatch.h"
#include "kernels/matmul.h"
#include "recur/error.h"
#include "recur/feature_map.h"
#include "recur/isa.h"
#include "recur/linear_attention.h"
#include "model/random_weights.h"
#include "models/linear/linear.h"
#include "recur/model.h"
#include "recur/softmax_attention.h"
#include "support/each_isa.h"

namespace {

using recur::RowMatrix;

using recur::test::for_each_isa;
using recur::test::require_same_bytes;
using recur::test::under_each;

template <class T>
void append(std::string& out, const T* data, std::size_t n) {
  recur::test::append_bytes(out, data, n);
}

RowMatrix random_matrix(Eigen::Index rows, Eigen::Index cols, std::uint32_t seed, float sd = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, sd);
  RowMatrix m(rows, cols);
  for (Eigen::Index i = 0; i < m.size(); ++i) m.data()[i] = normal(rng);
  return m;
}

}  // namespace

TEST_CASE("the build has the scalar target, and this CPU runs it", "[isa]") {
  const auto compiled = recur::compiled_isas();
  const auto available = recur::available_isas();
  REQUIRE(std::find(available.begin(), available.end(), "scalar") != available.end());
  for (const auto& a : available)
    CHECK(std::find(compiled.begin(), compiled.end(), a) != compiled.end());
  // The one in use is the best available unless RECUR_ISA chose another.
  const char* env = std::getenv("RECUR_ISA");
  CHECK(recur::isa() == (env != nullptr && *env ? std::string(env) : available.front()));
}

TEST_CASE("an unknown instruction set is refused, naming the ones there are", "[isa][errors]") {
  const std::string before = recur::isa();
  try {
    recur::set_isa("avx1024");
    FAIL("set_isa accepted an unknown name");
  } catch (const recur::ArgumentError& e) {
    const std::string what = e.what();
    CHECK(what.find("[set_isa]") != std::string::npos);
    CHECK(what.find("avx1024") != std::string::npos);
    CHECK(what.find("scalar") != std::string::npos);
  }
  CHECK(recur::isa() == before);
}

TEST_CASE("every instruction set gives the same bytes: linear attention, step and prefill",
          "[isa][exactness][linear]") {
  struct Shape {
    const char* name;
    recur::LinearAttentionConfig c;
  };
  std::vector<Shape> shapes;
  {
    recur::LinearAttentionConfig c;
    c.n_heads = 3, c.d_key = 24, c.d_value = 40;  // padded rows and columns
    shapes.push_back({"elu, normalized, padded", c});
    c.n_heads = 2, c.d_key = 64, c.d_value = 64, c.feature_map = recur::FeatureMapKind::kRelu;
    shapes.push_back({"relu, normalized, 64", c});
    c.n_heads = 2, c.d_key = 16, c.d_value = 80, c.normalized = false;
    c.feature_map = recur::FeatureMapKind::kIdentity;
    shapes.push_back({"identity, unnormalized, 80 columns", c});
  }
  const Eigen::Index T = 600;  // past two folds (every 256 tokens)
  for (const auto& shape : shapes) {
    SECTION(shape.name) {
      const recur::LinearAttention layer(shape.c);
      const auto Q = random_matrix(T, shape.c.n_heads * shape.c.d_key, 1);
      const auto K = random_matrix(T, shape.c.n_heads * shape.c.d_key, 2);
      const auto V = random_matrix(T, shape.c.n_heads * shape.c.d_value, 3);
      const auto run = [&] {
        std::string bytes;
        // Step, token by token.
        auto s = layer.make_state();
        Eigen::VectorXf o(shape.c.n_heads * shape.c.d_value);
        for (Eigen::Index t = 0; t < T; ++t) {
          layer.step(s, Q.row(t).transpose(), K.row(t).transpose(), V.row(t).transpose(), o);
          append(bytes, o.data(), std::size_t(o.size()));
        }
        const auto state = s.raw_bytes();
        append(bytes, state.data(), state.size());
        // Prefill, in chunks of 37 on two threads: the same bytes as step on this target too.
        auto p = layer.make_state();
        recur::PrefillOptions options;
        options.chunk = 37;
        options.threads = 2;
        const RowMatrix O = layer.prefill(p, Q, K, V, options);
        append(bytes, O.data(), std::size_t(O.size()));
        CHECK(p.raw_bytes() == state);
        return bytes;
      };
      require_same_bytes(under_each(run));
    }
  }
}

TEST_CASE("every instruction set gives the same bytes: the matrix kernel", "[isa][exactness][matmul]") {
  const int n_out = 70, k_in = 45;  // a padded last panel
  const RowMatrix W = random_matrix(n_out, k_in, 7, 0.2f);
  const RowMatrix X = random_matrix(64, k_in, 8);
  for (const auto dtype : {recur::DType::kF32, recur::DType::kBF16, recur::DType::kF16}) {
    const recur::kernels::PackedMatrix P(W.data(), n_out, k_in, dtype);
    require_same_bytes(under_each([&] {
      std::string bytes;
      for (const int rows : {1, 3, 7, 13, 64}) {
        std::vector<float> Y(std::size_t(rows) * n_out);
        P.multiply(X.data(), rows, k_in, Y.data(), n_out, 2);
        append(bytes, Y.data(), Y.size());
      }
      return bytes;
    }));
  }
}

TEST_CASE("every instruction set gives the same bytes: feature maps at the edges", "[isa][exactness]") {
  std::vector<float> x = {-0.0f, 0.0f, 1e-45f, -1e-45f, 1e-30f, -87.5f, -87.0f, -86.9f, -100.0f,
                          88.0f, 87.9f, 0.5f, -0.5f, 1.0f, -1.0f, 3.4e38f, -3.4e38f, 1e-7f};
  for (int i = 0; i < 200; ++i) x.push_back(-20.0f + 0.2f * float(i) + 1e-3f);
  for (const char* name : {"elu", "relu", "identity"}) {
    const auto phi = recur::make_feature_map(name);
    require_same_bytes(under_each([&] {
      std::vector<float> y(x.size());
      phi->apply(x.data(), 1, std::int64_t(x.size()), int(x.size()), y.data(), std::int64_t(x.size()));
      std::string bytes;
      append(bytes, y.data(), y.size());
      return bytes;
    }));
  }
}

// The exponential's rule (engine/kernels/ops-inl.h), one float at a time: the clamps, n =
// round(x log2 e) by adding 1.5 * 2^23, the two-part reduction, the degree-6 polynomial, and 2^n
// from n + 127 in the exponent field. A finite x gives these bytes on every target.
float exp_rule(float x) {
  if (x < -87.0f) x = -87.0f;
  if (x > 88.0f) x = 88.0f;
  const float magic = 12582912.0f;
  const float n = (x * 1.44269504088896341f + magic) - magic;  // built with -ffp-contract=off
  float r = std::fma(n, -0.693359375f, x);
  r = std::fma(n, 2.12194440e-4f, r);
  float p = 1.9875691500e-4f;
  p = std::fma(p, r, 1.3981999507e-3f);
  p = std::fma(p, r, 8.3334519073e-3f);
  p = std::fma(p, r, 4.1665795894e-2f);
  p = std::fma(p, r, 1.6666665459e-1f);
  p = std::fma(p, r, 5.0000001201e-1f);
  const float y = std::fma(p, r * r, r) + 1.0f;
  const auto bits = static_cast<std::uint32_t>(static_cast<int>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return y * scale;
}

// Every float whose bit pattern is a multiple of `stride` (and the pattern one below, so that
// both parities of the last bit are seen), through elu_plus_one and exp_minus (m = 0) of the
// active table, against the rule; NaN must stay NaN. Returns the number of floats compared.
std::int64_t check_exp_against_rule(std::uint32_t stride) {
  const auto& k = recur::kernels::active();
  constexpr std::size_t kBatch = 1 << 16;
  std::vector<float> x, elu(kBatch), e(kBatch);
  x.reserve(kBatch);
  std::int64_t compared = 0, wrong = 0;
  const auto flush = [&] {
    const auto n = static_cast<std::int64_t>(x.size());
    k.elu_plus_one(x.data(), elu.data(), n);
    k.exp_minus(x.data(), e.data(), n, 0.0f);
    for (std::int64_t i = 0; i < n; ++i) {
      const float v = x[std::size_t(i)];
      bool same;
      if (std::isnan(v)) {
        same = std::isnan(elu[std::size_t(i)]) && std::isnan(e[std::size_t(i)]);
      } else {
        const float want_e = exp_rule(v), want_elu = v > 0.0f ? v + 1.0f : want_e;
        same = std::memcmp(&want_e, &e[std::size_t(i)], sizeof(float)) == 0 &&
               std::memcmp(&want_elu, &elu[std::size_t(i)], sizeof(float)) == 0;
      }
      if (!same && wrong++ < 5)
        UNSCOPED_INFO(std::setprecision(9) << "x = " << v << " (bits " << std::hex << [&] {
          std::uint32_t b;
          std::memcpy(&b, &v, sizeof b);
          return b;
        }() << std::dec << "): elu+1 " << elu[std::size_t(i)] << ", exp " << e[std::size_t(i)]
                             << ", rule " << exp_rule(v));
    }
    compared += n;
    x.clear();
  };
  for (std::uint64_t b = 0; b <= 0xffffffffull; b += stride) {
    for (std::uint64_t c : {b, b == 0 ? std::uint64_t{0xffffffffu} : b - 1}) {
      float v;
      const auto u = static_cast<std::uint32_t>(c);
      std::memcpy(&v, &u, sizeof v);
      x.push_back(v);
      if (stride == 1) break;
    }
    if (x.size() + 2 > kBatch) flush();
  }
  flush();
  CHECK(wrong == 0);
  return compared;
}

TEST_CASE("every instruction set computes exp and elu+1 by the rule, over a sweep of the floats",
          "[isa][exactness][exp]") {
  // 2 * 2^32 / 4099, about 2.1 million floats, on each target; "[.exp_all]" sees every float.
  for_each_isa([](const std::string& isa) {
    INFO("instruction set " << isa);
    CHECK(check_exp_against_rule(4099) > 2000000);
  });
}

TEST_CASE("exp and elu+1 follow the rule for every float, on every instruction set",
          "[.exp_all]") {
  for_each_isa([](const std::string& isa) {
    INFO("instruction set " << isa);
    CHECK(check_exp_against_rule(1) > 0);
  });
}

TEST_CASE("every instruction set finds a non-finite float anywhere in a block", "[isa][errors]") {
  const float bad[] = {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                       std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN()};
  const float good[] = {std::numeric_limits<float>::max(), -std::numeric_limits<float>::max(),
                        std::numeric_limits<float>::denorm_min(), -0.0f, 1.0f};
  for_each_isa([&](const std::string& isa) {
    const auto& k = recur::kernels::active();
    for (std::int64_t cols : {1, 15, 16, 17, 40, 100}) {
      const std::int64_t rows = 3, stride = cols + 5;
      std::vector<float> x(std::size_t(rows * stride));
      for (std::size_t i = 0; i < x.size(); ++i) x[i] = good[i % 5];
      // Past each row's cols, the stride's gap holds Inf: it must not be read.
      for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t c = cols; c < stride; ++c) x[std::size_t(r * stride + c)] = bad[0];
      INFO(isa << ", cols " << cols);
      CHECK(k.all_finite(x.data(), rows, cols, stride));
      int missed = 0;
      for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t c = 0; c < cols; ++c)
          for (float b : bad) {
            const float keep = x[std::size_t(r * stride + c)];
            x[std::size_t(r * stride + c)] = b;
            if (k.all_finite(x.data(), rows, cols, stride)) ++missed;
            x[std::size_t(r * stride + c)] = keep;
          }
      CHECK(missed == 0);
    }
  });
}

TEST_CASE("every instruction set gives the same bytes: the softmax KV cache", "[isa][exactness]") {
  recur::SoftmaxAttentionConfig c;
  c.n_heads = 2;
  c.d_head = 40;
  const recur::SoftmaxAttention attn(c);
  const Eigen::Index T = 150;
  const auto Q = random_matrix(T, 80, 4), K = random_matrix(T, 80, 5), V = random_matrix(T, 80, 6);
  require_same_bytes(under_each([&] {
    auto cache = attn.make_cache();
    Eigen::VectorXf o(80);
    std::string bytes;
    for (Eigen::Index t = 0; t < T; ++t) {
      attn.step(cache, Q.row(t).transpose(), K.row(t).transpose(), V.row(t).transpose(), o);
      append(bytes, o.data(), std::size_t(o.size()));
    }
    return bytes;
  }));
}

TEST_CASE("every instruction set gives the same bytes: models, and states that move between them",
          "[isa][exactness][model]") {
  using recur::Architecture;
  using recur::models::linear::ModelFeatureMap;
  struct Case {
    const char* name;
    recur::ModelConfig c;
    recur::DType dtype;
  };
  std::vector<Case> cases;
  {
    recur::ModelConfig c;
    c.architecture = Architecture::kLinearAttn;
    c.vocab_size = 300;
    c.hidden_size = 64;
    c.num_hidden_layers = 2;
    c.num_heads = 4;
    recur::models::linear::edit(c).feature_map = ModelFeatureMap::kElu;
    recur::models::linear::edit(c).norm_feature_map = true;
    c.intermediate_size = 96;
    // Every family's float32 fixtures: test_conformance. Here, 16-bit weights widened on
    // every target.
    cases.push_back({"linear_attn, elu, bfloat16", c, recur::DType::kBF16});
    recur::models::linear::edit(c).feature_map = ModelFeatureMap::kHedgehog;
    cases.push_back({"linear_attn, hedgehog, float16", c, recur::DType::kF16});
  }
  std::vector<int> prompt;
  for (int i = 0; i < 300; ++i) prompt.push_back((i * 37 + 11) % 250);
  for (const auto& tc : cases) {
    SECTION(tc.name) {
      const auto model = recur::Model::from_weights(tc.c, recur::RandomWeights(tc.c, 9, tc.dtype));
      recur::DecoderOptions options;
      options.chunk = 48;
      options.threads = 2;
      const auto run = [&] {
        recur::Decoder d(model, options);
        std::string bytes;
        const auto last = d.prefill(prompt);
        append(bytes, last.data(), std::size_t(last.size()));
        for (int t = 0; t < 12; ++t) {
          const auto l = d.step((t * 13) % 250);
          append(bytes, l.data(), std::size_t(l.size()));
        }
        bytes += d.save_bytes();
        return bytes;
      };
      require_same_bytes(under_each(run));

      // A state saved under each instruction set continues under scalar with the same bytes,
      // and a state saved under scalar continues under each.
      const std::string before = recur::isa();
      for (const std::string& isa : recur::available_isas()) {
        INFO("saved under " << isa);
        recur::set_isa(isa);
        recur::Decoder a(model, options);
        a.prefill(prompt);
        const std::string saved = a.save_bytes();
        const auto want = a.step(5);
        const std::vector<float> expected(want.data(), want.data() + want.size());
        recur::set_isa("scalar");
        recur::Decoder b(model, options);
        b.load_bytes(saved, "test");
        const auto got = b.step(5);
        CHECK(std::memcmp(got.data(), expected.data(), expected.size() * sizeof(float)) == 0);
        recur::set_isa(isa);
        recur::Decoder c2(model, options);
        c2.load_bytes(b.save_bytes(), "test");
        const auto next = c2.step(6);
        recur::set_isa("scalar");
        const auto next_scalar = b.step(6);
        CHECK(std::memcmp(next.data(), next_scalar.data(), expected.size() * sizeof(float)) == 0);
      }
      recur::set_isa(before);
    }
  }
}

TEST_CASE("a body that throws under one instruction set leaves the one before in force",
          "[isa]") {
  const auto available = recur::available_isas();
  if (available.size() < 2) return;  // one set: nothing can be left behind
  // Start from the last set, so that a helper that stops midway leaves another in force.
  recur::set_isa(available.back());
  const std::string before = recur::isa();
  struct Stop {};
  try {
    for_each_isa([&](const std::string& isa) {
      if (isa == available.front()) throw Stop{};
    });
  } catch (const Stop&) {
  }
  CHECK(recur::isa() == before);
}
