// Every kernel, compiled once per instruction set through Highway's foreach_target, and the
// run-time choice among them (dispatch.h).
//
// Highway compiles this file once per target in HWY_TARGETS (set in CMakeLists.txt: AVX-512
// with VNNI, AVX-512, AVX2 and the emulated baseline on x86-64; NEON and the emulated baseline
// on ARM64), each in its own namespace with that target's instruction set enabled for those
// functions only. The rest of the library is compiled for the baseline, so the binary runs on
// any CPU of its architecture.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/kernels.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "hwy/cache_control.h"
#include "hwy/highway.h"
#include "kernels/delta-inl.h"
#include "kernels/dispatch.h"
#include "kernels/gated-inl.h"
#include "kernels/linear-inl.h"
#include "kernels/matmul-inl.h"
#include "kernels/ops-inl.h"
#include "kernels/quant-inl.h"

HWY_BEFORE_NAMESPACE();
namespace recur::kernels {
namespace HWY_NAMESPACE {

void EluPlusOne(const float* x, float* y, std::int64_t n) {
  Map(x, y, n, [](VF v) { return EluPlusOneOf(v); });
}

void Relu(const float* x, float* y, std::int64_t n) {
  Map(x, y, n, [](VF v) { return ReluOf(v); });
}

void ExpMinus(const float* x, float* y, std::int64_t n, float m) {
  const VF mv = Set(m);
  Map(x, y, n, [mv](VF v) { return Exp(hn::Sub(v, mv)); });
}

void Swiglu(const float* g, const float* u, float* out, std::int64_t n) {
  std::int64_t i = 0;
  for (; i + kN <= n; i += kN) {
    const VF gv = Load(g + i);
    Store(hn::Mul(hn::Mul(gv, Sigmoid(gv)), Load(u + i)), out + i);
  }
  if (i < n) {
    const auto rest = static_cast<std::size_t>(n - i);
    alignas(64) float gt[kN] = {}, ut[kN] = {};
    std::memcpy(gt, g + i, sizeof(float) * rest);
    std::memcpy(ut, u + i, sizeof(float) * rest);
    const VF gv = Load(gt);
    Store(hn::Mul(hn::Mul(gv, Sigmoid(gv)), Load(ut)), gt);
    std::memcpy(out + i, gt, sizeof(float) * rest);
  }
}

void Gelu(const float* x, float* y, std::int64_t n) {
  Map(x, y, n, [](VF v) {
    const VF half_x = hn::Mul(Set(0.5f), v);
    return hn::Mul(half_x, hn::Add(Set(1.0f), Erf(hn::Mul(v, Set(0.70710678118654752f)))));
  });
}

float Sum(const float* x, int n) {
  return SumChains(
      n, [x](int i) { return Load(x + i); },
      [x](int i, int m) {
        alignas(64) float tmp[kN];
        for (int l = 0; l < kN; ++l) tmp[l] = l < m ? x[i + l] : 0.0f;
        return Load(tmp);
      });
}

float SumSquares(const float* x, int n, float c) {
  const VF cv = Set(c);
  return SumChains(
      n,
      [x, cv](int i) {
        const VF d = hn::Sub(Load(x + i), cv);
        return hn::Mul(d, d);
      },
      [x, c, cv](int i, int m) {
        // Lanes past the end hold c, so that they add (c - c)^2 = +0.
        alignas(64) float tmp[kN];
        for (int l = 0; l < kN; ++l) tmp[l] = l < m ? x[i + l] : c;
        const VF d = hn::Sub(Load(tmp), cv);
        return hn::Mul(d, d);
      });
}

// Scores of one page of the KV cache: scores[t] = sum_i q[i] keys[i][t], one chain over i per
// token, the tokens across the lanes.
void KvScores(const float* q, const float* keys, const float* next, int d, int page,
              float* scores) {
  constexpr int kMaxVectors = 64 / kN;
  VF s[kMaxVectors];
  const int nv = page / kN;
  for (int g = 0; g < nv; ++g) s[g] = Zero();
  for (int i = 0; i < d; ++i) {
    const VF qi = Set(q[i]);
    const float* row = keys + i * page;
    // While this page is computed, each of its rows asks for the same row of the next page.
    for (int b = 0; b < page; b += 16) hwy::Prefetch(next + i * page + b);
    HWY_UNROLL(16)
    for (int g = 0; g < kMaxVectors; ++g)
      if (g < nv) s[g] = Fma(qi, Load(row + g * kN), s[g]);
  }
  for (int g = 0; g < nv; ++g) Store(s[g], scores + g * kN);
}

// acc = acc * correction + sum_t scores[t] values[t], a block of columns in registers per pass
// over the page's value rows.
void KvAccumulate(float* acc, const float* values, const float* scores, int count, int dp,
                  float correction, const float* next) {
  const VF cv = Set(correction);
  constexpr int kPageTokens = 64;  // KVCache::kPageTokens
  for (int b = 0; b < kPageTokens * dp; b += 16) hwy::Prefetch(next + b);
  constexpr int kBlock = 8;
  for (int c0 = 0; c0 < dp; c0 += kBlock * kN) {
    const int nv = std::min(kBlock, (dp - c0) / kN);
    VF a[kBlock];
    for (int j = 0; j < nv; ++j) a[j] = hn::Mul(Load(acc + c0 + j * kN), cv);
    const float* vrow = values + c0;
    for (int t = 0; t < count; ++t, vrow += dp) {
      const VF pt = Set(scores[t]);
      for (int j = 0; j < nv; ++j) a[j] = Fma(pt, Load(vrow + j * kN), a[j]);
    }
    for (int j = 0; j < nv; ++j) Store(a[j], acc + c0 + j * kN);
  }
}

float FmaChains(std::int64_t iters, float seed) {
  VF a[kFmaChains];
  for (int c = 0; c < kFmaChains; ++c) a[c] = Set(seed + static_cast<float>(c));
  const VF m = Set(0.999999f), b = Set(1e-7f);
  for (std::int64_t it = 0; it < iters; ++it) {
    HWY_UNROLL(16)
    for (int c = 0; c < kFmaChains; ++c) a[c] = Fma(a[c], m, b);
  }
  VF s = Zero();
  for (int c = 0; c < kFmaChains; ++c) s = hn::Add(s, a[c]);
  return hn::GetLane(s);
}

void ColumnDots(const float* q, const float* keys, int d, std::int64_t stride, int n,
                float* out) {
  constexpr int kBlock = 8;  // vectors of columns kept in registers over one pass of the rows
  for (int t0 = 0; t0 < n; t0 += kBlock * kN) {
    const int nv = std::min(kBlock, (n - t0) / kN);
    VF s[kBlock];
    for (int g = 0; g < kBlock; ++g) s[g] = Zero();
    const float* row = keys + t0;
    for (int i = 0; i < d; ++i, row += stride) {
      const VF qi = Set(q[i]);
      for (int g = 0; g < nv; ++g) s[g] = Fma(qi, Load(row + g * kN), s[g]);
    }
    for (int g = 0; g < nv; ++g) Store(s[g], out + t0 + g * kN);
  }
}

void WeightedRows(float* acc, const float* rows, const float* w, int count, int dp) {
  constexpr int kBlock = 8;
  for (int c0 = 0; c0 < dp; c0 += kBlock * kN) {
    const int nv = std::min(kBlock, (dp - c0) / kN);
    VF a[kBlock];
    for (int j = 0; j < kBlock; ++j) a[j] = j < nv ? Load(acc + c0 + j * kN) : Zero();
    const float* r = rows + c0;
    for (int t = 0; t < count; ++t, r += dp) {
      const VF wt = Set(w[t]);
      for (int j = 0; j < nv; ++j) a[j] = Fma(wt, Load(r + j * kN), a[j]);
    }
    for (int j = 0; j < nv; ++j) Store(a[j], acc + c0 + j * kN);
  }
}

// A block of kRows query rows by kVecs vectors of key columns, in registers over one pass of
// the d rows of keys: s[r][t] = one FMA chain over i from 0, as ColumnDots makes each column.
template <int kRows, int kVecs>
HWY_INLINE void TileScoresBlock(const float* q, int ldq, const float* keys, std::int64_t stride,
                                int d, float* s, std::int64_t lds) {
  VF a[kRows][kVecs];
  for (int r = 0; r < kRows; ++r)
    for (int v = 0; v < kVecs; ++v) a[r][v] = Zero();
  const float* row = keys;
  for (int i = 0; i < d; ++i, row += stride) {
    VF k[kVecs];
    for (int v = 0; v < kVecs; ++v) k[v] = Load(row + v * kN);
    for (int r = 0; r < kRows; ++r) {
      const VF qi = Set(q[r * ldq + i]);
      for (int v = 0; v < kVecs; ++v) a[r][v] = Fma(qi, k[v], a[r][v]);
    }
  }
  for (int r = 0; r < kRows; ++r)
    for (int v = 0; v < kVecs; ++v) Store(a[r][v], s + r * lds + v * kN);
}

// The rows left after the blocks of six, one block of their number.
template <int kVecs>
void TileScoresRest(const float* q, int ldq, int rows, const float* keys, std::int64_t stride,
                    int d, float* s, std::int64_t lds) {
  switch (rows) {
    case 1: return TileScoresBlock<1, kVecs>(q, ldq, keys, stride, d, s, lds);
    case 2: return TileScoresBlock<2, kVecs>(q, ldq, keys, stride, d, s, lds);
    case 3: return TileScoresBlock<3, kVecs>(q, ldq, keys, stride, d, s, lds);
    case 4: return TileScoresBlock<4, kVecs>(q, ldq, keys, stride, d, s, lds);
    case 5: return TileScoresBlock<5, kVecs>(q, ldq, keys, stride, d, s, lds);
    default: return;
  }
}

// Six rows by two vectors: twelve chains (kFmaChains), and each key row's vectors loaded once
// for six rows. The column block is the outer loop, so its d rows of keys stay in L1 while
// every block of query rows passes over them.
void TileScores(const float* q, int ldq, int rows, const float* keys, std::int64_t stride, int d,
                int n, float* s, std::int64_t lds) {
  constexpr int kRows = 6;
  for (int t0 = 0; t0 < n;) {
    const bool two = n - t0 >= 2 * kN;
    int r0 = 0;
    for (; r0 + kRows <= rows; r0 += kRows) {
      const float* qr = q + std::int64_t(r0) * ldq;
      float* sr = s + r0 * lds + t0;
      if (two) TileScoresBlock<kRows, 2>(qr, ldq, keys + t0, stride, d, sr, lds);
      else TileScoresBlock<kRows, 1>(qr, ldq, keys + t0, stride, d, sr, lds);
    }
    if (two) TileScoresRest<2>(q + std::int64_t(r0) * ldq, ldq, rows - r0, keys + t0, stride, d, s + r0 * lds + t0, lds);
    else TileScoresRest<1>(q + std::int64_t(r0) * ldq, ldq, rows - r0, keys + t0, stride, d, s + r0 * lds + t0, lds);
    t0 += two ? 2 * kN : kN;
  }
}

// kRows rows' accumulators for kVecs vectors of columns, over `count` value rows in turn:
// acc = fma(w[t], values[t], acc), the chain of WeightedRows for each row of the tile.
template <int kRows, int kVecs>
HWY_INLINE void TileWeightedBlock(float* acc, std::int64_t lda, const float* w, std::int64_t ldw,
                                  const float* values, int count, int dp) {
  VF a[kRows][kVecs];
  for (int r = 0; r < kRows; ++r)
    for (int v = 0; v < kVecs; ++v) a[r][v] = Load(acc + r * lda + v * kN);
  const float* row = values;
  for (int t = 0; t < count; ++t, row += dp) {
    VF x[kVecs];
    for (int v = 0; v < kVecs; ++v) x[v] = Load(row + v * kN);
    for (int r = 0; r < kRows; ++r) {
      const VF wt = Set(w[r * ldw + t]);
      for (int v = 0; v < kVecs; ++v) a[r][v] = Fma(wt, x[v], a[r][v]);
    }
  }
  for (int r = 0; r < kRows; ++r)
    for (int v = 0; v < kVecs; ++v) Store(a[r][v], acc + r * lda + v * kN);
}

template <int kVecs>
void TileWeightedRest(float* acc, std::int64_t lda, int rows, const float* w, std::int64_t ldw,
                      const float* values, int count, int dp) {
  switch (rows) {
    case 1: return TileWeightedBlock<1, kVecs>(acc, lda, w, ldw, values, count, dp);
    case 2: return TileWeightedBlock<2, kVecs>(acc, lda, w, ldw, values, count, dp);
    case 3: return TileWeightedBlock<3, kVecs>(acc, lda, w, ldw, values, count, dp);
    case 4: return TileWeightedBlock<4, kVecs>(acc, lda, w, ldw, values, count, dp);
    case 5: return TileWeightedBlock<5, kVecs>(acc, lda, w, ldw, values, count, dp);
    default: return;
  }
}

void TileWeightedRows(float* acc, std::int64_t lda, int rows, const float* w, std::int64_t ldw,
                      const float* values, int count, int dp) {
  constexpr int kRows = 6;
  for (int c0 = 0; c0 < dp;) {
    const bool two = dp - c0 >= 2 * kN;
    int r0 = 0;
    for (; r0 + kRows <= rows; r0 += kRows) {
      float* ar = acc + r0 * lda + c0;
      const float* wr = w + r0 * ldw;
      if (two) TileWeightedBlock<kRows, 2>(ar, lda, wr, ldw, values + c0, count, dp);
      else TileWeightedBlock<kRows, 1>(ar, lda, wr, ldw, values + c0, count, dp);
    }
    if (two) TileWeightedRest<2>(acc + r0 * lda + c0, lda, rows - r0, w + r0 * ldw, ldw, values + c0, count, dp);
    else TileWeightedRest<1>(acc + r0 * lda + c0, lda, rows - r0, w + r0 * ldw, ldw, values + c0, count, dp);
    c0 += two ? 2 * kN : kN;
  }
}

const char* IsaName() {
#if HWY_TARGET == HWY_AVX3_DL
  return "avx512vnni";
#elif HWY_TARGET == HWY_AVX3
  return "avx512";
#elif HWY_TARGET == HWY_AVX2
  return "avx2";
#elif HWY_TARGET == HWY_SSE4
  return "sse4";
#elif HWY_TARGET == HWY_NEON
  return "neon";
#else
  return "scalar";
#endif
}

// Finiteness on the bits, as the walk's input pass does it: the exponent field of each float,
// kept as a running maximum per lane; all ones (0x7f800000) is Inf or NaN.
bool AllFinite(const float* x, std::int64_t rows, std::int64_t cols, std::int64_t stride) {
  const auto exponent = hn::Set(DU(), 0x7f800000u);
  auto seen = hn::Zero(DU());
  std::uint32_t tail = 0;
  const std::int64_t full = cols / kN * kN;
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* row = x + r * stride;
    for (std::int64_t c = 0; c < full; c += kN)
      seen = hn::Max(seen, hn::And(hn::BitCast(DU(), Load(row + c)), exponent));
    for (std::int64_t c = full; c < cols; ++c) {
      std::uint32_t u;
      std::memcpy(&u, row + c, sizeof u);
      tail = std::max(tail, u & 0x7f800000u);
    }
  }
  return tail != 0x7f800000u && hn::AllFalse(DU(), hn::Eq(seen, exponent));
}

const Kernels* Table() {
  static const Kernels table{IsaName(), kN,           HWY_TARGET, &StepHead, &WalkHead,
                             &GatherTiles, &Matmul,   &EluPlusOne,  &Relu,      &ExpMinus, &Swiglu,   &Gelu,
                             &Sum,      &SumSquares,  &KvScores,  &KvAccumulate,
                             &FmaChains, &ColumnDots, &WeightedRows, &TileScores,
                             &TileWeightedRows,
                             &MatmulQ, &QuantizeActivations,
                             &GatedStepHead, &GatedWalkHead, &GlaDecay, &Hgrn2Gates,
                             &SigmoidMap, &Silu, &AllFinite, &DeltaWalkHead};
  return &table;
}

}  // namespace HWY_NAMESPACE
}  // namespace recur::kernels
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <atomic>
#include <cstdlib>
#include <mutex>

#include <fmt/ranges.h>

#include "recur/isa.h"
#include "util/check.h"

namespace recur::kernels {
namespace {

HWY_EXPORT(Table);

// Highway's dispatch table holds one entry per target it compiled, at the index that its
// ChosenTarget mask gives; the emulated target is the last entry.
const Kernels* table_for(std::int64_t target) {
  const std::int64_t mask = target == HWY_EMU128 || target == HWY_SCALAR
                                ? HWY_CHOSEN_TARGET_MASK_SCALAR
                                : HWY_CHOSEN_TARGET_SHIFT(target);
  if (mask == 0 || (mask & HWY_CHOSEN_TARGET_MASK_TARGETS) == 0) return nullptr;
  const auto index = hwy::Num0BitsBelowLS1Bit_Nonzero64(static_cast<std::uint64_t>(mask));
  const auto fn = HWY_DISPATCH_TABLE(Table)[index];
  return fn ? fn() : nullptr;
}

std::vector<Compiled> list_compiled() {
  std::vector<Compiled> out;
  const std::int64_t supported = hwy::SupportedTargets();
  for (std::int64_t targets = HWY_TARGETS; targets != 0; targets &= targets - 1) {
    const std::int64_t target = targets & -targets;  // best first: lower bits are better
    if (const Kernels* k = table_for(target)) out.push_back({k, (supported & target) != 0});
  }
  return out;
}

std::mutex g_choose;

}  // namespace

std::atomic<const Kernels*> g_active{nullptr};

std::vector<Compiled> compiled() { return list_compiled(); }

std::vector<std::string> available_names() {
  std::vector<std::string> out;
  for (const Compiled& c : list_compiled())
    if (c.supported) out.emplace_back(c.kernels->name);
  return out;
}


const Kernels* find_isa(std::string_view name, const char* call) {
  std::string known;
  for (const Compiled& c : list_compiled()) {
    if (name == c.kernels->name) {
      if (!c.supported)
        detail::throw_argument(call,
                               "instruction set \"{}\" is in this build, but this CPU cannot run "
                               "it (this CPU runs: {})",
                               name, fmt::join(available_names(), ", "));
      return c.kernels;
    }
    known += (known.empty() ? "" : ", ") + std::string(c.kernels->name);
  }
  detail::throw_argument(call, "unknown instruction set \"{}\" (this build has: {})", name, known);
}

const Kernels& active() {
  if (const Kernels* k = g_active.load(std::memory_order_acquire)) return *k;
  std::lock_guard<std::mutex> lock(g_choose);
  if (const Kernels* k = g_active.load(std::memory_order_relaxed)) return *k;
  const Kernels* chosen = nullptr;
  if (const char* env = std::getenv("RECUR_ISA"); env != nullptr && *env != '\0') {
    chosen = find_isa(env, "RECUR_ISA");
  } else {
    for (const Compiled& c : list_compiled())
      if (c.supported) {
        chosen = c.kernels;
        break;
      }
  }
  g_active.store(chosen, std::memory_order_release);
  return *chosen;
}

}  // namespace recur::kernels

namespace recur {

std::string isa() { return kernels::active().name; }

std::vector<std::string> available_isas() { return kernels::available_names(); }

std::vector<std::string> compiled_isas() {
  std::vector<std::string> out;
  for (const kernels::Compiled& c : kernels::compiled()) out.emplace_back(c.kernels->name);
  return out;
}

void set_isa(std::string_view name) {
  const kernels::Kernels* k = kernels::find_isa(name, "set_isa");
  kernels::g_active.store(k, std::memory_order_release);
}

}  // namespace recur
#endif  // HWY_ONCE
