// Qwen3.5's text model at the 0.8B and 2B shapes (docs/qwen35.md), built in memory from random
// bfloat16 weights (the published dtype), and the same weights quantized to q8: prefill of a
// 512-token prompt as a fraction of the FMA peak, decode as a multiple of the time to read every
// weight once ("x_read_time"), on 1 and 2 threads, the state's bytes after the prompt, and the
// memory bandwidth of the same run.
//
//   0.8B: 24 layers of 1024 (18 Gated DeltaNet, 6 gated attention), MLP 3584
//   2B:   24 layers of 2048, MLP 6144
//   both: 16 key and 16 value heads of 128, conv kernel 4; attention 8 heads over 2 kv heads of
//         256, rotary on 64; vocab 248,320, tied
// (the shapes tests/gdn/torch_bench.py takes from third-party copies of the Hub's config.json).
//
// One model is in memory at a time, as bench_rwkv7 does. --benchmark_filter=0.8B runs the
// smaller one alone (the 2B needs about 4 GB for its bf16 weights).
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "bench_common.h"
#include "model/random_weights.h"
#include "recur/isa.h"
#include "recur/model.h"
#include "recur/quantize.h"

namespace {

constexpr int kPrompt = 512;
constexpr int kVocab = 248320;
constexpr int kLinearLayers = 18;  // of 24 layers, every fourth attention
constexpr int kHeads = 16, kHeadDim = 128;  // the Gated DeltaNet's key and value heads
constexpr int kStreams = 4;  // decode's bandwidth: four streams per core

struct Shape {
  const char* name;
  int hidden, mlp;
};
constexpr Shape kShapes[] = {{"qwen35-0.8B", 1024, 3584}, {"qwen35-2B", 2048, 6144}};
constexpr const char* kFormats[] = {"bf16", "q8"};

std::string config_json(const Shape& s) {
  return "{\"model_type\": \"qwen3_5\", \"tie_word_embeddings\": true, \"text_config\": {"
         "\"vocab_size\": " + std::to_string(kVocab) + ", \"hidden_size\": " +
         std::to_string(s.hidden) + ", \"intermediate_size\": " + std::to_string(s.mlp) +
         ", \"num_hidden_layers\": 24, \"num_attention_heads\": 8, \"num_key_value_heads\": 2, "
         "\"head_dim\": 256, \"linear_num_key_heads\": 16, \"linear_num_value_heads\": 16, "
         "\"linear_key_head_dim\": 128, \"linear_value_head_dim\": 128, "
         "\"linear_conv_kernel_dim\": 4, \"full_attention_interval\": 4, \"rms_norm_eps\": 1e-06, "
         "\"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": 10000000, "
         "\"partial_rotary_factor\": 0.25}}}";
}

std::shared_ptr<const recur::Model> model_of(int shape, int format) {
  static int held = -1;
  static std::shared_ptr<const recur::Model> model;
  const int key = shape * 2 + format;
  if (held != key) {
    model.reset();
    const Shape& s = kShapes[shape];
    std::fprintf(stderr, "bench_gdn: building %s (%s) from random bf16 weights\n", s.name,
                 kFormats[format]);
    const auto c = recur::ModelConfig::from_json(config_json(s), s.name);
    const recur::RandomWeights weights(c, 1, recur::DType::kBF16);
    if (format == 0) {
      model = recur::Model::from_weights(c, weights);
    } else {
      namespace fs = std::filesystem;
      const fs::path dir = fs::temp_directory_path() / ("bench_gdn_q8_" + std::to_string(::getpid()));
      recur::QuantizeOptions o;
      o.format = "q8";
      recur::write_quantized_model(dir.string(), c, weights, o);
      model = recur::Model::load(dir.string());
      std::error_code ec;
      fs::remove_all(dir, ec);
    }
    held = key;
  }
  return model;
}

std::vector<int> tokens(int n) {
  std::vector<int> t(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) t[static_cast<std::size_t>(i)] = (i * 7919 + 13) % kVocab;
  return t;
}

// FLOP of one prompt token: two per weight of every matrix it passes through (not the tied
// embedding, a row read, which is the head prefill runs on the last token only), and the delta
// rule's nine per element of S (docs/delta-rule.md). The attention's scores over the cache are
// left out (about 1% at 512 tokens).
double flop_per_prompt_token(const recur::Model& m, const Shape& s) {
  const double matrices = double(m.parameters()) - double(kVocab) * s.hidden;
  return 2.0 * matrices + 9.0 * kLinearLayers * kHeads * double(kHeadDim) * kHeadDim;
}

void BM_MemoryBandwidth(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  for (auto _ : state) benchmark::DoNotOptimize(recur::bench::read_bandwidth(threads, kStreams));
  state.counters["read_GB/s"] = recur::bench::read_bandwidth(threads, kStreams) / 1e9;
}
BENCHMARK(BM_MemoryBandwidth)->ArgName("threads")->Arg(1)->Arg(2)->Iterations(1);

// A 512-token prompt from an empty state in chunks of 64, logits of the last token only.
void BM_GdnPrefill(benchmark::State& state) {
  const int shape = static_cast<int>(state.range(0)), format = static_cast<int>(state.range(1));
  const int threads = static_cast<int>(state.range(2));
  const auto model = model_of(shape, format);
  recur::Decoder dec(model, {64, threads});
  dec.prefill(tokens(64));  // warms the buffers up, untimed
  const auto prompt = tokens(kPrompt);
  for (auto _ : state) {
    dec.reset();
    benchmark::DoNotOptimize(dec.prefill(prompt).data());
  }
  const double n = static_cast<double>(state.iterations()) * kPrompt;
  state.SetLabel(std::string(kShapes[shape].name) + " " + kFormats[format]);
  state.counters["tokens/s"] = benchmark::Counter(n, benchmark::Counter::kIsRate);
  state.counters["peak_frac"] = benchmark::Counter(
      n * flop_per_prompt_token(*model, kShapes[shape]) / (recur::bench::fma_peak() * threads),
      benchmark::Counter::kIsRate);
  state.counters["state_bytes"] = static_cast<double>(dec.state_bytes());
}

// One token at a time after the prompt, full logits each step.
void BM_GdnDecode(benchmark::State& state) {
  const int shape = static_cast<int>(state.range(0)), format = static_cast<int>(state.range(1));
  const int threads = static_cast<int>(state.range(2));
  const auto model = model_of(shape, format);
  recur::Decoder dec(model, {64, threads});
  dec.prefill(tokens(kPrompt));
  int t = 1;
  for (int i = 0; i < 2; ++i) benchmark::DoNotOptimize(dec.step(t++).data());  // warm-up
  for (auto _ : state) {
    benchmark::DoNotOptimize(dec.step(t).data());
    t = (t + 7) % kVocab;
  }
  const double n = static_cast<double>(state.iterations());
  const double bytes = static_cast<double>(model->weight_bytes_per_token());
  state.SetLabel(std::string(kShapes[shape].name) + " " + kFormats[format]);
  state.counters["tokens/s"] = benchmark::Counter(n, benchmark::Counter::kIsRate);
  state.counters["weight_MB"] = bytes / 1e6;
  state.counters["x_read_time"] = benchmark::Counter(
      n * bytes / recur::bench::read_bandwidth(threads, kStreams),
      benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  state.counters["state_bytes"] = static_cast<double>(dec.state_bytes());
}

// Registered model by model, so that each is built once.
const int kRegistered = [] {
  for (int shape = 0; shape < 2; ++shape) {
    for (int format = 0; format < 2; ++format) {
      const std::string name = std::string(kShapes[shape].name) + "/" + kFormats[format];
      benchmark::RegisterBenchmark(("BM_GdnPrefill/" + name).c_str(), BM_GdnPrefill)
          ->ArgNames({"shape", "format", "threads"})
          ->Args({shape, format, 1})->Args({shape, format, 2})
          ->Iterations(1)->Unit(benchmark::kMillisecond)->UseRealTime();
      benchmark::RegisterBenchmark(("BM_GdnDecode/" + name).c_str(), BM_GdnDecode)
          ->ArgNames({"shape", "format", "threads"})
          ->Args({shape, format, 1})->Args({shape, format, 2})
          ->Iterations(8)->Unit(benchmark::kMillisecond)->UseRealTime();
    }
  }
  return 0;
}();

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::AddCustomContext("isa", recur::isa());
  benchmark::AddCustomContext("prompt_tokens", std::to_string(kPrompt));
  benchmark::AddCustomContext("fma_peak_GFLOP/s", std::to_string(recur::bench::fma_peak() / 1e9));
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
