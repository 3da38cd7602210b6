// Whole RWKV-7 models at the shapes BlinkDL publishes (docs/rwkv7.md), built in memory from
// random bfloat16 weights (the published dtype), and the same weights quantized to q8: prefill
// of a 512-token prompt as a fraction of the FMA peak, decode as a multiple of the time to read
// every weight once ("x_read_time"), on 1 and 2 threads, the state's bytes, and the memory
// bandwidth of the same run.
//
//   0.4B: 24 layers of 1024, 16 heads of 64, FFN 4096, vocab 65,536, LoRA ranks 64/64/32/128
//   1.5B: 24 layers of 2048, 32 heads of 64, FFN 8192, vocab 65,536, LoRA ranks 96/96/64/256
//
// One model is in memory at a time (bench/whole_model.h): the benchmarks of a model and format
// run together and the previous model is dropped before the next is built (the q8 one is written
// to a temporary directory by recur's quantizer and loaded back). `tools/build.sh bench rwkv7` runs this and
// then eager PyTorch at the same shapes (tests/rwkv7/torch_bench.py), side by side.
#include <benchmark/benchmark.h>

#include <memory>
#include <string>
#include <vector>

#include "bench_common.h"
#include "recur/model.h"
#include "whole_model.h"

namespace {

using recur::bench::kWeightFormats;

constexpr int kPrompt = 512;
constexpr int kVocab = 65536;

struct Shape {
  const char* name;
  int hidden, heads, ffn, ranks[4];
};
constexpr Shape kShapes[] = {
    {"rwkv7-0.4B", 1024, 16, 4096, {64, 64, 32, 128}},
    {"rwkv7-1.5B", 2048, 32, 8192, {96, 96, 64, 256}},
};

std::string config_json(const Shape& s) {
  return "{\"model_type\": \"rwkv7\", \"vocab_size\": " + std::to_string(kVocab) +
         ", \"hidden_size\": " + std::to_string(s.hidden) + ", \"head_dim\": 64" +
         ", \"num_hidden_layers\": 24, \"intermediate_size\": " + std::to_string(s.ffn) +
         ", \"decay_low_rank_dim\": " + std::to_string(s.ranks[0]) +
         ", \"a_low_rank_dim\": " + std::to_string(s.ranks[1]) +
         ", \"v_low_rank_dim\": " + std::to_string(s.ranks[2]) +
         ", \"gate_low_rank_dim\": " + std::to_string(s.ranks[3]) +
         ", \"norm_eps\": 1e-05, \"tie_word_embeddings\": false}";
}

std::shared_ptr<const recur::Model> model_of(int shape, int format) {
  return recur::bench::whole_model(kShapes[shape].name, config_json(kShapes[shape]), format);
}

std::vector<int> tokens(int n) { return recur::bench::prompt_ids(n, kVocab); }

// FLOP of one prompt token: two per weight of every matrix the token passes through (all but
// the embedding, which is a row read, and the head, which prefill runs on the last token only),
// and the state update's nine per element of S (docs/delta-rule.md).
double flop_per_prompt_token(const recur::Model& m, const Shape& s) {
  const double matrices = double(m.parameters()) - 2.0 * kVocab * s.hidden;
  return 2.0 * matrices + 9.0 * 24 * s.heads * 64.0 * 64.0;
}

// A 512-token prompt from an empty state in chunks of 64, logits of the last token only.
// "peak_frac": the run's FLOP over the FMA peak of as many cores.
void BM_Rwkv7Prefill(benchmark::State& state) {
  const int shape = static_cast<int>(state.range(0)), format = static_cast<int>(state.range(1));
  const int threads = static_cast<int>(state.range(2));
  const auto model = model_of(shape, format);
  recur::Decoder dec(model, {64, threads});
  dec.prefill(tokens(64));  // warms the buffers up, untimed
  recur::bench::time_prefill(state, dec, tokens(kPrompt));
  const double n = static_cast<double>(state.iterations()) * kPrompt;
  state.SetLabel(std::string(kShapes[shape].name) + " " + kWeightFormats[format]);
  state.counters["peak_frac"] = benchmark::Counter(
      n * flop_per_prompt_token(*model, kShapes[shape]) / (recur::bench::fma_peak() * threads),
      benchmark::Counter::kIsRate);
  state.counters["state_bytes"] = static_cast<double>(dec.state_bytes());
}

// One token at a time after the prompt, full logits each step (recur::bench::time_decode:
// tokens/s, "x_read_time" against this run's bandwidth), and the state's bytes.
void BM_Rwkv7Decode(benchmark::State& state) {
  const int shape = static_cast<int>(state.range(0)), format = static_cast<int>(state.range(1));
  const int threads = static_cast<int>(state.range(2));
  const auto model = model_of(shape, format);
  recur::Decoder dec(model, {64, threads});
  dec.prefill(tokens(kPrompt));
  recur::bench::time_decode(state, dec, *model, threads, kVocab, 7);
  state.SetLabel(std::string(kShapes[shape].name) + " " + kWeightFormats[format]);
  state.counters["state_bytes"] = static_cast<double>(dec.state_bytes());
}

// Registered model by model, so that each is built once.
const int kRegistered = [] {
  recur::bench::register_memory_bandwidth();
  for (int shape = 0; shape < 2; ++shape) {
    for (int format = 0; format < 2; ++format) {
      const std::string name = std::string(kShapes[shape].name) + "/" + kWeightFormats[format];
      benchmark::RegisterBenchmark(("BM_Rwkv7Prefill/" + name).c_str(), BM_Rwkv7Prefill)
          ->ArgNames({"shape", "format", "threads"})
          ->Args({shape, format, 1})->Args({shape, format, 2})
          ->Iterations(1)->Unit(benchmark::kMillisecond)->UseRealTime();
      benchmark::RegisterBenchmark(("BM_Rwkv7Decode/" + name).c_str(), BM_Rwkv7Decode)
          ->ArgNames({"shape", "format", "threads"})
          ->Args({shape, format, 1})->Args({shape, format, 2})
          ->Iterations(8)->Unit(benchmark::kMillisecond)->UseRealTime();
    }
  }
  return 0;
}();

}  // namespace

int main(int argc, char** argv) {
  return recur::bench::run_benchmarks(argc, argv, {{"prompt_tokens", std::to_string(kPrompt)}}, true);
}
