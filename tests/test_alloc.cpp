// step() allocates nothing: this program replaces the global operator new with one that counts,
// warms each path up, and asserts that further steps make no heap allocation at all.
#include <catch2/catch.hpp>

#include <atomic>
#include <cstdlib>
#include <new>

#include "recur/gla_recurrence.h"
#include "recur/linear_attention.h"
#include "recur/model.h"

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

TEST_CASE("Decoder::step allocates nothing after warm-up, on 1 and 2 threads", "[alloc]") {
  for (const int threads : {1, 2}) {
    Decoder dec(Model::builtin(1), {16, threads});
    dec.prefill({1, 2, 3, 4, 5});
    dec.step(6);  // warm-up: the OpenMP pool starts here
    const long before = g_allocations.load();
    for (int t = 0; t < 300; ++t) dec.step(t % 256);
    const long made = g_allocations.load() - before;  // read before INFO, which allocates
    INFO("threads " << threads);
    CHECK(made == 0);
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
