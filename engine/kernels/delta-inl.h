// The delta rule's walk for one head, per target, in the canonical order of delta_kernels.h.
//
// A target of width kN holds the 16 chains of a dot product in 16 / kN vectors (chain c in lane
// c % kN of vector c / kN), so the FMA chains are the same numbers in the same order at every
// width. The tree then adds chains c and c + 8 first: on 4- and 8-lane targets that step (and
// on 4-lane ones the next) is an add of whole vectors, and the rest is an add of vector halves
// down to 4 lanes, then two in-register steps; every lane of every step is one add of the tree.
// The last two steps take up to 4 rows at once (their results side by side in one vector),
// which costs fewer shuffles per row and changes no add.
#if defined(RECUR_KERNELS_DELTA_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef RECUR_KERNELS_DELTA_INL_H_
#undef RECUR_KERNELS_DELTA_INL_H_
#else
#define RECUR_KERNELS_DELTA_INL_H_
#endif

#include <algorithm>
#include <cstdint>

#include "kernels/delta_kernels.h"
#include "kernels/ops-inl.h"

HWY_BEFORE_NAMESPACE();
namespace recur::kernels {
namespace HWY_NAMESPACE {

/// Vectors that hold the 16 chains of one dot product on this target.
inline constexpr int kDeltaChainVectors = kDeltaChains / kN;
static_assert(kDeltaChains % kN == 0, "the chains fill whole vectors");

// Vector registers of the target, and how many of them a register tile of S (and the chains
// of its rows) may take; the rest hold a token's inputs and temporaries.
#if HWY_TARGET == HWY_AVX2
inline constexpr int kDeltaTileRegisters = 12;  // of 16
#else
inline constexpr int kDeltaTileRegisters = 24;  // of 32 (AVX-512, NEON; the emulated targets)
#endif

/// Rows of S a register tile holds when a row is KV vectors: up to 4, 0 when even one row and
/// its chains would not fit (the walk then keeps S in memory).
template <int KV>
constexpr int DeltaTileRows() {
  for (int g = 4; g >= 1; g /= 2)
    if (g * (KV + kDeltaChainVectors) <= kDeltaTileRegisters) return g;
  return 0;
}

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
using D4 = hn::Full128<float>;
using V4 = hn::Vec<D4>;

// Halves a vector down to 4 lanes, adding lane c to lane c + half at each step: the tree's steps
// s[c] += s[c + 8] (16 lanes) and s[c] += s[c + 4].
template <class D>
HWY_INLINE V4 HalveTo4(D /* tag */, hn::Vec<D> v) {
  if constexpr (hn::MaxLanes(D()) == 4) {
    return v;
  } else {
    const hn::Half<D> dh;
    return HalveTo4(dh, hn::Add(hn::LowerHalf(dh, v), hn::UpperHalf(dh, v)));
  }
}

// The 16 chains of one dot product folded to the 4 values s[0..3] of the tree.
template <int NV = kDeltaChainVectors>
HWY_INLINE V4 FoldTo4(const VF* acc) {
  if constexpr (NV == 1) {  // 16 lanes
    return HalveTo4(DF(), acc[0]);
  } else if constexpr (NV == 2) {  // 8 lanes: chains 0-7 and 8-15
    return HalveTo4(DF(), hn::Add(acc[0], acc[1]));
  } else {  // 4 lanes: chains 0-3, 4-7, 8-11, 12-15
    static_assert(NV == 4, "4, 8 or 16 lanes");
    return HalveTo4(DF(), hn::Add(hn::Add(acc[0], acc[2]), hn::Add(acc[1], acc[3])));
  }
}

// The tree's last steps, s[c] += s[c + 2] then s[0] + s[1], for G rows' folded values f[0..G);
// row g's result is lane g.
template <int G>
HWY_INLINE V4 FinishTree(const V4* f) {
  const D4 d4;
  if constexpr (G == 1) {
    const V4 p = hn::Add(f[0], hn::Shuffle1032(f[0]));  // [s0+s2, s1+s3, ..]
    return hn::Add(p, hn::Shuffle2301(p));
  } else if constexpr (G == 2) {
    // [A0+A2, B0+B2, A1+A3, B1+B3], then lane 0 + lane 2 and lane 1 + lane 3.
    const V4 p = hn::Add(hn::InterleaveLower(d4, f[0], f[1]), hn::InterleaveUpper(d4, f[0], f[1]));
    return hn::Add(p, hn::Shuffle1032(p));
  } else {
    static_assert(G == 4, "1, 2 or 4 rows");
    const V4 p = hn::Add(hn::InterleaveLower(d4, f[0], f[1]), hn::InterleaveUpper(d4, f[0], f[1]));
    const V4 q = hn::Add(hn::InterleaveLower(d4, f[2], f[3]), hn::InterleaveUpper(d4, f[2], f[3]));
    // [A0', B0', C0', D0'] + [A1', B1', C1', D1'].
    return hn::Add(hn::ConcatLowerLower(d4, q, p), hn::ConcatUpperUpper(d4, q, p));
  }
}

// The dot products of G rows, from their chains, to out[0..G).
template <int G>
HWY_INLINE void ReduceRows(const DeltaChains* acc, float* out) {
  V4 f[G];
  for (int g = 0; g < G; ++g) f[g] = FoldTo4(acc[g]);
  const V4 sums = FinishTree<G>(f);
  if constexpr (G == 4) {
    hn::StoreU(sums, D4(), out);
  } else if constexpr (G == 1) {
    out[0] = hn::GetLane(sums);
  } else {
    alignas(16) float o[4];
    hn::Store(sums, D4(), o);
    for (int g = 0; g < G; ++g) out[g] = o[g];
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

// G rows of S from row i0, KV vectors each, held in registers while they walk tokens [t0, t1).
template <int G, int KV, bool kScalarW>
HWY_INLINE void DeltaTile(float* S, int d_k, const DeltaInputs& x, float* y,
                          std::int64_t y_stride, int i0, int t0, int t1) {
  constexpr int NC = kDeltaChainVectors;
  VF s[G][KV];
  for (int g = 0; g < G; ++g)
    for (int u = 0; u < KV; ++u) s[g][u] = Load(S + (i0 + g) * d_k + u * kN);
  for (int t = t0; t < t1; ++t) {
    const DeltaToken in = DeltaTokenAt(x, y, y_stride, t);
    VF acc[G][NC];
    for (int g = 0; g < G; ++g)
      for (int c = 0; c < NC; ++c) acc[g][c] = Zero();
    HWY_UNROLL(16)
    for (int u = 0; u < KV; ++u) {
      const VF av = Load(in.a + u * kN);
      for (int g = 0; g < G; ++g) acc[g][u % NC] = Fma(s[g][u], av, acc[g][u % NC]);
    }
    float sa[G];
    ReduceRows<G>(acc, sa);
    VF sab[G], vb[G];
    for (int g = 0; g < G; ++g) {
      sab[g] = Set(sa[g]);
      vb[g] = Set(in.v[i0 + g]);
      for (int c = 0; c < NC; ++c) acc[g][c] = Zero();
    }
    const VF w_all = kScalarW ? Set(in.w[0]) : Zero();
    HWY_UNROLL(16)
    for (int u = 0; u < KV; ++u) {
      const VF wv = kScalarW ? w_all : Load(in.w + u * kN);
      const VF bv = Load(in.b + u * kN), kv = Load(in.k + u * kN), rv = Load(in.r + u * kN);
      for (int g = 0; g < G; ++g) {
        VF e = hn::Mul(s[g][u], wv);
        e = Fma(sab[g], bv, e);
        e = Fma(vb[g], kv, e);
        s[g][u] = e;
        acc[g][u % NC] = Fma(e, rv, acc[g][u % NC]);
      }
    }
    ReduceRows<G>(acc, in.y + i0);
  }
  for (int g = 0; g < G; ++g)
    for (int u = 0; u < KV; ++u) Store(s[g][u], S + (i0 + g) * d_k + u * kN);
}

// The same arithmetic with S in memory, for row lengths no register tile takes.
template <bool kScalarW>
HWY_NOINLINE void DeltaRowsInMemory(float* S, int d_k, int d_v, const DeltaInputs& x, float* y,
                                    std::int64_t y_stride, int t0, int t1) {
  constexpr int NC = kDeltaChainVectors;
  const int kv = d_k / kN;
  for (int t = t0; t < t1; ++t) {
    const DeltaToken in = DeltaTokenAt(x, y, y_stride, t);
    const VF w_all = kScalarW ? Set(in.w[0]) : Zero();
    float* row = S;
    for (int i = 0; i < d_v; ++i, row += d_k) {
      VF acc[1][NC];
      for (int c = 0; c < NC; ++c) acc[0][c] = Zero();
      for (int u = 0; u < kv; ++u)
        acc[0][u % NC] = Fma(Load(row + u * kN), Load(in.a + u * kN), acc[0][u % NC]);
      float sa;
      ReduceRows<1>(acc, &sa);
      const VF sab = Set(sa);
      const VF vb = Set(in.v[i]);
      for (int c = 0; c < NC; ++c) acc[0][c] = Zero();
      for (int u = 0; u < kv; ++u) {
        const VF wv = kScalarW ? w_all : Load(in.w + u * kN);
        VF e = hn::Mul(Load(row + u * kN), wv);
        e = Fma(sab, Load(in.b + u * kN), e);
        e = Fma(vb, Load(in.k + u * kN), e);
        Store(e, row + u * kN);
        acc[0][u % NC] = Fma(e, Load(in.r + u * kN), acc[0][u % NC]);
      }
      ReduceRows<1>(acc, in.y + i);
    }
  }
}

// Tokens [t0, t1) through every row: register tiles of G rows, the last d_v % G rows one by one.
template <int KV, bool kScalarW>
HWY_NOINLINE void DeltaRowsTiled(float* S, int d_k, int d_v, const DeltaInputs& x, float* y,
                                 std::int64_t y_stride, int t0, int t1) {
  constexpr int G = DeltaTileRows<KV>();
  if constexpr (G == 0) {
    DeltaRowsInMemory<kScalarW>(S, d_k, d_v, x, y, y_stride, t0, t1);
  } else {
    int i = 0;
    for (; i + G <= d_v; i += G) DeltaTile<G, KV, kScalarW>(S, d_k, x, y, y_stride, i, t0, t1);
    for (; i < d_v; ++i) DeltaTile<1, KV, kScalarW>(S, d_k, x, y, y_stride, i, t0, t1);
  }
}

template <bool kScalarW>
void DeltaWalk(const DeltaHeadView& h, const DeltaInputs& x, float* y, std::int64_t y_stride,
               int n) {
  // Tokens per pass over the rows: the block's inputs (5 d_k floats a token) stay in L1 while
  // every row tile walks them; S is read and written once per block.
  const int block = std::clamp(1024 / h.d_k, 4, 64);
  for (int t0 = 0; t0 < n; t0 += block) {
    const int t1 = std::min(n, t0 + block);
    float* S = h.S;
    switch (h.d_k / kN) {
      case 1: DeltaRowsTiled<1, kScalarW>(S, h.d_k, h.d_v, x, y, y_stride, t0, t1); break;
      case 2: DeltaRowsTiled<2, kScalarW>(S, h.d_k, h.d_v, x, y, y_stride, t0, t1); break;
      case 4: DeltaRowsTiled<4, kScalarW>(S, h.d_k, h.d_v, x, y, y_stride, t0, t1); break;
      case 8: DeltaRowsTiled<8, kScalarW>(S, h.d_k, h.d_v, x, y, y_stride, t0, t1); break;
      case 16: DeltaRowsTiled<16, kScalarW>(S, h.d_k, h.d_v, x, y, y_stride, t0, t1); break;
      default: DeltaRowsInMemory<kScalarW>(S, h.d_k, h.d_v, x, y, y_stride, t0, t1); break;
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
