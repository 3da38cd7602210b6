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

// Vectors of rows or columns in a register block of the tile kernels: with 32 registers
// (AVX-512) four, so that a block holds 24 chains; with 16, two (twelve chains, kFmaChains).
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
constexpr int kTileVecs = 4;
#else
constexpr int kTileVecs = 2;
#endif
// Keys (tile_scores) or query rows (tile_weighted_rows) in a block, one broadcast each.
constexpr int kTileBroadcasts = 6;

// The widest block of vectors that `left` lanes fill: kTileVecs, 2 or 1 vectors; f runs it with
// the width as a std::integral_constant, and the lanes it covers are returned.
template <class F>
HWY_INLINE int WidestBlock(int left, const F& f) {
  if (left >= kTileVecs * kN) return f(std::integral_constant<int, kTileVecs>()), kTileVecs * kN;
  if (left >= 2 * kN) return f(std::integral_constant<int, 2>()), 2 * kN;
  return f(std::integral_constant<int, 1>()), kN;
}

// Runs f(std::integral_constant<int, k>()) for 1 <= k < kTileBroadcasts: the block of the keys or
// rows left after the full blocks.
template <class F>
HWY_INLINE void WithCount(int k, const F& f) {
  static_assert(kTileBroadcasts == 6, "one case per count below kTileBroadcasts");
  switch (k) {
    case 1: return f(std::integral_constant<int, 1>());
    case 2: return f(std::integral_constant<int, 2>());
    case 3: return f(std::integral_constant<int, 3>());
    case 4: return f(std::integral_constant<int, 4>());
    case 5: return f(std::integral_constant<int, 5>());
    default: return;
  }
}

// kKeys keys by kVecs vectors of query rows, in registers over dimensions [i0, i1):
// sT[t][r] = one FMA chain over i from 0, as ColumnDots makes each column (the product
// q[i] * key[i] is the same whichever is broadcast). From i0 > 0 the chain continues from what
// sT holds (a float stored and loaded again is the same float).
template <int kKeys, int kVecs>
HWY_INLINE void TileScoresBlock(const float* qT, int ldq, const float* keys, std::int64_t stride,
                                int i0, int i1, float* sT, std::int64_t lds) {
  VF a[kKeys][kVecs];
  for (int t = 0; t < kKeys; ++t)
    for (int v = 0; v < kVecs; ++v) a[t][v] = i0 == 0 ? Zero() : Load(sT + t * lds + v * kN);
  const float* key = keys + i0 * stride;
  const float* q = qT + std::int64_t(i0) * ldq;
  for (int i = i0; i < i1; ++i, key += stride, q += ldq) {
    VF qi[kVecs];
    for (int v = 0; v < kVecs; ++v) qi[v] = Load(q + v * kN);
    for (int t = 0; t < kKeys; ++t) {
      const VF kt = Set(key[t]);
      for (int v = 0; v < kVecs; ++v) a[t][v] = Fma(qi[v], kt, a[t][v]);
    }
  }
  for (int t = 0; t < kKeys; ++t)
    for (int v = 0; v < kVecs; ++v) Store(a[t][v], sT + t * lds + v * kN);
}

// Blocks of six keys by kTileVecs vectors of rows: each vector of queries loaded feeds six
// FMAs, each broadcast key kTileVecs. The dimensions go in slices of 64, the blocks inside
// them, so that the slice's keys (64 rows of the page) and the queries' slice (64 x rows) stay
// in L1 while every block passes over them: with all of d at once they did not, and the loads
// waited on L2.
void TileScores(const float* qT, int ldq, int rows, const float* keys, std::int64_t stride, int d,
                int n, float* sT, std::int64_t lds) {
  constexpr int kSlice = 64;
  for (int i0 = 0; i0 < d; i0 += kSlice) {
    const int i1 = std::min(d, i0 + kSlice);
    for (int r0 = 0; r0 < rows;) {
      r0 += WidestBlock(rows - r0, [&](auto vecs) {
        constexpr int kVecs = decltype(vecs)::value;
        int t0 = 0;
        for (; t0 + kTileBroadcasts <= n; t0 += kTileBroadcasts)
          TileScoresBlock<kTileBroadcasts, kVecs>(qT + r0, ldq, keys + t0, stride, i0, i1,
                                                  sT + t0 * lds + r0, lds);
        WithCount(n - t0, [&](auto keys_left) {
          TileScoresBlock<decltype(keys_left)::value, kVecs>(qT + r0, ldq, keys + t0, stride, i0,
                                                             i1, sT + t0 * lds + r0, lds);
        });
      });
    }
  }
}

// The rows' softmax over sT (sT[t * lds + r]: key t of row r), the rows in the lanes: each lane
// walks its row's keys oldest first with attend_one's scalar steps (the max by compare and
// select, exp(s - m) by Exp, the sum by adds from 0), so every row's weights and sum are
// attend_one's. Keys from n[r] to n_max become weight 0, which leaves the sum as it is (the sum
// is never -0).
void TileSoftmax(float* sT, std::int64_t lds, int rows, const std::int32_t* n, int n_max,
                 float* l) {
  for (int r0 = 0; r0 < rows;) {
    r0 += WidestBlock(rows - r0, [&](auto vecs) {
      constexpr int kVecs = decltype(vecs)::value;
      float* s = sT + r0;
      hn::Vec<DI> nv[kVecs];
      int fewest = n_max;  // keys every row of the block sees
      for (int v = 0; v < kVecs; ++v) {
        nv[v] = hn::LoadU(DI(), n + r0 + v * kN);
        for (int j = 0; j < kN; ++j) fewest = std::min(fewest, n[r0 + v * kN + j]);
      }
      const auto sees = [&](int t, int v) {  // the lanes whose rows see key t
        return hn::RebindMask(DF(), hn::Lt(hn::Set(DI(), t), nv[v]));
      };
      VF m[kVecs], sum[kVecs];
      for (int v = 0; v < kVecs; ++v) m[v] = Load(s + v * kN);
      for (int t = 1; t < n_max; ++t)
        for (int v = 0; v < kVecs; ++v) {
          const VF x = Load(s + t * lds + v * kN);
          const auto larger = hn::Gt(x, m[v]);
          m[v] = hn::IfThenElse(t < fewest ? larger : hn::And(larger, sees(t, v)), x, m[v]);
        }
      for (int v = 0; v < kVecs; ++v) sum[v] = Zero();
      for (int t = 0; t < n_max; ++t)
        for (int v = 0; v < kVecs; ++v) {
          VF w = Exp(hn::Sub(Load(s + t * lds + v * kN), m[v]));
          if (t >= fewest) w = hn::IfThenElseZero(sees(t, v), w);
          Store(w, s + t * lds + v * kN);
          sum[v] = hn::Add(sum[v], w);
        }
      for (int v = 0; v < kVecs; ++v) Store(sum[v], l + r0 + v * kN);
    });
  }
}

// kRows rows' accumulators for kVecs vectors of columns, over `count` value rows in turn:
// acc = fma(wT[t][r], values[t], acc), the chain of WeightedRows for each row of the tile.
template <int kRows, int kVecs>
HWY_INLINE void TileWeightedBlock(float* acc, std::int64_t lda, const float* wT, std::int64_t ldw,
                                  const float* values, int count, int dp) {
  VF a[kRows][kVecs];
  for (int r = 0; r < kRows; ++r)
    for (int v = 0; v < kVecs; ++v) a[r][v] = Load(acc + r * lda + v * kN);
  const float* row = values;
  const float* w = wT;
  for (int t = 0; t < count; ++t, row += dp, w += ldw) {
    VF x[kVecs];
    for (int v = 0; v < kVecs; ++v) x[v] = Load(row + v * kN);
    for (int r = 0; r < kRows; ++r) {
      const VF wt = Set(w[r]);
      for (int v = 0; v < kVecs; ++v) a[r][v] = Fma(wt, x[v], a[r][v]);
    }
  }
  for (int r = 0; r < kRows; ++r)
    for (int v = 0; v < kVecs; ++v) Store(a[r][v], acc + r * lda + v * kN);
}

void TileWeightedSlice(float* acc, std::int64_t lda, int rows, const float* wT, std::int64_t ldw,
                       const float* values, int count, int dp) {
  for (int c0 = 0; c0 < dp;) {
    c0 += WidestBlock(dp - c0, [&](auto vecs) {
      constexpr int kVecs = decltype(vecs)::value;
      int r0 = 0;
      for (; r0 + kTileBroadcasts <= rows; r0 += kTileBroadcasts)
        TileWeightedBlock<kTileBroadcasts, kVecs>(acc + r0 * lda + c0, lda, wT + r0, ldw,
                                                  values + c0, count, dp);
      WithCount(rows - r0, [&](auto rows_left) {
        TileWeightedBlock<decltype(rows_left)::value, kVecs>(acc + r0 * lda + c0, lda, wT + r0,
                                                             ldw, values + c0, count, dp);
      });
    });
  }
}

// The value rows go in slices of 32: a block of columns of 64 rows, dp floats apart (1 KiB at
// Qwen3.5's 256), falls into too few of L1's sets to stay there while the row blocks pass over
// it; 32 rows do. A slice's chains continue from what the one before stored.
void TileWeightedRows(float* acc, std::int64_t lda, int rows, const float* wT, std::int64_t ldw,
                      const float* values, int count, int dp) {
  constexpr int kSlice = 32;
  for (int t0 = 0; t0 < count; t0 += kSlice)
    TileWeightedSlice(acc, lda, rows, wT + t0 * ldw, ldw, values + std::int64_t(t0) * dp,
                      std::min(kSlice, count - t0), dp);
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
                             &TileSoftmax, &TileWeightedRows,
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
