// A whole Mamba-2 model at the Mamba part of IBM Granite 4.0-H-1B's shape (docs/mamba2.md), built
// in memory from random bfloat16 weights (the published dtype) through transformers' mamba2
// layout, and the same weights quantized to q8: prefill of 512- and 4,096-token prompts as a
// fraction of the FMA peak, decode as a multiple of the time to read every weight once
// ("x_read_time"), on 1 and 2 threads, and the state's bytes.
//
//   40 Mamba-2 layers, hidden 1536, 48 heads of 64 (expand 2), d_state 128, 1 group, conv 4;
//   vocab 100,352, tied
//
// Where the shape comes from: Granite 4.0-H-1B's config.json as third-party readers quote it
// (hidden_size 1536, 40 layers of which 36 Mamba-2 and 4 attention, mamba_n_heads 48,
// mamba_d_head 64, mamba_d_state 128, mamba_n_groups 1, vocab 100,352, tied, a shared MLP of
// 4,096), with the attention layers and the MLPs left out: a pure Mamba-2 stack of 40 layers.
// The Hub itself could not be read here; a bench of the whole granitemoehybrid model is to come.
#include <benchmark/benchmark.h>

#include <memory>
#include <string>

#include "bench_common.h"
#include "recur/model.h"
#include "whole_model.h"

namespace {

using recur::bench::kWeightFormats;

constexpr int kDecodePrompt = 512;
constexpr int kPrompts[] = {512, 4096};

struct Shape {
  const char* name;
  int hidden, layers, heads, head_dim, state;
};
constexpr Shape kShapes[] = {{"granite-4.0-h-1b-mamba", 1536, 40, 48, 64, 128}};
constexpr int kVocab = 100352, kConv = 4, kGroups = 1;

std::string config_json(const Shape& s) {
  return "{\"model_type\": \"mamba2\", \"vocab_size\": " + std::to_string(kVocab) +
         ", \"hidden_size\": " + std::to_string(s.hidden) +
         ", \"num_hidden_layers\": " + std::to_string(s.layers) +
         ", \"num_heads\": " + std::to_string(s.heads) +
         ", \"head_dim\": " + std::to_string(s.head_dim) +
         ", \"state_size\": " + std::to_string(s.state) +
         ", \"n_groups\": " + std::to_string(kGroups) + ", \"expand\": 2, \"conv_kernel\": " +
         std::to_string(kConv) + ", \"tie_word_embeddings\": true}";
}

std::shared_ptr<const recur::Model> model_of(int shape, int format) {
  return recur::bench::whole_model(kShapes[shape].name, config_json(kShapes[shape]), format);
}

// FLOP of an n-token prompt, counted from the shapes: two per weight of in_proj and out_proj,
// two per tap and channel of the convolution, and the gated walk's three per element of each
// head's d_state x head_dim state (the decayed update's multiply and FMA, the read-out's FMA);
// the head on the last token only. Norms, gates and the D skip are left out.
double prompt_flop(const Shape& s, int n) {
  const double d = s.hidden, I = double(s.heads) * s.head_dim, C = I + 2.0 * kGroups * s.state;
  const double in_w = I + C + s.heads;
  const double per_layer = 2.0 * (in_w * d + d * I) + 2.0 * kConv * C + 3.0 * I * s.state;
  return n * s.layers * per_layer + 2.0 * kVocab * d;
}

std::string label(int shape, int format) {
  return std::string(kShapes[shape].name) + " " + kWeightFormats[format];
}

void state_counters(benchmark::State& state, const recur::Decoder& dec) {
  state.counters["state_bytes"] = static_cast<double>(dec.state_bytes());
}

// A prompt from an empty state in chunks of 64, logits of the last token only. "peak_frac": the
// run's FLOP (prompt_flop) over the FMA peak of as many cores.
void BM_Mamba2Prefill(benchmark::State& state) {
  const int shape = static_cast<int>(state.range(0)), format = static_cast<int>(state.range(1));
  const int n = static_cast<int>(state.range(2)), threads = static_cast<int>(state.range(3));
  const auto model = model_of(shape, format);
  recur::Decoder dec(model, {64, threads});
  dec.prefill(recur::bench::prompt_ids(64, kVocab));  // warms the buffers up, untimed
  recur::bench::time_prefill(state, dec, recur::bench::prompt_ids(n, kVocab));
  const double runs = static_cast<double>(state.iterations());
  state.SetLabel(label(shape, format));
  state.counters["peak_frac"] = benchmark::Counter(
      runs * prompt_flop(kShapes[shape], n) / (recur::bench::fma_peak() * threads),
      benchmark::Counter::kIsRate);
  state_counters(state, dec);
}

// One token at a time after the prompt, full logits each step (recur::bench::time_decode:
// tokens/s, "x_read_time" against this run's bandwidth), and the state's bytes.
void BM_Mamba2Decode(benchmark::State& state) {
  const int shape = static_cast<int>(state.range(0)), format = static_cast<int>(state.range(1));
  const int threads = static_cast<int>(state.range(2));
  const auto model = model_of(shape, format);
  recur::Decoder dec(model, {64, threads});
  dec.prefill(recur::bench::prompt_ids(kDecodePrompt, kVocab));
  recur::bench::time_decode(state, dec, *model, threads, kVocab, 7919);
  state.SetLabel(label(shape, format));
  state_counters(state, dec);
}

// Registered model by model, so that each is built once.
const int kRegistered = [] {
  recur::bench::register_memory_bandwidth();
  for (int shape = 0; shape < 1; ++shape) {
    for (int format = 0; format < 2; ++format) {
      const std::string name = std::string(kShapes[shape].name) + "/" + kWeightFormats[format];
      benchmark::RegisterBenchmark(("BM_Mamba2Decode/" + name).c_str(), BM_Mamba2Decode)
          ->ArgNames({"shape", "format", "threads"})
          ->Args({shape, format, 1})->Args({shape, format, 2})
          ->Iterations(8)->Unit(benchmark::kMillisecond)->UseRealTime();
      auto* prefill = benchmark::RegisterBenchmark(("BM_Mamba2Prefill/" + name).c_str(),
                                                   BM_Mamba2Prefill);
      prefill->ArgNames({"shape", "format", "prompt", "threads"});
      for (const int n : kPrompts) prefill->Args({shape, format, n, 1})->Args({shape, format, n, 2});
      prefill->Iterations(1)->Unit(benchmark::kMillisecond)->UseRealTime();
    }
  }
  return 0;
}();

}  // namespace

int main(int argc, char** argv) {
  return recur::bench::run_benchmarks(argc, argv, {{"decode_prompt_tokens", std::to_string(kDecodePrompt)}}, true);
}
