// Whole models at the exact shapes of flash-linear-attention's gla-1.3B-100B and
// hgrn2-1.3B-100B (docs/fla-models.md), built in memory from random bfloat16 weights (kept as
// bfloat16, the published dtype): prefill of a 512-token prompt and decode, on 1 and 2 threads,
// the state's bytes, and the memory bandwidth of the same run, so that decode reads as a
// multiple of the time to read every weight once ("x_read_time").
//
//   gla-1.3B:   D 2048, 24 layers, 4 heads, expand_k 0.5, expand_v 1 (dk 256, dv 512), output
//               gate, MLP 5632, vocab 32000, untied
//   hgrn2-1.3B: D 2048, 24 layers, expand_ratio 128 (16 heads of 128 x 128), lower bounds,
//               MLP 5632, vocab 32000, untied
//
// One model is in memory at a time (2.7 GB each): the benchmarks of a model run together and
// the previous model is dropped before the next is built. `tools/build.sh bench fla` runs this
// and then PyTorch at the same shapes (tests/fla/torch_bench.py) and prints both side by side.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "bench_common.h"
#include "model/random_weights.h"
#include "recur/model.h"
#include "whole_model.h"

namespace {

constexpr int kPrompt = 512;
constexpr int kVocab = 32000;

struct Shape {
  const char* name;
  const char* json;  // config.json as the hub's file gives it (the fields that matter)
};
constexpr Shape kShapes[] = {
    {"gla-1.3B",
     R"({"model_type": "gla", "vocab_size": 32000, "hidden_size": 2048, "num_hidden_layers": 24,
         "num_heads": 4, "expand_k": 0.5, "expand_v": 1, "hidden_ratio": 4,
         "use_short_conv": false, "use_output_gate": true, "tie_word_embeddings": false})"},
    {"hgrn2-1.3B",
     R"({"model_type": "hgrn2", "vocab_size": 32000, "hidden_size": 2048, "num_hidden_layers": 24,
         "expand_ratio": 128, "hidden_ratio": 4, "use_lower_bound": true,
         "use_short_conv": false, "tie_word_embeddings": false})"},
};

// The one model in memory: asking for another drops this one first.
std::shared_ptr<const recur::Model> model_of(int shape) {
  static int held = -1;
  static std::shared_ptr<const recur::Model> model;
  if (held != shape) {
    model.reset();
    const Shape& s = kShapes[shape];
    std::fprintf(stderr, "bench_fla: building %s from random bf16 weights\n", s.name);
    const auto c = recur::ModelConfig::from_json(s.json, s.name);
    model = recur::Model::from_weights(c, recur::RandomWeights(c, 1, recur::DType::kBF16));
    held = shape;
  }
  return model;
}

std::vector<int> tokens(int n) {
  std::vector<int> t(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) t[static_cast<std::size_t>(i)] = (i * 7919 + 13) % kVocab;
  return t;
}

// A 512-token prompt from an empty state in chunks of 64, the head on the last token only (as
// torch_bench.py's prefill). A 64-token prefill first warms the buffers up, untimed.
void BM_FlaPrefill(benchmark::State& state) {
  const int shape = static_cast<int>(state.range(0));
  const int threads = static_cast<int>(state.range(1));
  const auto model = model_of(shape);
  recur::Decoder dec(model, {64, threads});
  dec.prefill(tokens(64));
  dec.reset();
  recur::bench::time_prefill(state, dec, tokens(kPrompt));
  state.SetLabel(kShapes[shape].name);
  state.counters["state_bytes"] = static_cast<double>(dec.state_bytes());
}

// One token at a time after the prompt, full logits each step (recur::bench::time_decode:
// tokens/s, "x_read_time" against this run's bandwidth), and the state's bytes.
void BM_FlaDecode(benchmark::State& state) {
  const int shape = static_cast<int>(state.range(0));
  const int threads = static_cast<int>(state.range(1));
  const auto model = model_of(shape);
  recur::Decoder dec(model, {64, threads});
  dec.prefill(tokens(kPrompt));
  recur::bench::time_decode(state, dec, *model, threads, kVocab, 7);
  state.SetLabel(kShapes[shape].name);
  state.counters["state_bytes"] = static_cast<double>(dec.state_bytes());
}

// Registered model by model, so that each is built once.
const int kRegistered = [] {
  recur::bench::register_memory_bandwidth();
  for (int shape = 0; shape < 2; ++shape) {
    const std::string name = kShapes[shape].name;
    benchmark::RegisterBenchmark(("BM_FlaPrefill/" + name).c_str(), BM_FlaPrefill)
        ->ArgNames({"shape", "threads"})->Args({shape, 1})->Args({shape, 2})
        ->Iterations(1)->Unit(benchmark::kMillisecond)->UseRealTime();
    benchmark::RegisterBenchmark(("BM_FlaDecode/" + name).c_str(), BM_FlaDecode)
        ->ArgNames({"shape", "threads"})->Args({shape, 1})->Args({shape, 2})
        ->Iterations(6)->Unit(benchmark::kMillisecond)->UseRealTime();
  }
  return 0;
}();

}  // namespace

int main(int argc, char** argv) {
  return recur::bench::run_benchmarks(argc, argv, {{"prompt_tokens", std::to_string(kPrompt)}});
}
