// step() allocates nothing: this program replaces the global operator new with one that counts,
// warms each path up, and asserts that further steps make no heap allocation at all (a whole
// model's, every family's, may only add a softmax layer's next page of keys and values).
#include <catch2/catch.hpp>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "conformance/fixtures.h"
#include "model/random_weights.h"
#include "recur/gla_recurrence.h"
#include "recur/linear_attention.h"
#include "recur/model.h"
#include "recur/quantize.h"
#include "support/temp_dir.h"

namespace {
std::atomic<long> g_allocations{0};
}  // namespace

// The replacements pair malloc with free; GCC cannot see that operator new is malloc here and
// warns that delete frees what new returned.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif

// Every replaceable form, so that no allocation escapes the count and no pointer is freed by
// another allocator than the one that made it.
void* operator new(std::size_t size) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t size) { return operator new(size); }
void* operator new(std::size_t size, const std::nothrow_t&) noexcept {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  return std::malloc(size == 0 ? 1 : size);
}
void* operator new[](std::size_t size, const std::nothrow_t& t) noexcept { return operator new(size, t); }
void* operator new(std::size_t size, std::align_val_t align) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  const auto a = static_cast<std::size_t>(align);
  if (void* p = std::aligned_alloc(a, (size + a - 1) / a * a)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t size, std::align_val_t align) { return operator new(size, align); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }

using namespace recur;
using recur::conformance::Fixture;
using recur::conformance::fixtures;
using recur::testing::TempDir;

TEST_CASE("the counter sees allocations, so a zero below means something", "[alloc]") {
  const long before = g_allocations.load();
  auto* v = new std::vector<int>(100);
  delete v;
  CHECK(g_allocations.load() - before >= 2);
}

TEST_CASE("LinearAttention::step allocates nothing after the state exists", "[alloc]") {
  for (const bool normalized : {true, false}) {
    LinearAttentionConfig c;
    c.n_heads = 4;
    c.d_key = 32;
    c.d_value = 48;
    c.normalized = normalized;
    const LinearAttention layer(c);
    auto state = layer.make_state();
    Eigen::VectorXf q = Eigen::VectorXf::Random(128), k = Eigen::VectorXf::Random(128);
    Eigen::VectorXf v = Eigen::VectorXf::Random(192), o(192);
    layer.step(state, q, k, v, o);
    const long before = g_allocations.load();
    for (int t = 0; t < 600; ++t) layer.step(state, q, k, v, o);  // across two folds
    CHECK(g_allocations.load() - before == 0);
  }
}

TEST_CASE("GlaRecurrence::step allocates nothing after the state exists", "[alloc]") {
  for (const auto decay : {DecayKind::kPerChannel, DecayKind::kPerHead}) {
    GlaRecurrenceConfig c;
    c.n_heads = 4;
    c.d_key = 32;
    c.d_value = 48;
    c.decay = decay;
    if (decay == DecayKind::kPerHead) c.head_decay = gates::retnet_decays(4);
    const GlaRecurrence layer(c);
    auto state = layer.make_state();
    Eigen::VectorXf q = Eigen::VectorXf::Random(128), k = Eigen::VectorXf::Random(128);
    Eigen::VectorXf v = Eigen::VectorXf::Random(192), o(192);
    Eigen::VectorXf a = decay == DecayKind::kPerChannel ? Eigen::VectorXf::Constant(128, 0.9f)
                                                        : Eigen::VectorXf();
    layer.step(state, q, k, v, a, o);
    const long before = g_allocations.load();
    for (int t = 0; t < 300; ++t) layer.step(state, q, k, v, a, o);
    CHECK(g_allocations.load() - before == 0);
  }
}

namespace {

// The decoder of the fixture's model with weights of each kind the engine keeps apart: float32,
// bfloat16 (kept 16-bit in memory) and q8 codes (read back from a quantized directory).
std::vector<std::pair<std::string, std::shared_ptr<const Model>>> models_of(const Fixture& f,
                                                                            const TempDir& dir) {
  const ModelConfig c = ModelConfig::from_json(f.config, f.name);
  write_quantized_model(dir.str(), c, RandomWeights(c, 3), {"q8", ""});
  return {{"f32", Model::from_weights(c, RandomWeights(c, 3))},
          {"bf16", Model::from_weights(c, RandomWeights(c, 3, DType::kBF16))},
          {"q8", Model::load(dir.str())}};
}

}  // namespace

// Every registered family (test_conformance checks that each has a fixture). A step may
// allocate only where the state itself grows, a full softmax layer's new page of keys and
// values; scratch never.
TEST_CASE("Decoder::step allocates nothing after warm-up, for every family, on 1 and 2 threads",
          "[alloc]") {
  for (const Fixture& f : fixtures()) {
    TempDir dir;
    for (const auto& [weights, model] : models_of(f, dir))
      for (const int threads : {1, 2}) {
        Decoder dec(model, {16, threads});
        dec.prefill({1, 2, 3, 4, 5});
        dec.step(6);  // warm-up: the thread pool starts here
        const int vocab = model->config().vocab_size;
        int bad_step = -1;
        long made = 0;
        for (int t = 0; t < 300 && bad_step < 0; ++t) {  // across a linear-attention fold
          const std::size_t held = dec.bytes();
          const long before = g_allocations.load();
          dec.step(t % vocab);
          made = g_allocations.load() - before;
          if (made != 0 && !(dec.state_grows() && dec.bytes() > held)) bad_step = t;
        }
        INFO(f.name << ", " << weights << " weights, threads " << threads);  // INFO allocates
        INFO(made << " allocations at step " << bad_step << " after warm-up");
        CHECK(bad_step == -1);
      }
  }
}

TEST_CASE("BatchDecoder::step allocates nothing once it has seen the batch's size", "[alloc]") {
  for (const int threads : {1, 2}) {
    const auto model = Model::builtin(1);
    std::vector<Decoder> decoders;
    for (int i = 0; i < 6; ++i) decoders.emplace_back(model, DecoderOptions{4, threads});
    std::vector<Decoder*> batch;
    for (auto& d : decoders) batch.push_back(&d);
    std::vector<int> tokens(batch.size(), 7);
    BatchDecoder bd(model, threads);
    bd.step(batch, tokens);  // warm-up: the workspace grows to six rows
    std::vector<Decoder*> fewer(batch.begin(), batch.begin() + 3);
    std::vector<int> fewer_tokens(3, 9);
    const long before = g_allocations.load();
    for (int t = 0; t < 100; ++t) {
      tokens.assign(tokens.size(), t % 256);  // same size: no allocation
      bd.step(t % 2 ? batch : fewer, t % 2 ? tokens : fewer_tokens);
    }
    const long made = g_allocations.load() - before;
    INFO("threads " << threads);
    CHECK(made == 0);
  }
}
