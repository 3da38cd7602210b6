// Whole Qwen3.5 text models at the shapes of Qwen3.5-0.8B and -2B (docs/qwen35.md), built in
// memory from random bfloat16 weights (the published dtype) through the text-only layout
// (`qwen3_5_text`), and the same weights quantized to q8: prefill of 512- and 4,096-token
// prompts as a fraction of the FMA peak, decode as a multiple of the time to read every weight
// once ("x_read_time"), on 1 and 2 threads, and the state's bytes (the Gated DeltaNet layers'
// constant part and the attention layers' KV cache) after each prompt.
//
//   both: 24 layers, 3 Gated DeltaNet : 1 gated attention (18 + 6), linear attention 16 key and
//         16 value heads of 128, conv kernel 4; attention 8 heads over 2 kv heads of 256,
//         partial_rotary_factor 0.25 (64 rotary dims), rope_theta 1e7; vocab 248,320, tied
//   0.8B: hidden 1024, MLP 3584          2B: hidden 2048, MLP 6144
//
// Where the shapes come from: the text_config of the Hub's Qwen/Qwen3.5-0.8B and -2B
// config.json files as third-party readers quote them; the Hub itself could not be read here.
// tests/gdn/torch_bench.py (the PyTorch side) uses the same values; they should be checked
// against the real files before the figures are quoted as those models'.
//
// One model is in memory at a time (bench/whole_model.h). `tools/build.sh bench qwen35` runs
// this and then eager PyTorch at the same shapes (bench/qwen35_reference.py), side by side.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <memory>
#include <string>
#include <vector>

#include "bench_common.h"
#include "recur/model.h"
#include "whole_model.h"

namespace {

using recur::bench::kWeightFormats;

constexpr int kDecodePrompt = 512;
constexpr int kPrompts[] = {512, 4096};

struct Shape {
  const char* name;
  int hidden, ffn;
};
constexpr Shape kShapes[] = {
    {"qwen35-0.8B", 1024, 3584},
    {"qwen35-2B", 2048, 6144},
};
// The rest is common to both shapes.
constexpr int kLayers = 24, kInterval = 4, kVocab = 248320;
constexpr int kKeyHeads = 16, kValueHeads = 16, kLinearHeadDim = 128, kConv = 4;
constexpr int kHeads = 8, kKvHeads = 2, kHeadDim = 256;

std::string config_json(const Shape& s) {
  return "{\"model_type\": \"qwen3_5_text\", \"vocab_size\": " + std::to_string(kVocab) +
         ", \"hidden_size\": " + std::to_string(s.hidden) +
         ", \"intermediate_size\": " + std::to_string(s.ffn) +
         ", \"num_hidden_layers\": " + std::to_string(kLayers) +
         ", \"num_attention_heads\": " + std::to_string(kHeads) +
         ", \"num_key_value_heads\": " + std::to_string(kKvHeads) +
         ", \"head_dim\": " + std::to_string(kHeadDim) +
         ", \"full_attention_interval\": " + std::to_string(kInterval) +
         ", \"linear_num_key_heads\": " + std::to_string(kKeyHeads) +
         ", \"linear_num_value_heads\": " + std::to_string(kValueHeads) +
         ", \"linear_key_head_dim\": " + std::to_string(kLinearHeadDim) +
         ", \"linear_value_head_dim\": " + std::to_string(kLinearHeadDim) +
         ", \"linear_conv_kernel_dim\": " + std::to_string(kConv) +
         ", \"rms_norm_eps\": 1e-06, \"hidden_act\": \"silu\", \"tie_word_embeddings\": true" +
         ", \"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": 10000000, "
         "\"partial_rotary_factor\": 0.25}}";
}

std::shared_ptr<const recur::Model> model_of(int shape, int format) {
  return recur::bench::whole_model(kShapes[shape].name, config_json(kShapes[shape]), format);
}

// FLOP of an n-token prompt from an empty state, counted from the shapes (not from the model's
// parameter count, which holds the embedding):
//  - two per weight of every matrix each token passes through: the MLP, the Gated DeltaNet's
//    in_proj_qkv, in_proj_z, in_proj_a, in_proj_b and out_proj, the attention's q (query and
//    gate), k, v and o;
//  - the depthwise convolution, two per tap and channel;
//  - the delta rule's nine per element of each head's d_v x d_k state, as recur's kernel runs it
//    (docs/delta-rule.md: S a, the decay, the rank-one correction, v k^T and the read-out S q);
//  - the attention's scores and weighted values, 2 x 2 x heads x head_dim per position of the
//    context, which grows with the prompt: at 4,096 tokens they are no longer small;
//  - the head (the tied embedding) on the last token only, as prefill computes its logits.
// Norms, gates and the softmax's exponentials are left out (a few per activation, not per weight).
double prompt_flop(const Shape& s, int n) {
  const double d = s.hidden, K = kKeyHeads * kLinearHeadDim, V = kValueHeads * kLinearHeadDim;
  const double hd = double(kHeads) * kHeadDim, kv = double(kKvHeads) * kHeadDim;
  const double mlp = 3.0 * d * s.ffn;
  const double gdn_mat = (2 * K + V) * d + V * d + 2.0 * kValueHeads * d + d * V;
  const double attn_mat = 2 * hd * d + 2 * kv * d + d * hd;
  const int n_attn = kLayers / kInterval, n_gdn = kLayers - n_attn;
  const double per_token = 2.0 * (kLayers * mlp + n_gdn * gdn_mat + n_attn * attn_mat) +
                           n_gdn * (2.0 * kConv * (2 * K + V) +
                                    9.0 * kValueHeads * kLinearHeadDim * kLinearHeadDim);
  const double context = double(n) * (n + 1) / 2;  // sum over tokens of the positions they see
  return n * per_token + n_attn * 4.0 * hd * context + 2.0 * kVocab * d;
}

std::string label(int shape, int format) {
  return std::string(kShapes[shape].name) + " " + kWeightFormats[format];
}

void state_counters(benchmark::State& state, const recur::Decoder& dec) {
  state.counters["state_bytes"] = static_cast<double>(dec.state_bytes());
  state.counters["recurrent_bytes"] =
      static_cast<double>(dec.state_bytes(recur::MixerKind::kDeltaRule));
  state.counters["kv_bytes"] = static_cast<double>(dec.state_bytes(recur::MixerKind::kAttention));
}

// A prompt from an empty state in chunks of 64, logits of the last token only. "peak_frac": the
// run's FLOP (prompt_flop) over the FMA peak of as many cores.
void BM_Qwen35Prefill(benchmark::State& state) {
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

// How a prompt's cost per token grows with its length: prompts of 512 and 4,096 tokens from an
// empty state (chunks of 64, as BM_Qwen35Prefill), alternated kRatioRounds times in one run, the
// best time per token of each kept. "long_over_short" is 4,096's best per token over 512's (1.0:
// no growth; the attention layers' work per token grows with the context, the rest does not);
// "us/token_512" and "us/token_4096" are the two bests, "peak_frac_512" and "peak_frac_4096" their
// FLOP (prompt_flop) over the FMA peak of as many cores. The cpu_ counters are the same from the
// process's CPU time (all threads): on a machine shared with other work they measure recur's
// own cost, and on two threads they count a helper's waits as work.
constexpr int kRatioRounds = 2;

// This process's CPU time in seconds (every thread's): on a shared machine the wall time of a
// run also holds the time other processes had the cores.
double cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// The FMA peak of one core by CPU time, as fma_peak() measures it by wall time (best of ten):
// what the cpu_ counters divide by, so that both sides of their fraction leave out the time
// other processes had the core.
double cpu_fma_peak() {
  static const double peak = [] {
    double best = 0;
    for (int r = 0; r < 10; ++r) {
      const double c0 = cpu_seconds();
      const double flop = recur::bench::fma_loop(4'000'000);
      best = std::max(best, flop / (cpu_seconds() - c0));
    }
    return best;
  }();
  return peak;
}

void BM_FmaPeakCpu(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(cpu_fma_peak());
  state.counters["cpu_fma_peak_GFLOP/s"] = cpu_fma_peak() / 1e9;
  state.counters["fma_peak_GFLOP/s"] = recur::bench::fma_peak() / 1e9;
}

void BM_Qwen35PrefillGrowth(benchmark::State& state) {
  const int shape = static_cast<int>(state.range(0)), format = static_cast<int>(state.range(1));
  const int threads = static_cast<int>(state.range(2));
  const auto model = model_of(shape, format);
  recur::Decoder dec(model, {64, threads});
  dec.prefill(recur::bench::prompt_ids(64, kVocab));  // warms the buffers up, untimed
  struct Best {
    double wall = 1e30, cpu = 1e30;  // seconds per token
  };
  const auto run = [&](const std::vector<int>& prompt, Best& best) {
    dec.reset();
    const double c0 = cpu_seconds();
    const auto t0 = std::chrono::steady_clock::now();
    benchmark::DoNotOptimize(dec.prefill(prompt).data());
    const std::chrono::duration<double> s = std::chrono::steady_clock::now() - t0;
    const double n = static_cast<double>(prompt.size());
    best.wall = std::min(best.wall, s.count() / n);
    best.cpu = std::min(best.cpu, (cpu_seconds() - c0) / n);
  };
  const auto short_prompt = recur::bench::prompt_ids(kPrompts[0], kVocab);
  const auto long_prompt = recur::bench::prompt_ids(kPrompts[1], kVocab);
  Best short_best, long_best;
  for (auto _ : state)
    for (int round = 0; round < kRatioRounds; ++round) {
      run(short_prompt, short_best);
      run(long_prompt, long_best);
    }
  state.SetLabel(label(shape, format));
  state.counters["long_over_short"] = long_best.wall / short_best.wall;
  state.counters["cpu_long_over_short"] = long_best.cpu / short_best.cpu;
  state.counters["us/token_512"] = short_best.wall * 1e6;
  state.counters["us/token_4096"] = long_best.wall * 1e6;
  // The FMA peak's fraction at each length, from the best wall times (as BM_Qwen35Prefill
  // counts it) and from the best CPU times over the peak by CPU time (the work alone, whatever
  // else the machine ran; all threads' CPU time, so a helper's waits count as work).
  const double peak = recur::bench::fma_peak() * threads;
  const auto& s = kShapes[shape];
  const double flop_short = prompt_flop(s, kPrompts[0]) / kPrompts[0];
  const double flop_long = prompt_flop(s, kPrompts[1]) / kPrompts[1];
  state.counters["peak_frac_512"] = flop_short / (short_best.wall * peak);
  state.counters["peak_frac_4096"] = flop_long / (long_best.wall * peak);
  state.counters["cpu_peak_frac_512"] = flop_short / (short_best.cpu * cpu_fma_peak());
  state.counters["cpu_peak_frac_4096"] = flop_long / (long_best.cpu * cpu_fma_peak());
  state.counters["cpu_fma_peak_GFLOP/s"] = cpu_fma_peak() / 1e9;
}

// One token at a time after the prompt, full logits each step (recur::bench::time_decode:
// tokens/s, "x_read_time" against this run's bandwidth), and the state's bytes.
void BM_Qwen35Decode(benchmark::State& state) {
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
  benchmark::RegisterBenchmark("BM_FmaPeakCpu", BM_FmaPeakCpu)->Iterations(1);
  for (int shape = 0; shape < 2; ++shape) {
    for (int format = 0; format < 2; ++format) {
      const std::string name = std::string(kShapes[shape].name) + "/" + kWeightFormats[format];
      benchmark::RegisterBenchmark(("BM_Qwen35Decode/" + name).c_str(), BM_Qwen35Decode)
          ->ArgNames({"shape", "format", "threads"})
          ->Args({shape, format, 1})->Args({shape, format, 2})
          ->Iterations(8)->Unit(benchmark::kMillisecond)->UseRealTime();
      auto* prefill = benchmark::RegisterBenchmark(("BM_Qwen35Prefill/" + name).c_str(),
                                                   BM_Qwen35Prefill);
      prefill->ArgNames({"shape", "format", "prompt", "threads"});
      for (const int n : kPrompts) prefill->Args({shape, format, n, 1})->Args({shape, format, n, 2});
      prefill->Iterations(1)->Unit(benchmark::kMillisecond)->UseRealTime();
      benchmark::RegisterBenchmark(("BM_Qwen35PrefillGrowth/" + name).c_str(),
                                   BM_Qwen35PrefillGrowth)
          ->ArgNames({"shape", "format", "threads"})
          ->Args({shape, format, 1})->Args({shape, format, 2})
          ->Iterations(1)->Unit(benchmark::kMillisecond)->UseRealTime();
    }
  }
  return 0;
}();

}  // namespace

int main(int argc, char** argv) {
  return recur::bench::run_benchmarks(argc, argv, {{"decode_prompt_tokens", std::to_string(kDecodePrompt)}}, true);
}
