// The linear-attention layer: exactness of prefill against step (contract 2), agreement with
// the float64 quadratic form, clone and reset, and bad input (contract 4).
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "recur/error.h"
#include "recur/linear_attention.h"
#include "support/reference.h"

using recur::LinearAttention;
using recur::LinearAttentionConfig;
using recur::PrefillOptions;
using recur::RowMatrix;
using recur::testing::random_inputs;

namespace {

constexpr double kQuadraticTolerance = 1e-5;  // float32 against float64, relative to max |o|
constexpr Eigen::Index kTail = 50;           // steps after every prefill

// Under the sanitizers the longest sequences (4099 tokens) are left to the release run: they
// add nothing to memory checking that 1000 tokens (three folds) do not, and cost minutes.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif

const char* map_name(recur::FeatureMapKind k) {
  switch (k) {
    case recur::FeatureMapKind::kEluPlusOne: return "elu";
    case recur::FeatureMapKind::kRelu: return "relu";
    case recur::FeatureMapKind::kIdentity: return "identity";
    case recur::FeatureMapKind::kTaylor: return "taylor";
  }
  return "?";
}

std::string describe(const LinearAttentionConfig& c) {
  return fmt::format("map {}, {}, n_heads {}, d_feature {}, d_value {}", map_name(c.feature_map),
                     c.normalized ? "normalized" : "unnormalized", c.n_heads, c.d_key, c.d_value);
}

// Where two float matrices first differ in their bytes, or "" when they are identical.
std::string first_difference(const RowMatrix& a, const RowMatrix& b) {
  if (a.rows() != b.rows() || a.cols() != b.cols())
    return fmt::format("shapes ({}, {}) and ({}, {})", a.rows(), a.cols(), b.rows(), b.cols());
  for (Eigen::Index r = 0; r < a.rows(); ++r)
    for (Eigen::Index c = 0; c < a.cols(); ++c)
      if (std::memcmp(&a(r, c), &b(r, c), sizeof(float)) != 0)
        return fmt::format("row {}, column {}: {:.9g} vs {:.9g}", r, c, a(r, c), b(r, c));
  return "";
}

// Split [0, T) into `parts` uneven pieces (some may be empty for tiny T).
std::vector<Eigen::Index> split_points(Eigen::Index T, int parts) {
  static const std::vector<std::vector<double>> kFractions = {
      {}, {0.37}, {0.11, 0.35, 0.4, 0.83}};
  const auto& f = kFractions[parts == 1 ? 0 : parts == 2 ? 1 : 2];
  std::vector<Eigen::Index> cuts{0};
  for (double x : f) cuts.push_back(static_cast<Eigen::Index>(x * double(T)));
  cuts.push_back(T);
  return cuts;
}

std::vector<LinearAttentionConfig> configs_for(recur::FeatureMapKind map) {
  std::vector<LinearAttentionConfig> out;
  for (bool normalized : {true, false})
    for (int heads : {1, 8})
      for (auto dims : {std::pair{16, 16}, std::pair{64, 64}, std::pair{32, 48}}) {
        LinearAttentionConfig c;
        c.feature_map = map;
        c.normalized = normalized;
        c.n_heads = heads;
        c.d_key = dims.first;
        c.d_value = dims.second;
        out.push_back(c);
      }
  return out;
}

std::vector<LinearAttentionConfig> all_configs() {
  std::vector<LinearAttentionConfig> out;
  for (auto map : {recur::FeatureMapKind::kEluPlusOne, recur::FeatureMapKind::kRelu,
                   recur::FeatureMapKind::kIdentity}) {
    const auto c = configs_for(map);
    out.insert(out.end(), c.begin(), c.end());
  }
  return out;
}

// Every T, chunk size, split and thread count for every configuration of one feature map;
// returns the number of comparisons made. Each difference is reported as it is found.
int check_exactness(recur::FeatureMapKind map) {
  std::vector<Eigen::Index> Ts = {0, 1, 2, 63, 64, 65, 1000, 4099};
  if (kSanitized) Ts.pop_back();
  const Eigen::Index T_max = Ts.back();
  int compared = 0;
  for (const auto& config : configs_for(map)) {
    const LinearAttention layer(config);
    const auto in = random_inputs(layer, T_max + kTail, 1234u + std::uint32_t(config.d_value));
    const Eigen::Index width = Eigen::Index(config.n_heads) * config.d_value;

    // The reference: every token through step(), with the state captured after T + kTail.
    RowMatrix stepped(T_max + kTail, width);
    std::map<Eigen::Index, std::vector<unsigned char>> state_after;
    auto s = layer.make_state();
    for (Eigen::Index t = 0; t < T_max + kTail; ++t) {
      Eigen::VectorXf o(width);
      layer.step(s, in.Q.row(t).transpose(), in.K.row(t).transpose(), in.V.row(t).transpose(), o);
      stepped.row(t) = o.transpose();
      for (auto T : Ts)
        if (t + 1 == T + kTail) state_after[T] = s.raw_bytes();
    }

    for (auto T : Ts) {
      for (Eigen::Index chunk : {Eigen::Index(1), Eigen::Index(2), Eigen::Index(3),
                                 Eigen::Index(16), Eigen::Index(64), Eigen::Index(128), T,
                                 T + 7}) {
        if (chunk < 1) continue;
        for (int parts : {1, 2, 5}) {
          for (int threads : {1, 2}) {
            auto state = layer.make_state();
            RowMatrix out(T + kTail, width);
            const auto cuts = split_points(T, parts);
            for (std::size_t p = 0; p + 1 < cuts.size(); ++p) {
              const Eigen::Index a = cuts[p], n = cuts[p + 1] - cuts[p];
              PrefillOptions options;
              options.chunk = static_cast<int>(chunk);
              options.threads = threads;
              layer.prefill(state, in.Q.middleRows(a, n), in.K.middleRows(a, n),
                            in.V.middleRows(a, n), out.middleRows(a, n), options);
            }
            for (Eigen::Index t = T; t < T + kTail; ++t) {
              Eigen::VectorXf o(width);
              layer.step(state, in.Q.row(t).transpose(), in.K.row(t).transpose(),
                         in.V.row(t).transpose(), o);
              out.row(t) = o.transpose();
            }
            const std::string diff = first_difference(out, stepped.topRows(T + kTail));
            const bool same_state = state.raw_bytes() == state_after[T];
            ++compared;
            if (!diff.empty() || !same_state) {
              FAIL_CHECK(fmt::format("{}; T {}, chunk {}, {} calls, {} threads: outputs {}, "
                                     "state {}",
                                     describe(config), T, chunk, parts, threads,
                                     diff.empty() ? "identical" : "differ at " + diff,
                                     same_state ? "identical" : "differs"));
            }
          }
        }
      }
    }
  }
  return compared;
}

}  // namespace

TEST_CASE("prefill matches step() bit for bit in any chunking, split and thread count: elu",
          "[linear][exactness]") {
  CHECK(check_exactness(recur::FeatureMapKind::kEluPlusOne) > (kSanitized ? 1500 : 2000));
}
TEST_CASE("prefill matches step() bit for bit in any chunking, split and thread count: relu",
          "[linear][exactness]") {
  CHECK(check_exactness(recur::FeatureMapKind::kRelu) > (kSanitized ? 1500 : 2000));
}
TEST_CASE("prefill matches step() bit for bit in any chunking, split and thread count: identity",
          "[linear][exactness]") {
  CHECK(check_exactness(recur::FeatureMapKind::kIdentity) > (kSanitized ? 1500 : 2000));
}

TEST_CASE("a textbook chunked form is not bit-identical to the recurrence, so the comparison can "
          "fail", "[linear][exactness]") {
  // Negative control: the same mathematics with another reduction order (Eigen products over
  // chunks of 16) agrees to about 1e-6 but not in the bytes.
  LinearAttentionConfig c;
  c.n_heads = 1;
  const LinearAttention layer(c);
  const Eigen::Index T = 1000;
  const auto in = random_inputs(layer, T, 99u);
  auto s = layer.make_state();
  const RowMatrix exact = layer.prefill(s, in.Q, in.K, in.V);

  RowMatrix phiQ(T, 64), phiK(T, 64);
  layer.feature_map().apply(in.Q.data(), T, 64, 64, phiQ.data(), 64);
  layer.feature_map().apply(in.K.data(), T, 64, 64, phiK.data(), 64);
  Eigen::MatrixXf S = Eigen::MatrixXf::Zero(64, 64);
  Eigen::VectorXf Z = Eigen::VectorXf::Zero(64);
  RowMatrix chunked(T, 64);
  for (Eigen::Index a = 0; a < T; a += 16) {
    const Eigen::Index n = std::min<Eigen::Index>(16, T - a);
    const Eigen::MatrixXf q = phiQ.middleRows(a, n), k = phiK.middleRows(a, n);
    const Eigen::MatrixXf v = in.V.middleRows(a, n);
    Eigen::MatrixXf A = q * k.transpose();
    A.triangularView<Eigen::StrictlyUpper>().setZero();
    const Eigen::MatrixXf num = q * S + A * v;
    const Eigen::VectorXf den = q * Z + A.rowwise().sum();
    for (Eigen::Index t = 0; t < n; ++t)
      chunked.row(a + t) = num.row(t) / (den(t) + c.eps);
    S += k.transpose() * v;
    Z += k.transpose() * Eigen::VectorXf::Ones(n);
  }
  CHECK_FALSE(first_difference(chunked, exact).empty());
  CHECK(recur::testing::relative_error(chunked, exact.cast<double>()) < 1e-5);
}

TEST_CASE("outputs agree with the float64 quadratic form", "[linear][correctness]") {
  for (const auto& config : all_configs()) {
    // identity with the normalized form divides by sums that can cross zero: ill-conditioned
    // by construction, so only its exactness is tested.
    if (config.feature_map == recur::FeatureMapKind::kIdentity && config.normalized) continue;
    const LinearAttention layer(config);
    for (Eigen::Index T : {1, 65, 1000, 4099}) {
      // The O(T^2) reference is the slow part: the longest only with one head, and not at all
      // under the sanitizers.
      if (T == 4099 && (config.n_heads > 1 || kSanitized)) continue;
      const auto in = random_inputs(layer, T, 7u + std::uint32_t(T), 0.5f);
      auto s = layer.make_state();
      const RowMatrix out = layer.prefill(s, in.Q, in.K, in.V);
      const auto ref = recur::testing::quadratic_reference(layer, in.Q, in.K, in.V);
      const double err = recur::testing::relative_error(out, ref);
      INFO(describe(config) << ", T " << T << ": relative error " << err);
      CHECK(err < kQuadraticTolerance);
    }
  }
}

TEST_CASE("the float64 state agrees with the recurrence reference", "[linear][correctness]") {
  LinearAttentionConfig c;
  c.n_heads = 2;
  c.d_key = 16;
  c.d_value = 32;
  const LinearAttention layer(c);
  const Eigen::Index T = 700;  // crosses two folds
  const auto in = random_inputs(layer, T, 5u, 1.0f);
  auto s = layer.make_state();
  layer.prefill(s, in.Q, in.K, in.V);
  recur::testing::RecurrenceReference ref(layer);
  for (Eigen::Index t = 0; t < T; ++t)
    ref.step(in.Q.row(t).transpose(), in.K.row(t).transpose(), in.V.row(t).transpose());
  // S and Z are sums of T positive-ish terms: compare against the direct float64 sums.
  for (int h = 0; h < 2; ++h) {
    Eigen::MatrixXd S = Eigen::MatrixXd::Zero(16, 32);
    Eigen::VectorXd Z = Eigen::VectorXd::Zero(16);
    for (Eigen::Index t = 0; t < T; ++t) {
      Eigen::VectorXd k(16), kf(16);
      k = in.K.row(t).segment(h * 16, 16).transpose().cast<double>();
      layer.feature_map().apply_reference(k.data(), 1, 16, 16, kf.data(), 16);
      S += kf * in.V.row(t).segment(h * 32, 32).cast<double>();
      Z += kf;
    }
    CHECK((s.S(h) - S).cwiseAbs().maxCoeff() / S.cwiseAbs().maxCoeff() < 1e-6);
    CHECK((s.Z(h) - Z).cwiseAbs().maxCoeff() / Z.cwiseAbs().maxCoeff() < 1e-6);
  }
  CHECK(s.n_tokens() == T);
}

TEST_CASE("clone evolves independently and reset returns to a fresh state", "[linear][state]") {
  LinearAttentionConfig c;
  c.n_heads = 2;
  c.d_key = 16;
  c.d_value = 16;
  const LinearAttention layer(c);
  const auto in = random_inputs(layer, 600, 3u);
  auto a = layer.make_state();
  layer.prefill(a, in.Q.topRows(300), in.K.topRows(300), in.V.topRows(300));
  auto b = a.clone();
  CHECK(b.raw_bytes() == a.raw_bytes());
  const RowMatrix oa = layer.prefill(a, in.Q.bottomRows(300), in.K.bottomRows(300),
                                     in.V.bottomRows(300));
  CHECK(b.raw_bytes() != a.raw_bytes());
  const RowMatrix ob = layer.prefill(b, in.Q.bottomRows(300), in.K.bottomRows(300),
                                     in.V.bottomRows(300));
  CHECK(first_difference(oa, ob).empty());
  CHECK(b.raw_bytes() == a.raw_bytes());
  const auto bytes = a.bytes();
  a.reset();
  CHECK(a.raw_bytes() == layer.make_state().raw_bytes());
  CHECK(a.n_tokens() == 0);
  CHECK(a.bytes() == bytes);
}

TEST_CASE("the state's size does not change with the sequence length", "[linear][state]") {
  const LinearAttention layer(LinearAttentionConfig{});
  auto s = layer.make_state();
  const auto before = s.bytes();
  // 8 heads, 64 x 64: P and L32 (4 bytes), L64 (8 bytes) per element, plus Z in three levels.
  CHECK(before >= std::size_t(8) * 64 * 64 * 16);
  const auto in = random_inputs(layer, 2000, 11u);
  layer.prefill(s, in.Q, in.K, in.V);
  CHECK(s.bytes() == before);
}

namespace {

// Runs `call`, expects exception type E whose message contains every needle, and checks that
// the state's bytes did not change.
template <class E, class Call>
void expect_rejected(recur::LinearState& state, Call call, std::vector<std::string> needles) {
  const auto before = state.raw_bytes();
  bool thrown = false;
  try {
    call();
  } catch (const E& e) {
    thrown = true;
    const std::string msg = e.what();
    for (const auto& n : needles) {
      INFO("message: " << msg << "\nexpected to contain: " << n);
      CHECK(msg.find(n) != std::string::npos);
    }
  }
  CHECK(thrown);
  CHECK(state.raw_bytes() == before);
}

// 4 heads, d_key 8, d_value 16: small enough to name every size in the messages.
LinearAttentionConfig small_config() {
  LinearAttentionConfig c;
  c.n_heads = 4;
  c.d_key = 8;
  c.d_value = 16;
  return c;
}

}  // namespace

TEST_CASE("bad input to step() is rejected by name and leaves the state as it was",
          "[linear][errors]") {
  const LinearAttentionConfig c = small_config();
  const LinearAttention layer(c);
  auto s = layer.make_state();
  const auto in = random_inputs(layer, 300, 1u);
  layer.prefill(s, in.Q, in.K, in.V);  // a state past its first fold
  Eigen::VectorXf q = in.Q.row(0).transpose(), k = in.K.row(0).transpose();
  Eigen::VectorXf v = in.V.row(0).transpose(), o(64);
  const Eigen::VectorXf short_q = q.head(31);
  using recur::ShapeError;
  expect_rejected<ShapeError>(s, [&] { layer.step(s, short_q, k, v, o); },
                              {"[LinearAttention::step]", "q has 31 elements", "4 * 8 = 32"});
  expect_rejected<ShapeError>(s, [&] { layer.step(s, q, q.head(30), v, o); },
                              {"[LinearAttention::step]", "k has 30 elements", "32"});
  expect_rejected<ShapeError>(s, [&] { layer.step(s, q, k, q, o); },
                              {"v has 32 elements", "n_heads * d_value = 4 * 16 = 64"});
  Eigen::VectorXf o_small(63);
  expect_rejected<ShapeError>(s, [&] { layer.step(s, q, k, v, o_small); },
                              {"out has 63 elements", "64"});
  for (float bad : {std::numeric_limits<float>::quiet_NaN(),
                    std::numeric_limits<float>::infinity(),
                    -std::numeric_limits<float>::infinity()}) {
    Eigen::VectorXf qb = q, kb = k, vb = v;
    qb(5) = bad;
    kb(31) = bad;
    vb(63) = bad;
    expect_rejected<recur::NumericError>(s, [&] { layer.step(s, qb, k, v, o); },
                                         {"[LinearAttention::step]", "q", "element 5 of 32"});
    expect_rejected<recur::NumericError>(s, [&] { layer.step(s, q, kb, v, o); },
                                         {"k", "element 31 of 32"});
    expect_rejected<recur::NumericError>(s, [&] { layer.step(s, q, k, vb, o); },
                                         {"v", "element 63 of 64"});
  }
  // A state made for a layer with another head count.
  LinearAttentionConfig other = c;
  other.n_heads = 2;
  const LinearAttention layer2(other);
  auto s2 = layer2.make_state();
  expect_rejected<recur::ArgumentError>(
      s2, [&] { layer.step(s2, q, k, v, o); },
      {"[LinearAttention::step]", "state was made for another layer", "n_heads 2", "n_heads 4"});
  // A head count that does not match the vectors: the layer expects 2 heads, gets 4 heads' worth.
  Eigen::VectorXf o2(32);
  expect_rejected<ShapeError>(s2, [&] { layer2.step(s2, q, k, v, o2); },
                              {"q has 32 elements", "2 * 8 = 16"});
}

TEST_CASE("bad input to prefill() is rejected by name and leaves the state as it was",
          "[linear][errors]") {
  const LinearAttentionConfig c = small_config();
  const LinearAttention layer(c);
  auto s = layer.make_state();
  const auto in = random_inputs(layer, 300, 2u);
  layer.prefill(s, in.Q.topRows(100), in.K.topRows(100), in.V.topRows(100));
  const auto more = random_inputs(layer, 20, 3u);
  RowMatrix O(20, 64);
  using recur::ShapeError;
  expect_rejected<ShapeError>(
      s, [&] { layer.prefill(s, more.Q.leftCols(31), more.K, more.V, O); },
      {"[LinearAttention::prefill]", "Q has shape (20, 31)", "(20, 4 * 8)"});
  expect_rejected<ShapeError>(s, [&] { layer.prefill(s, more.Q, more.K.topRows(19), more.V, O); },
                              {"K has shape (19, 32)", "(20, 4 * 8)"});
  expect_rejected<ShapeError>(s, [&] { layer.prefill(s, more.Q, more.K, more.Q, O); },
                              {"V has shape (20, 32)", "(20, 4 * 16)"});
  RowMatrix O_bad(21, 64);
  expect_rejected<ShapeError>(s, [&] { layer.prefill(s, more.Q, more.K, more.V, O_bad); },
                              {"O has shape (21, 64)"});
  for (int chunk : {0, -3}) {
    PrefillOptions opt;
    opt.chunk = chunk;
    expect_rejected<recur::ArgumentError>(
        s, [&] { layer.prefill(s, more.Q, more.K, more.V, O, opt); },
        {"[LinearAttention::prefill]", fmt::format("options.chunk is {}", chunk), "at least 1"});
  }
  PrefillOptions neg;
  neg.threads = -1;
  expect_rejected<recur::ArgumentError>(s, [&] { layer.prefill(s, more.Q, more.K, more.V, O, neg); },
                                        {"options.threads is -1"});
  for (float bad : {std::numeric_limits<float>::quiet_NaN(),
                    std::numeric_limits<float>::infinity()}) {
    RowMatrix Qb = more.Q, Kb = more.K, Vb = more.V;
    Qb(19, 31) = bad;  // the very last element: nothing before it may have been applied
    Kb(7, 0) = bad;
    Vb(12, 40) = bad;
    expect_rejected<recur::NumericError>(s, [&] { layer.prefill(s, Qb, more.K, more.V, O); },
                                         {"[LinearAttention::prefill]", "Q", "row 19, column 31",
                                          "(20, 32)"});
    expect_rejected<recur::NumericError>(s, [&] { layer.prefill(s, more.Q, Kb, more.V, O); },
                                         {"K", "row 7, column 0"});
    expect_rejected<recur::NumericError>(s, [&] { layer.prefill(s, more.Q, more.K, Vb, O); },
                                         {"V", "row 12, column 40", "(20, 64)"});
  }
}

TEST_CASE("a non-finite input in a late chunk leaves none of the earlier chunks applied",
          "[linear][errors]") {
  // The inputs are checked chunk by chunk as the walk reads them. Every way prefill keeps a
  // failed call from changing the state is reached here: one chunk on one thread (checked
  // before the walk), several chunks or threads with inputs larger than the state (the state
  // staged and put back), and inputs smaller than the state (checked up front).
  const LinearAttentionConfig c = small_config();
  const LinearAttention layer(c);
  auto s = layer.make_state();
  const auto in = random_inputs(layer, 300, 4u);
  layer.prefill(s, in.Q.topRows(100), in.K.topRows(100), in.V.topRows(100));
  const auto more = random_inputs(layer, 300, 5u);
  for (Eigen::Index T : {Eigen::Index(300), Eigen::Index(5)}) {
    for (int chunk : {2, 16, 300}) {
      for (int threads : {1, 2}) {
        INFO("T " << T << ", chunk " << chunk << ", threads " << threads);
        PrefillOptions opt;
        opt.chunk = chunk;
        opt.threads = threads;
        RowMatrix O(T, 64);
        RowMatrix Qb = more.Q.topRows(T), Kb = more.K.topRows(T), Vb = more.V.topRows(T);
        Qb(T - 1, 31) = std::numeric_limits<float>::quiet_NaN();  // last chunk, last head
        Kb(T - 1, 2) = std::numeric_limits<float>::infinity();     // last chunk, first head
        Vb(T - 1, 63) = -std::numeric_limits<float>::infinity();
        const auto Q = more.Q.topRows(T), K = more.K.topRows(T), V = more.V.topRows(T);
        const std::string row = fmt::format("row {}", T - 1);
        expect_rejected<recur::NumericError>(s, [&] { layer.prefill(s, Qb, K, V, O, opt); },
                                             {"[LinearAttention::prefill]", "Q", row + ", column 31"});
        expect_rejected<recur::NumericError>(s, [&] { layer.prefill(s, Q, Kb, V, O, opt); },
                                             {"K", row + ", column 2"});
        expect_rejected<recur::NumericError>(s, [&] { layer.prefill(s, Q, K, Vb, O, opt); },
                                             {"V", row + ", column 63"});
        // Two bad values: the first in Q, K, V order and then row order is named, as before.
        expect_rejected<recur::NumericError>(s, [&] { layer.prefill(s, Q, Kb, Vb, O, opt); },
                                             {"K", row + ", column 2"});
      }
    }
  }
  // And the state still continues as if nothing had been tried.
  auto fresh = layer.make_state();
  layer.prefill(fresh, in.Q.topRows(100), in.K.topRows(100), in.V.topRows(100));
  CHECK(fresh.raw_bytes() == s.raw_bytes());
}

TEST_CASE("prefill matches step() bit for bit when d_key is not a multiple of the vector width",
          "[linear][exactness]") {
  // The input pass maps a head's last, partial vector through a zero-padded copy; its padding
  // must come out as 0, not as phi(0).
  for (auto map : {recur::FeatureMapKind::kEluPlusOne, recur::FeatureMapKind::kRelu,
                   recur::FeatureMapKind::kIdentity}) {
    for (int d_key : {4, 12, 20, 36}) {
      LinearAttentionConfig c;
      c.feature_map = map;
      c.n_heads = 3;
      c.d_key = d_key;
      c.d_value = 16;
      const LinearAttention layer(c);
      const Eigen::Index T = 300;
      const auto in = random_inputs(layer, T, 7u + std::uint32_t(d_key));
      auto stepped = layer.make_state();
      RowMatrix expected(T, 48);
      for (Eigen::Index t = 0; t < T; ++t) {
        Eigen::VectorXf o(48);
        layer.step(stepped, in.Q.row(t).transpose(), in.K.row(t).transpose(),
                   in.V.row(t).transpose(), o);
        expected.row(t) = o.transpose();
      }
      for (int chunk : {1, 7, 64, 300}) {
        for (int threads : {1, 2}) {
          PrefillOptions opt;
          opt.chunk = chunk;
          opt.threads = threads;
          auto s = layer.make_state();
          const RowMatrix out = layer.prefill(s, in.Q, in.K, in.V, opt);
          INFO(describe(c) << ", chunk " << chunk << ", threads " << threads);
          CHECK(first_difference(out, expected) == "");
          CHECK(s.raw_bytes() == stepped.raw_bytes());
        }
      }
    }
  }
}

TEST_CASE("layer configurations out of range are rejected", "[linear][errors]") {
  LinearAttentionConfig c;
  c.n_heads = 0;
  CHECK_THROWS_WITH(LinearAttention(c), Catch::Contains("n_heads is 0"));
  c = {};
  c.d_value = -1;
  CHECK_THROWS_WITH(LinearAttention(c), Catch::Contains("d_value is -1"));
  c = {};
  c.eps = std::numeric_limits<float>::quiet_NaN();
  CHECK_THROWS_AS(LinearAttention(c), recur::ArgumentError);
  CHECK_THROWS_WITH(recur::make_feature_map("softplus"),
                    Catch::Contains("unknown feature map \"softplus\""));
}
