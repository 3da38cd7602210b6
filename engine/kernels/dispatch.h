// The kernels of one instruction set, as a table of functions, and the choice of the table.
//
// engine/kernels/kernels.cpp compiles every kernel once per Highway target (AVX-512, AVX2 and
// the emulated baseline on x86-64; NEON and the emulated baseline on ARM64) and fills one table
// per target. The first call to active() picks the table: the one RECUR_ISA names when it is
// set, else the best this CPU runs. Every table computes the same bytes (docs/design.md, "One
// reduction order"); they differ only in speed.
#pragma once

#include <atomic>
#include <cstdint>
#include <string_view>
#include <string>
#include <vector>

#include "kernels/delta_kernels.h"
#include "kernels/gated_kernels.h"
#include "kernels/linear_kernels.h"
#include "kernels/quant_call.h"
#include "recur/dtype.h"

namespace recur::kernels {

/// One multiply of a PackedMatrix over its panels [p0, p1). See matmul.h for the layout.
struct MatmulCall {
  const unsigned char* data;  // (panels, k_in, 16) in `storage`, panel_stride elements apart
  std::size_t panel_stride;
  int n_out, k_in;
  DType storage;
  const float* X;
  std::int64_t rows, ldx;
  float* Y;
  std::int64_t ldy;
};

/// The chains of fma_chains: enough to fill two FMA pipes of 4 cycles' latency (8), few enough
/// that they and the two constants stay in AVX2's 16 registers. With 16 chains AVX2 kept three
/// on the stack, and the store-to-load delay in their loop halved the peak it measured.
inline constexpr int kFmaChains = 12;

struct Kernels {
  const char* name;  // "avx512vnni", "avx512", "avx2", "neon", "scalar"
  int lanes;         // floats per vector
  std::int64_t hwy_target;

  // Linear attention (linear_kernels.h).
  void (*step_head)(const HeadView& h, const float* q, const float* k, const float* v,
                    float* out, bool normalized, float eps, std::int64_t pos);
  void (*walk_head)(const HeadView& h, const float* qT, float* kT, const float* v,
                    std::int64_t vstride, float* out, std::int64_t ostride, int n,
                    bool normalized, float eps, std::int64_t pos0);
  bool (*gather_tiles)(const float* x, std::int64_t ldx, int n, int n_heads, int d, InputMap map,
                       float scale, float* tiles, std::int64_t head_stride, int Dp,
                       const RowsAhead& ahead);
  // The matrix kernel (matmul.h).
  void (*matmul)(const MatmulCall& call, int p0, int p1);
  // Elementwise maps over n floats; x and y may be the same array.
  void (*elu_plus_one)(const float* x, float* y, std::int64_t n);
  void (*relu)(const float* x, float* y, std::int64_t n);
  void (*exp_minus)(const float* x, float* y, std::int64_t n, float m);  // y = exp(x - m)
  void (*swiglu)(const float* g, const float* u, float* out, std::int64_t n);  // silu(g) * u
  void (*gelu)(const float* x, float* y, std::int64_t n);  // x / 2 * (1 + erf(x / sqrt 2))
  // The canonical sums (ops-inl.h, SumChains): of x, and of (x - c)^2.
  float (*sum)(const float* x, int n);
  float (*sum_squares)(const float* x, int n, float c);
  // The softmax KV cache's page kernels (softmax_attention.cpp).
  void (*kv_scores)(const float* q, const float* keys, const float* next, int d, int page,
                    float* scores);
  void (*kv_accumulate)(float* acc, const float* values, const float* scores, int count,
                        int dp, float correction, const float* next);
  // Benchmarks: `iters` rounds of kFmaChains independent FMA chains of full vectors; returns a
  // value that depends on all of them, so that nothing is optimized away.
  float (*fma_chains)(std::int64_t iters, float seed);
  // Sliding-window attention (window_attention.cpp). out[t] = sum_i q[i] keys[i * stride + t]
  // for t < n (n a multiple of 16), one FMA chain over i from 0 per column, the columns across
  // the lanes.
  void (*column_dots)(const float* q, const float* keys, int d, std::int64_t stride, int n,
                      float* out);
  // acc[j] = fma(w[t], rows[t * dp + j], acc[j]) for t = 0 .. count-1 in turn, every column j of
  // dp (a multiple of 16): one chain per column that continues from what acc holds.
  void (*weighted_rows)(float* acc, const float* rows, const float* w, int count, int dp);
  // Causal attention's blocked prefill (causal_attention.cpp): column_dots, the softmax and
  // weighted_rows for a tile of query rows at once, each row's chains exactly theirs, the rows'
  // scores and weights transposed (key t of row r at t * lds + r). tile_scores:
  // sT[t * lds + r] = sum_i qT[i * ldq + r] keys[i * stride + t] for r < rows (a multiple of 16),
  // t < n, one FMA chain over i from 0. tile_softmax: for r < rows (a multiple of 16), the
  // weights exp(s - m) of row r's first n[r] keys (m their max, oldest first), 0 for keys
  // n[r] .. n_max - 1, and l[r] their sum oldest first, as step() computes them.
  // tile_weighted_rows: for each r < rows, acc[r * lda + j] = fma(wT[t * ldw + r],
  // values[t * dp + j], acc[r * lda + j]) for t = 0 .. count-1 in turn, every column j of dp
  // (a multiple of 16).
  void (*tile_scores)(const float* qT, int ldq, int rows, const float* keys, std::int64_t stride,
                      int d, int n, float* sT, std::int64_t lds);
  void (*tile_softmax)(float* sT, std::int64_t lds, int rows, const std::int32_t* n, int n_max,
                       float* l);
  void (*tile_weighted_rows)(float* acc, std::int64_t lda, int rows, const float* wT,
                             std::int64_t ldw, const float* values, int count, int dp);
  // The quantized matrix kernel (quant_call.h, quant-inl.h).
  void (*matmul_q)(const QuantCall& call, int p0, int p1);
  // The activation rule of quantize_activations (quant_call.h).
  void (*quantize_x)(const float* X, std::int64_t rows, std::int64_t ldx, int k_in,
                     std::int8_t* qx, float* dx, std::int32_t* xsum);
  // The decayed recurrence (gated_kernels.h) and the gates of its models (gated_attention.h).
  void (*gated_step_head)(const GatedHeadView& h, const float* q, const float* k,
                          const float* v, const float* alpha, float gamma, float* out);
  void (*gated_walk_head)(const GatedHeadView& h, const float* qT, const float* kT,
                          const float* aT, float gamma, const float* v, std::int64_t vstride,
                          float* out, std::int64_t ostride, int n);
  void (*gla_decay)(const float* x, float* y, std::int64_t n, float normalizer, float clamp_min);
  void (*hgrn2_gates)(const float* x, const float* lb, float* alpha, float* k, std::int64_t n);
  void (*sigmoid)(const float* x, float* y, std::int64_t n);
  void (*silu)(const float* x, float* y, std::int64_t n);
  // Whether every float of a (rows, cols) block, rows `stride` apart, is finite.
  bool (*all_finite)(const float* x, std::int64_t rows, std::int64_t cols, std::int64_t stride);
  // The delta rule's walk over n tokens of one head (delta_kernels.h), unchecked.
  void (*delta_walk_head)(const DeltaHeadView& h, const DeltaInputs& x, float* y,
                          std::int64_t y_stride, int n);
};

/// The table in use (chosen on the first call).
const Kernels& active();
/// Every table compiled into this build, best first, and whether this CPU runs it.
struct Compiled {
  const Kernels* kernels;
  bool supported;
};
std::vector<Compiled> compiled();
/// The names of the tables this CPU runs, best first.
std::vector<std::string> available_names();
/// The table called `name`; throws ArgumentError, as `call`, if this build lacks it or this CPU
/// cannot run it.
const Kernels* find_isa(std::string_view name, const char* call);
/// The table in use, null before the first active(). Written by set_isa().
extern std::atomic<const Kernels*> g_active;

}  // namespace recur::kernels
