// The model: decode and prefill of a 12-layer linear_attn model (hidden 512, 8 heads, the
// library's default feature map, vocab 32000) on 1 and 2 threads, with float32 weights and with
// bfloat16 weights (kept as bfloat16), decode also with q8 and q4 weights, the row-invariant matrix kernel
// against Eigen's product, and memory bandwidth, all in one run, so that decode can be read
// against the time to read the weights once and the kernel against Eigen.
#include <benchmark/benchmark.h>

#include <Eigen/Core>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <thread>

#include <sched.h>
#include <time.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_common.h"
#include "kernels/matmul.h"
#include "kernels/quant.h"
#include "model/random_weights.h"
#include "models/linear/linear.h"
#include "recur/model.h"
#include "recur/quantize.h"
#include "recur/safetensors.h"
#include "recur/sampling.h"
#include "util/parallel.h"

namespace {

using recur::bench::read_bandwidth;

const recur::ModelConfig& bench_config() {
  static const recur::ModelConfig c = [] {
    recur::ModelConfig m;  // the library's defaults, at this size
    m.architecture = recur::Architecture::kLinearAttn;
    m.vocab_size = 32000;
    m.hidden_size = 512;
    m.num_hidden_layers = 12;
    m.num_heads = 8;
    m.resolve("bench");
    return m;
  }();
  return c;
}

// dtype 0: float32 weights; 1: bfloat16 weights, kept as bfloat16 in memory; 2 and 3: the same
// random weights quantized to q8 and q4 (head included) by write_quantized_model, as `recur
// quantize` writes them, and loaded back from the files.
std::shared_ptr<const recur::Model> bench_model(int dtype) {
  static std::shared_ptr<const recur::Model> models[4];
  if (!models[dtype]) {
    if (dtype >= 2) {
      const auto dir = std::filesystem::temp_directory_path() /
                       (std::string("recur-bench-model-") + (dtype == 2 ? "q8-" : "q4-") + std::to_string(getpid()));
      recur::write_quantized_model(dir.string(), bench_config(), recur::RandomWeights(bench_config(), 1),
                                   {dtype == 2 ? "q8" : "q4", ""});
      models[dtype] = recur::Model::load(dir.string());
      std::filesystem::remove_all(dir);
    } else {
      models[dtype] = recur::Model::from_weights(
          bench_config(),
          recur::RandomWeights(bench_config(), 1, dtype == 0 ? recur::DType::kF32 : recur::DType::kBF16));
    }
  }
  return models[dtype];
}

std::vector<int> tokens(int n) {
  std::vector<int> t(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) t[static_cast<std::size_t>(i)] = (i * 7919 + 13) % 32000;
  return t;
}

// Decode reads four weight panels at once, so its bandwidth is that of four streams per core.
constexpr int kStreams = 4;

void BM_MemoryBandwidth(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  const int streams = static_cast<int>(state.range(1));
  for (auto _ : state) benchmark::DoNotOptimize(read_bandwidth(threads, streams));
  state.counters["read_GB/s"] = read_bandwidth(threads, streams) / 1e9;
}
BENCHMARK(BM_MemoryBandwidth)->ArgNames({"threads", "streams"})
    ->Args({1, 1})->Args({1, 4})->Args({2, 1})->Args({2, 4})->Iterations(1);

// On a machine shared with other processes the mean of the iterations mostly measures how often
// this one waited: with --benchmark_repetitions=N, the "_min" aggregate is the fastest
// repetition, the one least disturbed.
double fastest(const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); }

// One token through the whole model after a 256-token prompt: "x_read_time" is the time per
// token over the time to read every weight once at the bandwidth measured with as many threads
// and four streams per thread (target: 1.3 or less).
void BM_ModelDecode(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  const auto model = bench_model(static_cast<int>(state.range(1)));
  recur::Decoder dec(model, {64, threads});
  dec.prefill(tokens(256));
  int t = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(dec.step(t).data());
    t = (t + 1) % 32000;
  }
  const double n = static_cast<double>(state.iterations());
  const double bytes = static_cast<double>(model->weight_bytes_per_token());
  state.counters["tokens/s"] = benchmark::Counter(n, benchmark::Counter::kIsRate);
  state.counters["weight_MB"] = bytes / 1e6;
  // Rate counters are divided by the elapsed time: this one is (read time / token time)^-1.
  state.counters["x_read_time"] =
      benchmark::Counter(n * bytes / read_bandwidth(threads, kStreams), benchmark::Counter::kIsRate |
                                                                  benchmark::Counter::kInvert);
  state.counters["bytes_held"] = static_cast<double>(dec.bytes());
}
// format: 0 f32, 1 bf16, 2 q8, 3 q4 (bench_model).
BENCHMARK(BM_ModelDecode)->ArgNames({"threads", "format"})
    ->Args({1, 0})->Args({1, 1})->Args({1, 2})->Args({1, 3})
    ->Args({2, 0})->Args({2, 1})->Args({2, 2})->Args({2, 3})
    ->ComputeStatistics("min", fastest)->Unit(benchmark::kMillisecond)->UseRealTime();

// Another process busy on one core while this one decodes: its threads must share the machine.
// 0: none; 1: a process spinning on the last CPU this one may use (as `taskset -c 1 sh -c
// 'while :; do :; done'` would); 2: a spinning process the scheduler places where it likes.
class BusyProcess {
 public:
  explicit BusyProcess(int kind) {
    if (kind == 0) return;
    cpu_set_t allowed;
    CPU_ZERO(&allowed);
    int last = -1;
    if (sched_getaffinity(0, sizeof(allowed), &allowed) == 0)
      for (int c = 0; c < CPU_SETSIZE; ++c)
        if (CPU_ISSET(c, &allowed)) last = c;
    pid_ = fork();
    if (pid_ == 0) {
      if (kind == 1 && last >= 0) {
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(last, &one);
        sched_setaffinity(0, sizeof(one), &one);
      }
      volatile unsigned long spin = 0;
      for (;;) spin = spin + 1;
    }
    // Give the scheduler a moment to place it.
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ~BusyProcess() {
    if (pid_ <= 0) return;
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  BusyProcess(const BusyProcess&) = delete;
  BusyProcess& operator=(const BusyProcess&) = delete;

 private:
  pid_t pid_ = -1;
};

// f32 decode as in BM_ModelDecode, with a busy process beside it (BusyProcess's kinds): on a
// machine with a busy core, 2 threads should decode at least as fast as 1.
void BM_DecodeBusyCore(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  const auto model = bench_model(0);
  recur::Decoder dec(model, {64, threads});
  dec.prefill(tokens(256));
  const BusyProcess busy(static_cast<int>(state.range(1)));
  int t = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(dec.step(t).data());
    t = (t + 1) % 32000;
  }
  state.counters["tokens/s"] =
      benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_DecodeBusyCore)->ArgNames({"threads", "busy"})
    ->Args({1, 0})->Args({2, 0})->Args({1, 1})->Args({2, 1})->Args({1, 2})->Args({2, 2})
    ->Unit(benchmark::kMillisecond)->UseRealTime();

// The busy-core rule as one ratio: beside a busy process (BusyProcess's kinds 1 and 2), six
// blocks of 16 tokens decoded on 1 thread and on 2 alternate (two decoders of the bench model, f32),
// so that both see the same machine. "x_2t_over_1t" is 2 threads' tokens/s over 1 thread's over
// the whole run (at least 1: two threads beside a busy core are never slower than one);
// "best_x_2t_over_1t" compares each side's fastest block.
void BM_DecodeBusyCoreRatio(benchmark::State& state) {
  using Clock = std::chrono::steady_clock;
  constexpr int kBlock = 16;
  const auto model = bench_model(0);
  recur::Decoder one(model, {64, 1}), two(model, {64, 2});
  one.prefill(tokens(256));
  two.prefill(tokens(256));
  const BusyProcess busy(static_cast<int>(state.range(0)));
  double total[2] = {0, 0}, best[2] = {1e300, 1e300};
  int t = 0;
  for (auto _ : state) {
    for (int side = 0; side < 2; ++side) {
      recur::Decoder& dec = side == 0 ? one : two;
      const auto start = Clock::now();
      for (int i = 0; i < kBlock; ++i) benchmark::DoNotOptimize(dec.step((t + i) % 32000).data());
      const double s = std::chrono::duration<double>(Clock::now() - start).count();
      total[side] += s;
      best[side] = std::min(best[side], s);
    }
    t = (t + kBlock) % 32000;
  }
  state.counters["x_2t_over_1t"] = total[0] / total[1];
  state.counters["best_x_2t_over_1t"] = best[0] / best[1];
  state.counters["ms_per_token_1t"] = 1e3 * total[0] / (kBlock * double(state.iterations()));
  state.counters["ms_per_token_2t"] = 1e3 * total[1] / (kBlock * double(state.iterations()));
}
BENCHMARK(BM_DecodeBusyCoreRatio)->ArgName("busy")->Arg(1)->Arg(2)->Arg(0)
    ->Iterations(6)->Unit(benchmark::kMillisecond)->UseRealTime();

// Batched decode: B sequences (each 256 tokens in) step together through a BatchDecoder, one
// token each per call. "x_one" compares the batch's tokens/s with one sequence's through the
// same call; prefill's tokens/s on the same threads (BM_ModelPrefill) is the ceiling.
void BM_BatchDecode(benchmark::State& state) {
  const int B = static_cast<int>(state.range(0));
  const int threads = static_cast<int>(state.range(1));
  const auto model = bench_model(0);
  std::vector<recur::Decoder> decoders;
  std::vector<recur::Decoder*> batch;
  for (int i = 0; i < B; ++i) decoders.emplace_back(model, recur::DecoderOptions{64, threads});
  for (auto& d : decoders) {
    d.prefill(tokens(256));
    batch.push_back(&d);
  }
  recur::BatchDecoder bd(model, threads);
  std::vector<int> next(static_cast<std::size_t>(B));
  int t = 0;
  for (auto _ : state) {
    for (auto& x : next) x = (t++ * 31) % 32000;
    bd.step(batch, next);
  }
  state.counters["tokens/s"] =
      benchmark::Counter(static_cast<double>(state.iterations()) * B, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_BatchDecode)->ArgNames({"batch", "threads"})
    ->Args({1, 1})->Args({16, 1})->Args({64, 1})->Args({1, 2})->Args({16, 2})->Args({64, 2})
    ->Unit(benchmark::kMillisecond)->UseRealTime();

// T prompt tokens from an empty state, in chunks of 64 (logits for the last token only).
void BM_ModelPrefill(benchmark::State& state) {
  const int T = static_cast<int>(state.range(0));
  const int threads = static_cast<int>(state.range(1));
  const auto model = bench_model(static_cast<int>(state.range(2)));
  recur::Decoder dec(model, {64, threads});
  const auto prompt = tokens(T);
  for (auto _ : state) {
    dec.reset();
    benchmark::DoNotOptimize(dec.prefill(prompt).data());
  }
  const auto& c = bench_config();
  const auto& lc = recur::models::linear::config_of(c);
  // Matrix FLOP per token (projections, feature maps, MLP); the head runs once per call.
  const double per_token =
      2.0 * c.num_hidden_layers *
      (double(c.hidden_size) * (lc.key_dim + lc.key_dim + lc.value_dim + lc.value_dim) +
       3.0 * c.hidden_size * c.intermediate_size +
       4.0 * c.num_heads * lc.head_k_dim * lc.head_k_dim);
  const double n = static_cast<double>(state.iterations()) * T;
  state.counters["tokens/s"] = benchmark::Counter(n, benchmark::Counter::kIsRate);
  state.counters["of_peak"] = benchmark::Counter(
      n * per_token / (recur::bench::fma_peak() * threads), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_ModelPrefill)->ArgNames({"T", "threads", "bf16"})
    ->Args({512, 1, 0})->Args({512, 2, 0})->Args({4096, 1, 0})->Args({4096, 2, 0})
    ->Args({4096, 1, 1})
    ->Unit(benchmark::kMillisecond)->UseRealTime();

// Y = X W^T for the model's widest projection (1536 x 512, the MLP's gate), rows = 1, 16, 64:
// our kernel in the loop, then Eigen's product (same threads) timed for as many iterations.
// "of_eigen" is Eigen's time over ours: at least 0.7 is the target at 64 rows.
void BM_MatmulRows(benchmark::State& state) {
  const int rows = static_cast<int>(state.range(0));
  const int threads = static_cast<int>(state.range(1));
  constexpr int N = 1536, K = 512;
  std::mt19937 rng(1);
  std::normal_distribution<float> nd;
  recur::RowMatrix W(N, K), X(rows, K), Y(rows, N), Ye(rows, N);
  for (Eigen::Index i = 0; i < W.size(); ++i) W.data()[i] = nd(rng);
  for (Eigen::Index i = 0; i < X.size(); ++i) X.data()[i] = nd(rng);
  const recur::kernels::PackedMatrix P(W.data(), N, K);
  const auto t0 = std::chrono::steady_clock::now();
  for (auto _ : state) {
    P.multiply(X.data(), rows, K, Y.data(), N, threads);
    benchmark::ClobberMemory();
  }
  const double ours = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  Eigen::setNbThreads(threads);
  Ye.noalias() = X * W.transpose();  // warm
  const auto t1 = std::chrono::steady_clock::now();
  for (benchmark::IterationCount i = 0; i < state.iterations(); ++i) {
    Ye.noalias() = X * W.transpose();
    benchmark::ClobberMemory();
  }
  const double eigen = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
  const double flop = 2.0 * rows * N * K * static_cast<double>(state.iterations());
  state.counters["GFLOP/s"] = flop / ours / 1e9;
  state.counters["eigen_GFLOP/s"] = flop / eigen / 1e9;
  state.counters["of_eigen"] = eigen / ours;
}
BENCHMARK(BM_MatmulRows)->ArgNames({"rows", "threads"})
    ->Args({1, 1})->Args({16, 1})->Args({64, 1})->Args({1, 2})->Args({16, 2})->Args({64, 2})
    ->UseRealTime();


// The bench model's matrices alone (per layer q, k, v, o, gate, up, down; the head), with random
// weights held as f32, bf16, q8 or q4: "decode" multiplies one row through all of them, "rows"
// takes 64 rows through the MLP's gate. x_read_time is decode's time over the time to read the
// matrices' bytes once at the bandwidth measured in the same run (four streams per thread);
// compare the formats' ms per token in one run for their ratios.
enum Format { kF32 = 0, kBF16 = 1, kQ8 = 2, kQ4 = 3 };

std::vector<recur::kernels::PackedMatrix> bench_matrices(int format, bool gate_only) {
  const auto& c = bench_config();
  std::vector<std::pair<int, int>> shapes;  // (n_out, k_in)
  if (gate_only) {
    shapes.emplace_back(c.intermediate_size, c.hidden_size);
  } else {
    const auto& lc = recur::models::linear::config_of(c);
    for (int l = 0; l < c.num_hidden_layers; ++l) {
      shapes.insert(shapes.end(), {{lc.key_dim, c.hidden_size}, {lc.key_dim, c.hidden_size},
                                   {lc.value_dim, c.hidden_size}, {c.hidden_size, lc.value_dim},
                                   {c.intermediate_size, c.hidden_size},
                                   {c.intermediate_size, c.hidden_size},
                                   {c.hidden_size, c.intermediate_size}});
    }
    shapes.emplace_back(c.vocab_size, c.hidden_size);
  }
  std::vector<recur::kernels::PackedMatrix> out;
  std::uint32_t seed = 12345;
  for (const auto& [n, k] : shapes) {
    std::vector<float> w(static_cast<std::size_t>(n) * static_cast<std::size_t>(k));
    for (float& x : w) {  // a cheap generator: the values only need to look like weights
      seed = seed * 1664525u + 1013904223u;
      x = (static_cast<float>(seed >> 8) / 16777216.0f - 0.5f) * 0.1f;
    }
    if (format == kQ8 || format == kQ4)
      out.emplace_back(recur::kernels::quantize_rows(
          w.data(), n, k, format == kQ8 ? recur::kernels::QuantType::kQ8 : recur::kernels::QuantType::kQ4));
    else
      out.emplace_back(w.data(), n, k, format == kF32 ? recur::DType::kF32 : recur::DType::kBF16);
  }
  return out;
}

void BM_WeightsDecode(benchmark::State& state) {
  const int format = static_cast<int>(state.range(0));
  const int threads = static_cast<int>(state.range(1));
  const auto mats = bench_matrices(format, false);
  const int widest = bench_config().vocab_size;
  std::vector<float> x(static_cast<std::size_t>(bench_config().intermediate_size), 0.25f);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 17) * 0.1f - 0.8f;
  std::vector<float> y(static_cast<std::size_t>(widest));
  double bytes = 0;
  for (const auto& m : mats) bytes += static_cast<double>(m.bytes());
  for (auto _ : state) {
    for (const auto& m : mats) m.multiply(x.data(), 1, m.k_in(), y.data(), m.n_out(), threads);
    benchmark::ClobberMemory();
  }
  const double n = static_cast<double>(state.iterations());
  state.counters["weight_MB"] = bytes / 1e6;
  state.counters["x_read_time"] =
      benchmark::Counter(n * bytes / read_bandwidth(threads, kStreams), benchmark::Counter::kIsRate |
                                                                  benchmark::Counter::kInvert);
}
BENCHMARK(BM_WeightsDecode)->ArgNames({"format", "threads"})
    ->Args({kF32, 1})->Args({kBF16, 1})->Args({kQ8, 1})->Args({kQ4, 1})
    ->Args({kF32, 2})->Args({kBF16, 2})->Args({kQ8, 2})->Args({kQ4, 2})
    ->ComputeStatistics("min", fastest)->Unit(benchmark::kMillisecond)->UseRealTime();

// The q8 decode kernel alone against a streaming read of as many bytes, alternating, best of
// each, on 1 or 2 threads (both through the same thread pool): "x_stream" is the kernel's time
// over the read's (1 would be the kernel at the bandwidth a plain read gets). The matrices are a
// Qwen3.5-0.8B layer's products (q, k and v, z, gate, up, down, out), 12 layers: 270 MB,
// far past the caches, as decode reads them.
void BM_Q8KernelVsStream(benchmark::State& state) {
  using Clock = std::chrono::steady_clock;
  const int threads = static_cast<int>(state.range(0));
  static const auto mats = [] {
    const std::pair<int, int> layer[] = {{6144, 1024}, {2048, 1024}, {3584, 1024}, {3584, 1024},
                                         {1024, 3584}, {1024, 2048}};
    std::vector<recur::kernels::PackedMatrix> out;
    std::uint32_t seed = 777;
    for (int copy = 0; copy < 12; ++copy)
      for (const auto& [n, k] : layer) {
        std::vector<float> w(static_cast<std::size_t>(n) * static_cast<std::size_t>(k));
        for (float& x : w) {
          seed = seed * 1664525u + 1013904223u;
          x = (static_cast<float>(seed >> 8) / 16777216.0f - 0.5f) * 0.1f;
        }
        out.emplace_back(recur::kernels::quantize_rows(w.data(), n, k, recur::kernels::QuantType::kQ8));
      }
    return out;
  }();
  std::size_t bytes = 0;
  for (const auto& m : mats) bytes += m.bytes();
  static std::vector<std::uint64_t> stream(bytes / 8 + 1, 1);
  std::vector<float> x(3584), y(6144);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 17) * 0.1f - 0.8f;
  const auto read_stream = [&] {
    std::uint64_t sums[2] = {0, 0};
    recur::detail::parallel_ranges(static_cast<int>(stream.size() / 64), threads, [&](int b, int e, int r) {
      std::uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
      for (std::size_t i = std::size_t(b) * 64; i < std::size_t(e) * 64; i += 4) {
        a0 ^= stream[i];
        a1 ^= stream[i + 1];
        a2 ^= stream[i + 2];
        a3 ^= stream[i + 3];
      }
      sums[r] = a0 ^ a1 ^ a2 ^ a3;
    });
    benchmark::DoNotOptimize(sums[0] ^ sums[1]);
  };
  // The process's CPU time beside the real time: on a machine shared with other work, the time
  // the threads actually ran (waits for the next job spin, and count, the same for both).
  const auto cpu = [] {
    timespec ts{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
  };
  double best_kernel = 1e300, best_stream = 1e300, cpu_kernel = 1e300, cpu_stream = 1e300;
  for (auto _ : state) {
    auto t0 = Clock::now();
    double c0 = cpu();
    for (const auto& m : mats) m.multiply(x.data(), 1, m.k_in(), y.data(), m.n_out(), threads);
    benchmark::ClobberMemory();
    best_kernel = std::min(best_kernel, std::chrono::duration<double>(Clock::now() - t0).count());
    cpu_kernel = std::min(cpu_kernel, cpu() - c0);
    t0 = Clock::now();
    c0 = cpu();
    read_stream();
    best_stream = std::min(best_stream, std::chrono::duration<double>(Clock::now() - t0).count());
    cpu_stream = std::min(cpu_stream, cpu() - c0);
  }
  state.counters["weight_MB"] = static_cast<double>(bytes) / 1e6;
  state.counters["kernel_GB/s"] = static_cast<double>(bytes) / best_kernel / 1e9;
  state.counters["stream_GB/s"] = static_cast<double>(bytes) / best_stream / 1e9;
  state.counters["x_stream"] = best_kernel / best_stream;
  state.counters["x_stream_cpu"] = cpu_kernel / cpu_stream;
}
BENCHMARK(BM_Q8KernelVsStream)->ArgName("threads")->Arg(1)->Arg(2)->Iterations(12)
    ->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_WeightsRows(benchmark::State& state) {
  const int format = static_cast<int>(state.range(0));
  const int rows = static_cast<int>(state.range(1));
  const auto mats = bench_matrices(format, true);
  const auto& m = mats[0];
  std::vector<float> X(static_cast<std::size_t>(rows) * static_cast<std::size_t>(m.k_in()));
  for (std::size_t i = 0; i < X.size(); ++i) X[i] = static_cast<float>(i % 23) * 0.1f - 1.1f;
  std::vector<float> Y(static_cast<std::size_t>(rows) * static_cast<std::size_t>(m.n_out()));
  for (auto _ : state) {
    m.multiply(X.data(), rows, m.k_in(), Y.data(), m.n_out(), 1);
    benchmark::ClobberMemory();
  }
  // Multiply-adds per second, counted as 2 FLOP, whatever the format.
  state.counters["GFLOP/s"] = benchmark::Counter(
      2.0 * rows * m.n_out() * m.k_in() * static_cast<double>(state.iterations()) / 1e9,
      benchmark::Counter::kIsRate);
}
BENCHMARK(BM_WeightsRows)->ArgNames({"format", "rows"})
    ->Args({kF32, 64})->Args({kBF16, 64})->Args({kQ8, 64})->Args({kQ4, 64})
    ->Args({kQ8, 16})->Args({kQ4, 16})->Args({kF32, 1})->Args({kQ8, 1})->Args({kQ4, 1})
    ->UseRealTime();

// Opening a sharded checkpoint whose index lists N tensors: each listed name is looked up once,
// so the time per tensor stays flat as N grows (a scan of the whole map per tensor made it grow
// with N). The shards are tiny; the index is the work.
void BM_OpenShardedIndex(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  const auto dir = std::filesystem::temp_directory_path() / ("recur-bench-index-" + std::to_string(n));
  std::filesystem::create_directories(dir);
  const float one = 1.0f;
  std::string index = "{\"weight_map\": {";
  for (int shard = 0; shard < 2; ++shard) {
    std::vector<recur::TensorData> tensors;
    std::vector<std::string> names;
    for (int i = shard; i < n; i += 2) names.push_back("model.layers." + std::to_string(i) + ".w");
    for (const auto& name : names) tensors.push_back({name, {1}, &one});
    const std::string file = "model-0000" + std::to_string(shard + 1) + "-of-00002.safetensors";
    recur::write_safetensors((dir / file).string(), tensors, recur::DType::kF32);
    for (const auto& name : names) index += (index.back() == '{' ? "\"" : ", \"") + name + "\": \"" + file + "\"";
  }
  index += "}}";
  std::ofstream(dir / "model.safetensors.index.json") << index;
  for (auto _ : state) benchmark::DoNotOptimize(recur::TensorStore::open_dir(dir.string()));
  state.counters["tensors_per_s"] = benchmark::Counter(n, benchmark::Counter::kIsIterationInvariantRate);
  std::filesystem::remove_all(dir);
}
BENCHMARK(BM_OpenShardedIndex)->Arg(1000)->Arg(10000)->Arg(100000)->Unit(benchmark::kMillisecond);

// One draw from logits of Qwen3.5's vocabulary (248,320 ids; a random model's logits, normal
// with sigma 2) at temperature 1: top_k 0 with top_p 1 (recur serve's OpenAI default) or 0.95,
// and top_k 40 (the library's default); on 1 thread and 2 (the same draws). BM_SampleFullSort is
// the same draw written as a sort of the whole vocabulary, the way the sampler drew before (the
// cost the partial ranking removes).
Eigen::VectorXf vocab_logits(int vocab) {
  std::mt19937 rng(3);
  std::normal_distribution<float> d(0.0f, 2.0f);
  Eigen::VectorXf l(vocab);
  for (auto& x : l) x = d(rng);
  return l;
}

void BM_Sample(benchmark::State& state) {
  const Eigen::VectorXf l = vocab_logits(int(state.range(0)));
  recur::SamplerOptions o;
  o.temperature = 1.0f;
  o.top_k = int(state.range(1));
  o.top_p = float(state.range(2)) / 100.0f;
  o.threads = int(state.range(3));
  recur::Sampler s(o);
  for (auto _ : state) benchmark::DoNotOptimize(s.sample(l, {}));
}
BENCHMARK(BM_Sample)->ArgNames({"vocab", "top_k", "top_p%", "threads"})
    ->Args({248320, 0, 100, 1})->Args({248320, 0, 95, 1})->Args({248320, 40, 95, 1})
    ->Args({248320, 0, 100, 2})->Args({248320, 0, 95, 2})
    ->Unit(benchmark::kMillisecond);

void BM_SampleFullSort(benchmark::State& state) {
  const Eigen::VectorXf l = vocab_logits(int(state.range(0)));
  std::vector<int> order(std::size_t(l.size()));
  std::vector<double> p(order.size());
  for (auto _ : state) {
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = int(i);
    std::sort(order.begin(), order.end(), [&](int a, int b) { return l[a] != l[b] ? l[a] > l[b] : a < b; });
    const double top = double(l[order[0]]);
    double sum = 0.0;
    for (std::size_t i = 0; i < order.size(); ++i) sum += p[i] = std::exp(double(l[order[i]]) - top);
    benchmark::DoNotOptimize(sum);
  }
}
BENCHMARK(BM_SampleFullSort)->ArgName("vocab")->Arg(248320)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
