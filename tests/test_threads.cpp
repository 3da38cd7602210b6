// Threads change the speed, never the bytes: prefill at any thread count (more than there are
// heads too), called from inside an outer OpenMP region where OpenMP starts fewer threads than
// asked, several threads decoding at once with one shared Model, a sampler's draws, and the
// ranges of the work handed out in another order. ctest runs this program a second and a third
// time under OMP_THREAD_LIMIT=1 and OMP_DYNAMIC=true.
#include <catch2/catch.hpp>
#include <omp.h>

#include <atomic>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "recur/causal_attention.h"
#include "recur/linear_attention.h"
#include "model/random_weights.h"
#include "models/linear/linear.h"
#include "recur/model.h"
#include "recur/sampling.h"
#include "support/model_cases.h"
#include "support/quant_model.h"
#include "util/parallel.h"

using namespace recur;
using recur::models::linear::ModelFeatureMap;
using recur::testing::random_tokens;

namespace {

RowMatrix random_matrix(Eigen::Index rows, Eigen::Index cols, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  RowMatrix m(rows, cols);
  for (Eigen::Index i = 0; i < m.size(); ++i) m.data()[i] = normal(rng);
  return m;
}

// Five heads, grouped kv heads, a learned map: uneven splits over any thread count.
std::shared_ptr<const Model> small_model() {
  ModelConfig c;
  c.architecture = Architecture::kLinearAttn;
  c.vocab_size = 300;
  c.hidden_size = 80;
  c.num_hidden_layers = 2;
  c.num_heads = 5;
  models::linear::edit(c).feature_map = ModelFeatureMap::kHedgehog;
  models::linear::edit(c).norm_feature_map = true;
  c.intermediate_size = 96;
  return Model::from_weights(c, RandomWeights(c, 11));
}

// Wide enough that a single token's products split over two threads (in more ranges than
// threads), which small_model's are too small for.
std::shared_ptr<const Model> decode_model() {
  ModelConfig c;
  c.architecture = Architecture::kLinearAttn;
  c.vocab_size = 2048;
  c.hidden_size = 256;
  c.num_hidden_layers = 2;
  c.num_heads = 4;
  c.intermediate_size = 512;
  return Model::from_weights(c, RandomWeights(c, 12));
}

// Every position's logits, then one step: a decoder's whole output as bytes.
std::vector<float> run(const std::shared_ptr<const Model>& model, const std::vector<int>& tokens,
                       int chunk, int threads) {
  const auto V = static_cast<std::size_t>(model->config().vocab_size);
  Decoder dec(model, {chunk, threads});
  std::vector<float> out;
  out.reserve((tokens.size() + 1) * V);
  dec.prefill(tokens, {}, [&](std::int64_t, const float* l) { out.insert(out.end(), l, l + V); });
  const auto last = dec.step(7);
  out.insert(out.end(), last.data(), last.data() + V);
  return out;
}

bool same_bytes(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Sets the order in which parallel_ranges hands out ranges for one scope.
struct OrderScope {
  explicit OrderScope(detail::RangeOrder order) : before(detail::set_range_order(order)) {}
  ~OrderScope() { detail::set_range_order(before); }
  detail::RangeOrder before;
};

// Runs parallel_ranges(n, ranges, threads); returns what went wrong (empty if every range ran
// once with its fixed bounds and no range index was in use twice at once). No Catch2 assertion
// here: it may run on several threads, and Catch2's are for the main thread only.
std::string every_range_once(int n, int ranges, int threads) {
  std::vector<std::atomic<int>> runs(static_cast<std::size_t>(ranges));
  std::vector<std::atomic<int>> busy(static_cast<std::size_t>(ranges));
  std::vector<int> begins(static_cast<std::size_t>(ranges)), ends(static_cast<std::size_t>(ranges));
  std::atomic<int> overlaps{0};
  detail::parallel_ranges(n, ranges, threads, [&](int begin, int end, int r) {
    const auto i = static_cast<std::size_t>(r);
    if (busy[i].fetch_add(1) != 0) ++overlaps;
    runs[i].fetch_add(1);
    begins[i] = begin;
    ends[i] = end;
    volatile int spin = 0;  // uneven work, so that the threads interleave
    for (int k = 0; k < (r % 3) * 2000; ++k) spin = spin + 1;
    busy[i].fetch_sub(1);
  });
  const std::string where = "n " + std::to_string(n) + ", ranges " + std::to_string(ranges) +
                            ", threads " + std::to_string(threads);
  if (overlaps.load() != 0) return where + ": a range index in use twice at once";
  for (int r = 0; r < ranges; ++r) {
    const auto i = static_cast<std::size_t>(r);
    if (runs[i].load() != 1)
      return where + ": range " + std::to_string(r) + " ran " + std::to_string(runs[i].load()) + " times";
    if (begins[i] != int(std::int64_t(n) * r / ranges) || ends[i] != int(std::int64_t(n) * (r + 1) / ranges))
      return where + ": range " + std::to_string(r) + " had bounds " + std::to_string(begins[i]) +
             ".." + std::to_string(ends[i]);
  }
  return {};
}

}  // namespace

TEST_CASE("parallel_ranges runs every range once, with the bounds fixed by the split alone",
          "[threads]") {
  for (const auto order : {detail::RangeOrder::kAscending, detail::RangeOrder::kReversed}) {
    const OrderScope scope(order);
    for (int threads : {1, 2, 3, 8})
      for (int ranges : {1, 2, 3, 7, 32, 250})
        for (int n : {ranges, 1000, 32000}) REQUIRE(every_range_once(n, ranges, threads).empty());
  }
  // From inside a range (runs inline) and from several threads at once (one pool each).
  std::vector<std::string> failures(4);
  detail::parallel_ranges(4, 4, 2, [&](int, int, int r) {
    failures[std::size_t(r)] = every_range_once(100, 9, 2);
  });
  for (const auto& f : failures) CHECK(f.empty());
  std::vector<std::thread> callers;
  for (std::size_t i = 0; i < 3; ++i)
    callers.emplace_back([&failures, i] {
      for (int k = 0; k < 200 && failures[i].empty(); ++k) failures[i] = every_range_once(512, 8, 2);
    });
  for (auto& t : callers) t.join();
  for (const auto& f : failures) CHECK(f.empty());
}

TEST_CASE("decode gives the same bytes whatever order the threads take the ranges in",
          "[threads]") {
  const auto model = decode_model();
  const auto tokens = random_tokens(50, 2048, 5);
  const auto want = run(model, tokens, 16, 1);
  for (const auto order : {detail::RangeOrder::kAscending, detail::RangeOrder::kReversed}) {
    const OrderScope scope(order);
    for (int threads : {1, 2, 3}) {
      INFO("threads " << threads << (order == detail::RangeOrder::kReversed ? ", reversed" : ""));
      std::vector<float> got = run(model, tokens, 16, threads);
      // And twenty single-token steps, the decode path proper.
      Decoder dec(model, {16, threads});
      dec.prefill(tokens);
      for (int t = 0; t < 20; ++t) {
        const auto l = dec.step(t * 13 % 2048);
        got.insert(got.end(), l.data(), l.data() + l.size());
      }
      Decoder ref(model, {16, 1});
      std::vector<float> expect = want;
      {
        const OrderScope ascending(detail::RangeOrder::kAscending);
        ref.prefill(tokens);
        for (int t = 0; t < 20; ++t) {
          const auto l = ref.step(t * 13 % 2048);
          expect.insert(expect.end(), l.data(), l.data() + l.size());
        }
      }
      REQUIRE(same_bytes(got, expect));
    }
  }
}

TEST_CASE("a layer's prefill gives the same bytes at 1 to 5 threads and more threads than heads",
          "[threads]") {
  LinearAttentionConfig c;
  c.n_heads = 3;
  c.d_key = 16;
  c.d_value = 24;
  const LinearAttention layer(c);
  const Eigen::Index T = 300;
  const RowMatrix Q = random_matrix(T, 48, 1), K = random_matrix(T, 48, 2), V = random_matrix(T, 72, 3);
  auto ref_state = layer.make_state();
  const RowMatrix want = layer.prefill(ref_state, Q, K, V, {64, 1});
  for (int threads : {2, 3, 4, 5, 8}) {
    INFO("threads " << threads);
    auto state = layer.make_state();
    const RowMatrix got = layer.prefill(state, Q, K, V, {64, threads});
    REQUIRE(std::memcmp(got.data(), want.data(), sizeof(float) * std::size_t(got.size())) == 0);
    REQUIRE(state.raw_bytes() == ref_state.raw_bytes());
  }
}

TEST_CASE("a model's logits are the same bytes at 1 to 5 threads and more threads than heads",
          "[threads]") {
  const auto model = small_model();
  const auto tokens = random_tokens(90, 300, 3);
  const auto want = run(model, tokens, 32, 1);
  for (int threads : {2, 3, 4, 5, 9}) {
    INFO("threads " << threads);
    REQUIRE(same_bytes(run(model, tokens, 32, threads), want));
  }
}

TEST_CASE("prefill nested inside an outer OpenMP region runs all of its work", "[threads]") {
  // With nesting off, the inner regions get one thread each: every range must still run.
  const auto model = small_model();
  const auto tokens = random_tokens(70, 300, 4);
  const auto want = run(model, tokens, 16, 1);
  const int levels = omp_get_max_active_levels();
  omp_set_max_active_levels(1);
  for (int inner : {2, 3, 4}) {
    std::vector<std::vector<float>> got(2);
#pragma omp parallel num_threads(2)
    {
      const int t = omp_get_thread_num();
      if (t < 2) got[std::size_t(t)] = run(model, tokens, 16, inner);
    }
    INFO("inner threads " << inner);
    CHECK(same_bytes(got[0], want));
    if (!got[1].empty()) CHECK(same_bytes(got[1], want));
  }
  omp_set_max_active_levels(levels);
}

TEST_CASE("several threads decoding with one shared Model each get the bytes they get alone",
          "[threads]") {
  const auto model = small_model();
  constexpr int kThreads = 4;
  std::vector<std::vector<int>> inputs;
  std::vector<std::vector<float>> want;
  for (int i = 0; i < kThreads; ++i) {
    inputs.push_back(random_tokens(40 + 10 * i, 300, 20 + std::uint32_t(i)));
    want.push_back(run(model, inputs.back(), 8, 1));
  }
  std::vector<std::vector<float>> got(kThreads);
  std::vector<std::thread> pool;
  for (int i = 0; i < kThreads; ++i)
    pool.emplace_back([&, i] {
      // Each decodes twice: alone on its thread, and with the decoder's own threads.
      const auto a = run(model, inputs[std::size_t(i)], 8, 1);
      const auto b = run(model, inputs[std::size_t(i)], 5, 2);
      got[std::size_t(i)] = same_bytes(a, b) ? a : std::vector<float>{};
    });
  for (auto& t : pool) t.join();
  for (int i = 0; i < kThreads; ++i) {
    INFO("thread " << i);
    CHECK(same_bytes(got[std::size_t(i)], want[std::size_t(i)]));
  }
}

namespace {

// Wide enough that a single token's fused products (q, k and v; gate and up; RWKV-7's r, k, v
// and LoRAs) split over two threads, with several heads for the walk to split.
const char* const kQwenDecode = R"({"model_type": "qwen3_5_text", "vocab_size": 300,
  "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2,
  "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
  "full_attention_interval": 2, "linear_num_key_heads": 2, "linear_num_value_heads": 4,
  "linear_key_head_dim": 64, "linear_value_head_dim": 64, "linear_conv_kernel_dim": 4,
  "rms_norm_eps": 1e-6, "hidden_act": "silu", "tie_word_embeddings": true,
  "rope_parameters": {"rope_type": "default", "rope_theta": 10000000, "partial_rotary_factor": 0.25}})";
const char* const kRwkv7Decode = R"({"model_type": "rwkv7", "vocab_size": 300, "hidden_size": 256,
  "head_dim": 64, "num_hidden_layers": 2, "intermediate_size": 512, "decay_low_rank_dim": 32,
  "a_low_rank_dim": 32, "v_low_rank_dim": 32, "gate_low_rank_dim": 64})";
// Mamba-2: 8 heads in 2 groups for the SSD walk to split, in_proj wide enough to split too.
const char* const kMamba2Decode = R"({"model_type": "mamba2", "vocab_size": 300,
  "hidden_size": 256, "num_hidden_layers": 2, "num_heads": 8, "head_dim": 64, "state_size": 64,
  "n_groups": 2, "expand": 2, "conv_kernel": 4, "tie_word_embeddings": true})";
// Falcon-H1: the Mamba-2 mixer's projections fused with the attention's beside it.
const char* const kFalconH1Decode = R"({"model_type": "falcon_h1", "vocab_size": 300,
  "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2,
  "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64, "mamba_d_ssm": null,
  "mamba_n_heads": 8, "mamba_d_head": "auto", "mamba_d_state": 32, "mamba_n_groups": 2,
  "mamba_rms_norm": true, "ssm_multipliers": [0.5, 1.5, 1.0, 0.8, 1.2],
  "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0}})";

// A prompt, then single-token steps: every step's logits and the state after, as bytes. The
// prompt is long enough that a step's attention over the cache splits into three ranges.
std::pair<std::vector<float>, std::string> decoded(const std::shared_ptr<const Model>& model,
                                                   int threads) {
  Decoder dec(model, {16, threads});
  dec.prefill(random_tokens(200, 300, 9));
  std::vector<float> out;
  for (int t = 0; t < 12; ++t) {
    const auto l = dec.step(t * 37 % 300);
    out.insert(out.end(), l.data(), l.data() + l.size());
  }
  return {out, dec.save_bytes()};
}

}  // namespace

TEST_CASE("decode of Qwen3.5, RWKV-7, Mamba-2 and Falcon-H1 (the walk split by heads with the "
          "convolution, norms and gates in its ranges, attention over the cache split by query "
          "heads, fused products) gives the bytes of one thread at 2 and 3 threads, in either "
          "range order",
          "[threads][exact]") {
  for (const char* json : {kQwenDecode, kRwkv7Decode, kMamba2Decode, kFalconH1Decode}) {
    const ModelConfig c = ModelConfig::from_json(json, "config.json");
    for (const char* format : {"bf16", "q8"}) {
      const auto model = std::string(format) == "q8"
                             ? recur::testing::quantized_model(c, 5, "q8")
                             : Model::from_weights(c, RandomWeights(c, 5, DType::kBF16));
      const auto want = decoded(model, 1);
      for (const auto order : {detail::RangeOrder::kAscending, detail::RangeOrder::kReversed}) {
        const OrderScope scope(order);
        for (const int threads : {2, 3}) {
          INFO(c.model_type() << " " << format << ", threads " << threads
                              << (order == detail::RangeOrder::kReversed ? ", reversed" : ""));
          const auto got = decoded(model, threads);
          REQUIRE(same_bytes(got.first, want.first));
          REQUIRE(got.second == want.second);
        }
      }
    }
  }
}

TEST_CASE("a step's attention over the cache, split by query heads, gives the bytes of one thread "
          "at 2, 3 and 9 threads, in either range order, full and windowed", "[threads][exact]") {
  for (const int window : {0, 100}) {
    CausalAttentionConfig c;
    c.n_heads = 8;
    c.n_kv_heads = 2;
    c.d_head = 64;
    c.window = window;
    c.rotary_dim = 32;
    const CausalAttention layer(c);
    // Long enough that each step's heads split into as many ranges as threads (up to 8).
    const Eigen::Index T = 300, steps = 8;
    const RowMatrix Q = random_matrix(T + steps, 512, 4), K = random_matrix(T + steps, 128, 5),
                    V = random_matrix(T + steps, 128, 6);
    const auto decode = [&](int threads) {
      auto state = layer.make_state();
      RowMatrix prompt_out(T, 512);
      layer.prefill(state, Q.topRows(T), K.topRows(T), V.topRows(T), prompt_out, {64, 1});
      RowMatrix O(steps, 512);
      for (Eigen::Index t = 0; t < steps; ++t) {
        Eigen::VectorXf o(512);
        layer.step(state, Q.row(T + t).transpose(), K.row(T + t).transpose(),
                   V.row(T + t).transpose(), o, threads);
        O.row(t) = o.transpose();
      }
      return std::make_pair(O, state.raw_bytes());
    };
    const auto want = decode(1);
    for (const auto order : {detail::RangeOrder::kAscending, detail::RangeOrder::kReversed}) {
      const OrderScope scope(order);
      for (const int threads : {2, 3, 9}) {
        INFO("window " << window << ", threads " << threads
                       << (order == detail::RangeOrder::kReversed ? ", reversed" : ""));
        const auto got = decode(threads);
        REQUIRE(std::memcmp(got.first.data(), want.first.data(),
                            sizeof(float) * std::size_t(want.first.size())) == 0);
        REQUIRE(got.second == want.second);
      }
    }
  }
}

namespace {

// Logits wide enough that a draw's passes over the candidates split into several ranges (one
// every 32,768 candidates), their largest value three times, in three ranges, so that greedy
// must keep the lowest of the three however the ranges' bests are combined; every seventh id
// masked, so that the candidates are not the ids.
constexpr int kWideVocab = 150000;
constexpr int kTopIds[] = {40000, 100000, 140000};

Eigen::VectorXf wide_logits() {
  std::mt19937 rng(21);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  Eigen::VectorXf l(kWideVocab);
  for (auto& x : l) x = normal(rng);
  const float top = l.maxCoeff() + 1.0f;
  for (const int id : kTopIds) l[id] = top;
  return l;
}

std::shared_ptr<const TokenMask> every_seventh_masked() {
  std::vector<char> allowed(kWideVocab, 1);
  for (std::size_t id = 3; id < allowed.size(); id += 7) allowed[id] = 0;
  return std::make_shared<const TokenMask>(std::move(allowed));
}

// Sixteen draws in a row, and the random stream's position after them.
std::pair<std::vector<int>, std::uint64_t> draws(const Eigen::VectorXf& logits, SamplerOptions o,
                                                 int threads) {
  o.threads = threads;
  Sampler s(o);
  std::vector<int> ids;
  for (int i = 0; i < 16; ++i) ids.push_back(s.sample(logits, {}));
  return {ids, s.state()};
}

}  // namespace

TEST_CASE("draws over a wide vocabulary (the max and the exponentials split by candidates) are "
          "the ids of one thread at 2 and 3 threads, in either range order", "[threads][sampling]") {
  const Eigen::VectorXf logits = wide_logits();
  struct Mode {
    const char* name;
    float temperature;
    int top_k;
    float top_p;
  };
  for (const Mode m : {Mode{"greedy", 0.0f, 0, 1.0f}, Mode{"every id", 1.0f, 0, 1.0f},
                       Mode{"top-p 0.9", 0.7f, 0, 0.9f}, Mode{"top-k 50", 1.3f, 50, 1.0f}}) {
    for (const bool masked : {false, true}) {
      SamplerOptions o;
      o.temperature = m.temperature;
      o.top_k = m.top_k;
      o.top_p = m.top_p;
      o.seed = 9;
      if (masked) o.mask = every_seventh_masked();
      const auto want = draws(logits, o, 1);
      if (m.temperature == 0.0f) REQUIRE(want.first.front() == kTopIds[0]);
      for (const auto order : {detail::RangeOrder::kAscending, detail::RangeOrder::kReversed}) {
        const OrderScope scope(order);
        for (const int threads : {2, 3}) {
          INFO(m.name << (masked ? ", masked" : "") << ", threads " << threads
                      << (order == detail::RangeOrder::kReversed ? ", reversed" : ""));
          REQUIRE(draws(logits, o, threads) == want);
        }
      }
    }
  }
}
