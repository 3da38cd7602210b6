// The conversation store against a local Redis: states written (write-through SET with an
// expiry) and read (GET of a state no cache holds) per second, their latency at p50 and p99,
// and the bytes Redis holds per conversation, for the built-in model's state (1 MiB) and the
// bench model's (6 MiB, the model of bench_model). Starts its own redis-server on a free port
// (Debian's redis-server), or uses RECUR_REDIS=redis://host:port/db.
#include <benchmark/benchmark.h>
#include <fmt/format.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "recur/model.h"
#include "serve/store.h"
#include "serve/redis.h"  // the library's own Redis client (engine/serve, private)

extern char** environ;

namespace {

std::string g_url;
pid_t g_redis = -1;

void start_redis() {
  if (const char* url = std::getenv("RECUR_REDIS")) {
    g_url = url;
    return;
  }
  const int port = 20000 + static_cast<int>(getpid() % 20000);
  const std::string p = std::to_string(port);
  std::vector<std::string> args = {"redis-server", "--bind", "127.0.0.1", "--port", p, "--save", "",
                                   "--appendonly", "no", "--logfile", "/dev/null"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  if (posix_spawnp(&g_redis, "redis-server", nullptr, nullptr, argv.data(), environ) != 0)
    throw std::runtime_error("cannot start redis-server (apt-get install redis-server)");
  g_url = "redis://127.0.0.1:" + p + "/0";
  recur::serve::Redis probe(recur::serve::RedisAddress::parse(g_url, "redis"), 1.0);
  for (int i = 0; i < 100; ++i) {
    try {
      probe.ping();
      return;
    } catch (const recur::serve::StoreUnavailable&) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  throw std::runtime_error("redis-server did not start");
}

// A real saved state of each model, after a few tokens.
const std::string& state(int which) {
  static std::string states[2];
  if (states[which].empty()) {
    std::shared_ptr<const recur::Model> model;
    if (which == 0) {
      model = recur::Model::load(RECUR_SOURCE_DIR "/models/kjv");
    } else {
      recur::ModelConfig c;
      c.vocab_size = 32000;
      c.hidden_size = 512;
      c.num_hidden_layers = 12;
      c.num_heads = 8;
      c.resolve("bench");
      model = recur::Model::from_weights(c, recur::RandomWeights(c, 1));
    }
    recur::Decoder d(model, {64, 1});
    d.prefill({1, 2, 3, 4, 5, 6, 7, 8});
    states[which] = d.save_bytes();
  }
  return states[which];
}

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<std::size_t>(p * double(v.size() - 1) + 0.5))];
}

// write: 0 reads, 1 writes. Memory holds nothing but the newest state, so every read goes to
// Redis.
void BM_Store(benchmark::State& st) {
  const int which = static_cast<int>(st.range(0));
  const bool write = st.range(1) == 1;
  const std::string& bytes = state(which);
  recur::serve::StoreOptions o;
  o.memory_budget = 0;
  o.redis_url = g_url;
  recur::serve::ConversationStore store(o);
  // Ids to read: written first.
  const int n_ids = 64;
  const std::string prefix = fmt::format("bench-{}-{}-", which, getpid());
  if (!write)
    for (int i = 0; i < n_ids; ++i) store.put(prefix + std::to_string(i), bytes);
  std::vector<double> us;
  long i = 0;
  for (auto _ : st) {
    const std::string id = prefix + std::to_string(write ? n_ids + i : i % n_ids);
    const auto t0 = std::chrono::steady_clock::now();
    if (write) {
      store.put(id, bytes);
    } else {
      auto got = store.get(id);
      if (!got || got->size() != bytes.size()) st.SkipWithError("a state read back wrong");
    }
    us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    ++i;
  }
  recur::serve::Redis redis(recur::serve::RedisAddress::parse(g_url, "redis"), 2.0);
  st.counters["states/s"] = benchmark::Counter(double(st.iterations()), benchmark::Counter::kIsRate);
  st.counters["MB/s"] = benchmark::Counter(double(st.iterations()) * double(bytes.size()) / 1e6,
                                           benchmark::Counter::kIsRate);
  st.counters["p50_us"] = percentile(us, 0.5);
  st.counters["p99_us"] = percentile(us, 0.99);
  st.counters["state_bytes"] = double(bytes.size());
  st.counters["redis_bytes"] =
      double(redis.memory_usage("recur:conversation:" + prefix + std::to_string(write ? n_ids : 0)));
  const auto stats = store.stats();
  if (stats.errors != 0 || stats.pending != 0) st.SkipWithError("Redis calls failed");
}
BENCHMARK(BM_Store)->ArgNames({"bench_model", "write"})
    ->Args({0, 1})->Args({0, 0})->Args({1, 1})->Args({1, 0})->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  start_redis();
  benchmark::AddCustomContext("redis", g_url);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  if (g_redis > 0) {
    kill(g_redis, SIGTERM);
    waitpid(g_redis, nullptr, 0);
  }
  return 0;
}
