// A model directory's prefill and decode speed, timed by llama-bench's rule so that the two
// engines can be put side by side on the same weights (bench/peer/llama_cpp.sh does):
//
//   pp N    one prompt of N tokens from an empty state, logits of the last token only; a
//           first, untimed prompt warms the buffers and the weights' pages up (llama-bench's
//           warm-up run). tokens/s = N / the prompt's time.
//   tg N@D  N tokens one at a time, full logits each, after an untimed D-token prompt (D 0:
//           from an empty state, llama-bench's "tg N"; D > 0: its "tg N @ dD"). No sampling:
//           the next id is a fixed walk over the vocabulary. One untimed step warms up first.
//           tokens/s = N / the N steps' time.
//
// Usage: bench_model_dir MODEL_DIR [--pp 512,4096] [--tg 64] [--depth 512] [--threads 1,2]
//        [--chunk 64] [Google Benchmark flags: --benchmark_format=json, ...]
// Each benchmark runs once (Iterations(1)): the caller repeats runs and takes the best, between
// runs of the other engine (the machine is shared; see docs/performance.md).
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "recur/isa.h"
#include "recur/model.h"
#include "whole_model.h"

namespace {

struct Options {
  std::string dir;
  std::vector<int> pp{512}, threads{1, 2};
  int tg = 64, depth = 512, chunk = 64;
};

std::vector<int> int_list(const std::string& flag, const std::string& text) {
  std::vector<int> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    char* end = nullptr;
    const long v = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v < 0 || v > (1 << 24))
      throw std::invalid_argument("bench_model_dir: " + flag + " takes counts (0 to 2^24) " +
                                  "separated by commas, not '" + text + "'");
    out.push_back(static_cast<int>(v));
  }
  return out;
}

// Takes this program's own flags out of argv (Google Benchmark's stay for it).
Options parse(int& argc, char** argv) {
  Options o;
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--pp" && has_value) o.pp = int_list(a, argv[++i]);
    else if (a == "--threads" && has_value) o.threads = int_list(a, argv[++i]);
    else if (a == "--tg" && has_value) o.tg = int_list(a, argv[++i]).at(0);
    else if (a == "--depth" && has_value) o.depth = int_list(a, argv[++i]).at(0);
    else if (a == "--chunk" && has_value) o.chunk = int_list(a, argv[++i]).at(0);
    else if (a.rfind("--benchmark", 0) == 0) argv[kept++] = argv[i];
    else if (o.dir.empty() && a.rfind("-", 0) != 0) o.dir = a;
    else throw std::invalid_argument("bench_model_dir: unknown argument '" + a + "'");
  }
  argc = kept;
  if (o.dir.empty()) throw std::invalid_argument("bench_model_dir: no MODEL_DIR given");
  return o;
}

std::shared_ptr<const recur::Model> g_model;
Options g_options;

int vocab() { return g_model->config().vocab_size; }

void BM_Prefill(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0)), threads = static_cast<int>(state.range(1));
  recur::Decoder dec(g_model, {g_options.chunk, threads});
  const auto prompt = recur::bench::prompt_ids(n, vocab());
  dec.prefill(prompt);  // warm-up, untimed
  for (auto _ : state) {
    dec.reset();
    benchmark::DoNotOptimize(dec.prefill(prompt).data());
  }
  state.counters["tokens/s"] =
      benchmark::Counter(double(state.iterations()) * n, benchmark::Counter::kIsRate);
}

void BM_Decode(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0)), depth = static_cast<int>(state.range(1));
  const int threads = static_cast<int>(state.range(2));
  recur::Decoder dec(g_model, {g_options.chunk, threads});
  if (depth > 0) dec.prefill(recur::bench::prompt_ids(depth, vocab()));
  int t = 1;
  benchmark::DoNotOptimize(dec.step(t).data());  // warm-up, untimed
  for (auto _ : state) {
    for (int i = 0; i < n; ++i) {
      t = (t + 7919) % vocab();
      benchmark::DoNotOptimize(dec.step(t).data());
    }
  }
  state.counters["tokens/s"] =
      benchmark::Counter(double(state.iterations()) * n, benchmark::Counter::kIsRate);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    g_options = parse(argc, argv);
    g_model = recur::Model::load(g_options.dir);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  for (const int threads : g_options.threads) {
    for (const int n : g_options.pp)
      benchmark::RegisterBenchmark("BM_Prefill", BM_Prefill)
          ->ArgNames({"pp", "threads"})->Args({n, threads})
          ->Iterations(1)->Unit(benchmark::kMillisecond)->UseRealTime();
    if (g_options.tg > 0)
      benchmark::RegisterBenchmark("BM_Decode", BM_Decode)
          ->ArgNames({"tg", "depth", "threads"})->Args({g_options.tg, g_options.depth, threads})
          ->Iterations(1)->Unit(benchmark::kMillisecond)->UseRealTime();
  }
  benchmark::AddCustomContext("isa", recur::isa());
  benchmark::AddCustomContext("weights", g_model->weight_format());
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
