// A whole LFM2 model at LFM2-1.2B's shape (docs/lfm2.md), built in memory from random bfloat16
// weights (the published dtype) through the first config form, and the same weights quantized
// to q8: prefill of 512- and 4,096-token prompts as a fraction of the FMA peak, decode as a
// multiple of the time to read every weight once ("x_read_time"), on 1 and 2 threads, and the
// state's bytes (the convolutions' constant part and the attention layers' KV cache) after each
// prompt.
//
//   LFM2-1.2B: 16 layers, attention at 2, 5, 8, 10, 12, 14 (6), gated short convolutions at the
//   other 10 (3 taps); hidden 2048; attention 32 heads over 8 kv heads of 64, rope_theta 1e6;
//   block_ff_dim 12288 adjusted to an MLP of 8192; vocab 65,536, tied.
//
// Where the shape comes from: LFM2-1.2B's config.json as third-party code quotes it (its keys
// retyped; no verbatim copy was found, tests/fixtures/published/SOURCES.md), and transformers'
// Lfm2Config, whose defaults are LFM2-1.2B's but for the width and depth.
//
// One model is in memory at a time (bench/whole_model.h).
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
constexpr const char* kName = "lfm2-1.2B";
constexpr int kHidden = 2048, kLayers = 16, kAttnLayers = 6, kMlp = 8192, kVocab = 65536;
constexpr int kHeads = 32, kKvHeads = 8, kHeadDim = 64, kTaps = 3;

std::string config_json() {
  return "{\"model_type\": \"lfm2\", \"vocab_size\": " + std::to_string(kVocab) +
         ", \"hidden_size\": " + std::to_string(kHidden) +
         ", \"num_hidden_layers\": " + std::to_string(kLayers) +
         ", \"num_attention_heads\": " + std::to_string(kHeads) +
         ", \"num_key_value_heads\": " + std::to_string(kKvHeads) +
         ", \"conv_L_cache\": " + std::to_string(kTaps) +
         ", \"block_ff_dim\": 12288, \"block_auto_adjust_ff_dim\": true, "
         "\"block_ffn_dim_multiplier\": 1.0, \"block_multiple_of\": 256, \"norm_eps\": 1e-05, "
         "\"full_attn_idxs\": [2, 5, 8, 10, 12, 14], \"rope_theta\": 1000000.0}";
}

std::shared_ptr<const recur::Model> model_of(int format) {
  return recur::bench::whole_model(kName, config_json(), format);
}

// FLOP of an n-token prompt from an empty state, counted from the shapes:
//  - two per weight of every matrix each token passes through: the MLP (w1, w3, w2), the
//    convolution blocks' in_proj (3 d x d) and out_proj, the attention's q, k, v and out_proj;
//  - the depthwise convolution, two per tap and channel;
//  - the attention's scores and weighted values, 2 x 2 x heads x head_dim per position of the
//    context, which grows with the prompt;
//  - the head (the tied embedding) on the last token only, as prefill computes its logits.
// Norms, the gates B x and C y and the softmax's exponentials are left out.
double prompt_flop(int n) {
  const double d = kHidden, hd = double(kHeads) * kHeadDim, kv = double(kKvHeads) * kHeadDim;
  const int n_conv = kLayers - kAttnLayers;
  const double per_token = 2.0 * (kLayers * 3.0 * d * kMlp + n_conv * 4.0 * d * d +
                                  kAttnLayers * (2 * hd * d + 2 * kv * d)) +
                           n_conv * 2.0 * kTaps * d;
  const double context = double(n) * (n + 1) / 2;
  return n * per_token + kAttnLayers * 4.0 * hd * context + 2.0 * kVocab * d;
}

void state_counters(benchmark::State& state, const recur::Decoder& dec) {
  state.counters["state_bytes"] = static_cast<double>(dec.state_bytes());
  state.counters["conv_bytes"] = static_cast<double>(dec.state_bytes(recur::MixerKind::kShortConv));
  state.counters["kv_bytes"] = static_cast<double>(dec.state_bytes(recur::MixerKind::kAttention));
}

// A prompt from an empty state in chunks of 64, logits of the last token only.
void BM_Lfm2Prefill(benchmark::State& state) {
  const int format = static_cast<int>(state.range(0)), n = static_cast<int>(state.range(1));
  const int threads = static_cast<int>(state.range(2));
  const auto model = model_of(format);
  recur::Decoder dec(model, {64, threads});
  dec.prefill(recur::bench::prompt_ids(64, kVocab));  // warms the buffers up, untimed
  recur::bench::time_prefill(state, dec, recur::bench::prompt_ids(n, kVocab));
  const double runs = static_cast<double>(state.iterations());
  state.SetLabel(std::string(kName) + " " + kWeightFormats[format]);
  state.counters["peak_frac"] = benchmark::Counter(
      runs * prompt_flop(n) / (recur::bench::fma_peak() * threads), benchmark::Counter::kIsRate);
  state_counters(state, dec);
}

// One token at a time after the prompt, full logits each step (recur::bench::time_decode:
// tokens/s, "x_read_time" against this run's bandwidth), and the state's bytes.
void BM_Lfm2Decode(benchmark::State& state) {
  const int format = static_cast<int>(state.range(0)), threads = static_cast<int>(state.range(1));
  const auto model = model_of(format);
  recur::Decoder dec(model, {64, threads});
  dec.prefill(recur::bench::prompt_ids(kDecodePrompt, kVocab));
  recur::bench::time_decode(state, dec, *model, threads, kVocab, 7919);
  state.SetLabel(std::string(kName) + " " + kWeightFormats[format]);
  state_counters(state, dec);
}

// Registered format by format, so that each model is built once.
const int kRegistered = [] {
  recur::bench::register_memory_bandwidth();
  for (int format = 0; format < 2; ++format) {
    const std::string name = std::string(kName) + "/" + kWeightFormats[format];
    benchmark::RegisterBenchmark(("BM_Lfm2Decode/" + name).c_str(), BM_Lfm2Decode)
        ->ArgNames({"format", "threads"})
        ->Args({format, 1})->Args({format, 2})
        ->Iterations(16)->Unit(benchmark::kMillisecond)->UseRealTime();
    auto* prefill = benchmark::RegisterBenchmark(("BM_Lfm2Prefill/" + name).c_str(), BM_Lfm2Prefill);
    prefill->ArgNames({"format", "prompt", "threads"});
    for (const int n : kPrompts) prefill->Args({format, n, 1})->Args({format, n, 2});
    prefill->Iterations(1)->Unit(benchmark::kMillisecond)->UseRealTime();
  }
  return 0;
}();

}  // namespace

int main(int argc, char** argv) {
  return recur::bench::run_benchmarks(argc, argv, {{"decode_prompt_tokens", std::to_string(kDecodePrompt)}}, true);
}
