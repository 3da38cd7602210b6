// The delta rule's walk for one head, per target, in the canonical order of delta_kernels.h.
//
// A target of width kN holds the 16 chains of a dot product in 16 / kN vectors (chain c in lane
// c % kN of vector c / kN), so the FMA chains are the same numbers in the same order at every
// width. The tree then adds chains c and c + 8 first: on 4- and 8-lane targets that step (and
// on 4-lane ones the next) is an add of whole vectors, and the rest is an add of vector halves
// down to 4 lanes, then two in-register steps; every lane of every step is one add of the tree.
// The trees of several rows run side by side (4 rows in 128 bits; on AVX-512, 8 rows through
// every step), which costs fewer shuffles per row and changes no add.
#if defined(RECUR_KERNELS_DELTA_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef RECUR_KERNELS_DELTA_INL_H_
#undef RECUR_KERNELS_DELTA_INL_H_
#else
#define RECUR_KERNELS_DELTA_INL_H_
#endif

#include <algorithm>
#include <cstdint>

#include "hwy/cache_control.h"
#include "kernels/delta_kernels.h"
#include "kernels/ops-inl.h"

HWY_BEFORE_NAMESPACE();
namespace recur::kernels {
namespace HWY_NAMESPACE {

/// Vectors that hold the 16 chains of one dot product on this target.
inline constexpr int kDeltaChainVectors = kDeltaChains / kN;
static_assert(kDeltaChains % kN == 0, "the chains fill whole vectors");

using DeltaChains = VF[kDeltaChainVectors];

#if HWY_TARGET == HWY_SCALAR
// One lane per vector: the tree on the 16 chain values as written.
template <int G>
HWY_INLINE void ReduceRows(const DeltaChains* acc, float* out) {
  for (int g = 0; g < G; ++g) {
    float s[kDeltaChains];
    for (int c = 0; c < kDeltaChains; ++c) s[c] = hn::GetLane(acc[g][c]);
    for (int width = kDeltaChains / 2; width >= 1; width /= 2)
      for (int c = 0; c < width; ++c) s[c] += s[c + width];
    out[g] = s[0];
  }
}
#else
using D128 = hn::Full128<float>;
using V128 = hn::Vec<D128>;

// Halves a vector down to 4 lanes, adding lane c to lane c + half at each step: the tree's steps
// s[c] += s[c + 8] (16 lanes) and s[c] += s[c + 4].
template <class D>
HWY_INLINE V128 HalveTo128(D /* tag */, hn::Vec<D> v) {
  if constexpr (hn::MaxLanes(D()) == 4) {
    return v;
  } else {
    const hn::Half<D> dh;
    return HalveTo128(dh, hn::Add(hn::LowerHalf(dh, v), hn::UpperHalf(dh, v)));
  }
}

// The 16 chains of one dot product folded to the 4 values s[0..3] of the tree (128 bits).
template <int NV = kDeltaChainVectors>
HWY_INLINE V128 FoldTo128(const VF* acc) {
  if constexpr (NV == 1) {  // 16 lanes
    return HalveTo128(DF(), acc[0]);
  } else if constexpr (NV == 2) {  // 8 lanes: chains 0-7 and 8-15
    return HalveTo128(DF(), hn::Add(acc[0], acc[1]));
  } else {  // 4 lanes: chains 0-3, 4-7, 8-11, 12-15
    static_assert(NV == 4, "4, 8 or 16 lanes");
    return HalveTo128(DF(), hn::Add(hn::Add(acc[0], acc[2]), hn::Add(acc[1], acc[3])));
  }
}

// The tree's last steps, s[c] += s[c + 2] then s[0] + s[1], for G rows' folded values f[0..G);
// row g's result is lane g.
template <int G>
HWY_INLINE V128 FinishTree(const V128* f) {
  const D128 d128;
  if constexpr (G == 1) {
    const V128 p = hn::Add(f[0], hn::Shuffle1032(f[0]));  // [s0+s2, s1+s3, ..]
    return hn::Add(p, hn::Shuffle2301(p));
  } else {
    static_assert(G == 4, "1 or 4 rows");
    // [A0+A2, B0+B2, A1+A3, B1+B3] and the same of C and D, then
    // [A0', B0', C0', D0'] + [A1', B1', C1', D1'].
    const V128 p = hn::Add(hn::InterleaveLower(d128, f[0], f[1]),
                           hn::InterleaveUpper(d128, f[0], f[1]));
    const V128 q = hn::Add(hn::InterleaveLower(d128, f[2], f[3]),
                           hn::InterleaveUpper(d128, f[2], f[3]));
    return hn::Add(hn::ConcatLowerLower(d128, q, p), hn::ConcatUpperUpper(d128, q, p));
  }
}

#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
// 16 lanes: the tree for 8 rows at once, each step a pair of two-source shuffles and one add
// that halves the lanes per row and doubles the rows per vector (23 instructions for 8 rows,
// where halving each row alone takes about 6 per row). Row r's chains are acc[r][0], chain c in
// lane c. The sums land in lanes 0, 4, 8, 12 (rows 0-3) and 2, 6, 10, 14 (rows 4-7).
HWY_INLINE __m512 DeltaTree8(const DeltaChains* acc) {
  __m512 p[4];
  for (int q = 0; q < 4; ++q) {  // s[c] += s[c + 8]: [r' c0-7 | r+1' c0-7]
    const __m512 lo = acc[2 * q][0].raw, hi = acc[2 * q + 1][0].raw;
    p[q] = _mm512_add_ps(_mm512_shuffle_f32x4(lo, hi, _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_shuffle_f32x4(lo, hi, _MM_SHUFFLE(3, 2, 3, 2)));
  }
  __m512 r[2];
  for (int q = 0; q < 2; ++q)  // s[c] += s[c + 4]: 128-bit block b holds row 4q + b, c0-3
    r[q] = _mm512_add_ps(_mm512_shuffle_f32x4(p[2 * q], p[2 * q + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_f32x4(p[2 * q], p[2 * q + 1], _MM_SHUFFLE(3, 1, 3, 1)));
  // s[c] += s[c + 2]: block b holds [row b: s0, s1 | row b + 4: s0, s1].
  const __m512 z = _mm512_add_ps(_mm512_shuffle_ps(r[0], r[1], _MM_SHUFFLE(1, 0, 1, 0)),
                                 _mm512_shuffle_ps(r[0], r[1], _MM_SHUFFLE(3, 2, 3, 2)));
  // s[0] + s[1].
  return _mm512_add_ps(z, _mm512_permute_ps(z, _MM_SHUFFLE(2, 3, 0, 1)));
}
#endif

// The dot products of G rows, from their chains, to out[0..G).
template <int G>
HWY_INLINE void ReduceRows(const DeltaChains* acc, float* out) {
  if constexpr (G == 8) {
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
    const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 2, 6, 10, 14, 0, 0, 0, 0, 0, 0, 0, 0);
    const __m512 sums = _mm512_permutexvar_ps(order, DeltaTree8(acc));
    _mm256_storeu_ps(out, _mm512_castps512_ps256(sums));
#else
    static_assert(G != 8, "8 rows at once only on 16 lanes");
#endif
  } else {
    V128 f[G];
    for (int g = 0; g < G; ++g) f[g] = FoldTo128(acc[g]);
    const V128 sums = FinishTree<G>(f);
    if constexpr (G == 4)
      hn::StoreU(sums, D128(), out);
    else
      out[0] = hn::GetLane(sums);
  }
}
#endif

// The token's rows of input, at its offset in each.
struct DeltaToken {
  const float *w, *a, *b, *k, *r, *v;
  float* y;
};
HWY_INLINE DeltaToken DeltaTokenAt(const DeltaInputs& x, float* y, std::int64_t y_stride,
                                   std::int64_t t) {
  return {x.w + t * x.w_stride, x.a + t * x.a_stride, x.b + t * x.b_stride,
          x.k + t * x.k_stride, x.r + t * x.r_stride, x.v + t * x.v_stride,
          y + t * y_stride};
}

// One token through G rows of S from row i0, in two halves: DeltaDots gives sa = S_i . a of the
// old rows, DeltaUpdate updates them and writes y. S stays in memory (L1: see DeltaWalk): a
// token's work on a few rows is short and its chain (S . a, the tree, the update, S . r, the
// tree) long, so the walk does not hold rows in registers across tokens, whose every token
// would wait for the one before; it overlaps the groups of rows of one token instead.
template <int G>
HWY_INLINE void DeltaDots(const float* S, int d_k, const float* a, int i0, float* sa) {
  constexpr int NC = kDeltaChainVectors;
  const float* row[G];
  DeltaChains acc[G];
  for (int g = 0; g < G; ++g) {
    row[g] = S + std::int64_t(i0 + g) * d_k;
    for (int c = 0; c < NC; ++c) acc[g][c] = Zero();
  }
  // Chain c * kN + l takes element j = u + c * kN + l for u = 0, 16, 32, ...: j mod 16.
  for (int u = 0; u < d_k; u += kDeltaChains) {
    HWY_UNROLL(4)
    for (int c = 0; c < NC; ++c) {
      const VF av = Load(a + u + c * kN);
      for (int g = 0; g < G; ++g) acc[g][c] = Fma(Load(row[g] + u + c * kN), av, acc[g][c]);
    }
  }
  ReduceRows<G>(acc, sa);
}

template <int G, bool kScalarW>
HWY_INLINE void DeltaUpdate(float* S, int d_k, const DeltaToken& in, int i0, const float* sa) {
  constexpr int NC = kDeltaChainVectors;
  float* row[G];
  DeltaChains acc[G];
  VF sab[G], vb[G];
  for (int g = 0; g < G; ++g) {
    row[g] = S + std::int64_t(i0 + g) * d_k;
    sab[g] = Set(sa[g]);
    vb[g] = Set(in.v[i0 + g]);
    for (int c = 0; c < NC; ++c) acc[g][c] = Zero();
  }
  const VF w_all = kScalarW ? Set(in.w[0]) : Zero();
  for (int u = 0; u < d_k; u += kDeltaChains) {
    HWY_UNROLL(4)
    for (int c = 0; c < NC; ++c) {
      const int j = u + c * kN;
      const VF wv = kScalarW ? w_all : Load(in.w + j);
      const VF bv = Load(in.b + j), kv = Load(in.k + j), rv = Load(in.r + j);
      for (int g = 0; g < G; ++g) {
        VF e = hn::Mul(Load(row[g] + j), wv);
        e = Fma(sab[g], bv, e);
        e = Fma(vb[g], kv, e);
        Store(e, row[g] + j);
        acc[g][c] = Fma(e, rv, acc[g][c]);
      }
    }
  }
  ReduceRows<G>(acc, in.y + i0);
}

// One token through rows [p0, p1) of S: groups of kDeltaGroup rows, then the rest one by one.
// The dots of the next group are issued before the update of this one (they read other rows),
// so that the CPU has independent work beside every long chain.
template <int G, bool kScalarW>
HWY_INLINE void DeltaRowsToken(float* S, int d_k, const DeltaToken& in, int p0, int p1) {
  const int groups = (p1 - p0) / G;
  float sa[2][G];
  if (groups > 0) DeltaDots<G>(S, d_k, in.a, p0, sa[0]);
  for (int q = 0; q < groups; ++q) {
    const int i = p0 + q * G;
    if (q + 1 < groups) DeltaDots<G>(S, d_k, in.a, i + G, sa[(q + 1) & 1]);
    DeltaUpdate<G, kScalarW>(S, d_k, in, i, sa[q & 1]);
  }
  for (int i = p0 + groups * G; i < p1; ++i) {
    float s1;
    DeltaDots<1>(S, d_k, in.a, i, &s1);
    DeltaUpdate<1, kScalarW>(S, d_k, in, i, &s1);
  }
}

// Rows that share a reduction (ReduceRows) and a token's loads of its inputs.
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
inline constexpr int kDeltaGroup = 8;
#else
inline constexpr int kDeltaGroup = 4;
#endif

// Asks for the rows of a later token. A layer's projections are (T, H * d): one head's rows are
// a page apart or more, which the hardware's prefetchers do not follow.
HWY_INLINE void DeltaPrefetch(const DeltaToken& in, int d_k, int d_v, bool w_row) {
  for (int j = 0; j < d_k; j += 16) {
    if (w_row) hwy::Prefetch(in.w + j);
    hwy::Prefetch(in.a + j);
    hwy::Prefetch(in.b + j);
    hwy::Prefetch(in.k + j);
    hwy::Prefetch(in.r + j);
  }
  for (int i = 0; i < d_v; i += 16) {
    hwy::Prefetch(in.v + i);
    hwy::Prefetch(in.y + i);
  }
}
// Tokens ahead that DeltaPrefetch asks for: one token of one head is several hundred cycles of
// work at d 64, a memory access a few hundred.
inline constexpr int kDeltaAhead = 2;

template <bool kScalarW>
void DeltaWalk(const DeltaHeadView& h, const DeltaInputs& x, float* y, std::int64_t y_stride,
               int n) {
  // The loops' order is for the cache only (no operation depends on it): a block of tokens, whose
  // inputs (5 d_k floats a token, about 20 KiB a block) stay in L1, walks a panel of rows (about
  // 16 KiB of S, the whole head at d_k 64) token by token, then the next panel.
  const int block = std::clamp(1024 / h.d_k, 4, 64);
  const int panel = std::max(kDeltaGroup, 4096 / h.d_k / kDeltaGroup * kDeltaGroup);
  for (int t0 = 0; t0 < n; t0 += block) {
    const int t1 = std::min(n, t0 + block);
    for (int p0 = 0; p0 < h.d_v; p0 += panel) {
      const int p1 = std::min(h.d_v, p0 + panel);
      for (int t = t0; t < t1; ++t) {
        const DeltaToken in = DeltaTokenAt(x, y, y_stride, t);
        if (p0 == 0 && t + kDeltaAhead < n)
          DeltaPrefetch(DeltaTokenAt(x, y, y_stride, t + kDeltaAhead), h.d_k, h.d_v, !kScalarW);
        DeltaRowsToken<kDeltaGroup, kScalarW>(h.S, h.d_k, in, p0, p1);
      }
    }
  }
}

void DeltaWalkHead(const DeltaHeadView& h, const DeltaInputs& x, float* y, std::int64_t y_stride,
                   int n) {
  if (x.w_per_token)
    DeltaWalk<true>(h, x, y, y_stride, n);
  else
    DeltaWalk<false>(h, x, y, y_stride, n);
}

}  // namespace HWY_NAMESPACE
}  // namespace recur::kernels
HWY_AFTER_NAMESPACE();

#endif  // RECUR_KERNELS_DELTA_INL_H_
