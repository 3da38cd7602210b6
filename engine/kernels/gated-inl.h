// The decayed recurrence for one head, per target: step (one token) and walk (a chunk of
// tokens), in the canonical order of gated_kernels.h; and the models' gates. The register tiles
// change only which numbers sit in registers, never the order of any sum.
#if defined(RECUR_KERNELS_GATED_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef RECUR_KERNELS_GATED_INL_H_
#undef RECUR_KERNELS_GATED_INL_H_
#else
#define RECUR_KERNELS_GATED_INL_H_
#endif

#include <algorithm>
#include <cassert>
#include <cstring>

#include "kernels/gated_kernels.h"
#include "kernels/linear_kernels.h"
#include "kernels/ops-inl.h"

HWY_BEFORE_NAMESPACE();
namespace recur::kernels {
namespace HWY_NAMESPACE {

// Register tiles of the walk: kGatedRows key rows (dividing kRowPad) by kGatedCols vectors of
// columns. Beside the tile, a token needs its v and output vectors, three broadcasts and the
// product k_i v_j: 4 x 2 fills AVX2's 16 registers.
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
inline constexpr int kGatedRows = 8;
inline constexpr int kGatedCols = 2;
#elif HWY_TARGET == HWY_AVX2
inline constexpr int kGatedRows = 4;
inline constexpr int kGatedCols = 2;
#else
inline constexpr int kGatedRows = 4;  // 4-lane targets: 4 x 4 vectors (16 columns)
inline constexpr int kGatedCols = 4;
#endif
// Column vectors of S walked together by step: one pass over the rows per group.
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL || HWY_TARGET == HWY_NEON
inline constexpr int kGatedStepCols = 8;
#else
inline constexpr int kGatedStepCols = 4;
#endif

template <int NV, bool kConst>
HWY_INLINE void GatedStepColumns(const GatedHeadView& h, const float* q, const float* k,
                                 const float* v, const float* alpha, float gamma, float* out,
                                 int col) {
  VF acc[NV], vv[NV];
  for (int c = 0; c < NV; ++c) {
    acc[c] = Zero();
    vv[c] = Load(v + col + c * kN);
  }
  const VF g = Set(gamma);
  float* S = h.S + col;
  for (int i = 0; i < h.Dp; ++i, S += h.dvp) {
    const VF kb = Set(k[i]);
    const VF qb = Set(q[i]);
    const VF ab = kConst ? g : Set(alpha[i]);
    HWY_UNROLL(8)
    for (int c = 0; c < NV; ++c) {
      const VF s = Fma(ab, Load(S + c * kN), hn::Mul(kb, vv[c]));
      Store(s, S + c * kN);
      acc[c] = Fma(qb, s, acc[c]);
    }
  }
  for (int c = 0; c < NV; ++c) Store(acc[c], out + col + c * kN);
}

template <bool kConst>
HWY_INLINE void GatedStepGroup(int nv, const GatedHeadView& h, const float* q, const float* k,
                               const float* v, const float* alpha, float gamma, float* out,
                               int col) {
  switch (nv) {
    case 8: return GatedStepColumns<8, kConst>(h, q, k, v, alpha, gamma, out, col);
    case 7: return GatedStepColumns<7, kConst>(h, q, k, v, alpha, gamma, out, col);
    case 6: return GatedStepColumns<6, kConst>(h, q, k, v, alpha, gamma, out, col);
    case 5: return GatedStepColumns<5, kConst>(h, q, k, v, alpha, gamma, out, col);
    case 4: return GatedStepColumns<4, kConst>(h, q, k, v, alpha, gamma, out, col);
    case 3: return GatedStepColumns<3, kConst>(h, q, k, v, alpha, gamma, out, col);
    case 2: return GatedStepColumns<2, kConst>(h, q, k, v, alpha, gamma, out, col);
    default: return GatedStepColumns<1, kConst>(h, q, k, v, alpha, gamma, out, col);
  }
}

void GatedStepHead(const GatedHeadView& h, const float* q, const float* k, const float* v,
                   const float* alpha, float gamma, float* out) {
  static_assert(kGatedStepCols <= 8, "GatedStepGroup instantiates up to 8 vectors");
  assert(h.Dp % kRowPad == 0 && h.dvp % kTileCols == 0);
  const int vectors = h.dvp / kN;
  for (int c = 0; c < vectors; c += kGatedStepCols) {
    const int nv = std::min(kGatedStepCols, vectors - c);
    if (alpha)
      GatedStepGroup<false>(nv, h, q, k, v, alpha, gamma, out, c * kN);
    else
      GatedStepGroup<true>(nv, h, q, k, v, alpha, gamma, out, c * kN);
  }
}

// One register tile (R rows x CV column vectors) of S walks the n tokens. The output columns
// carry the FMA chain from the tile above through memory.
template <int R, int CV, bool kFirstTile, bool kConst>
HWY_INLINE void GatedWalkTile(float* S, int stride, const float* qT, const float* kT,
                              const float* aT, float gamma, int tile_stride, const float* v,
                              std::int64_t vstride, float* out, std::int64_t ostride, int n) {
  static_assert(R % kTileRows == 0, "a register tile holds whole tiles of the input layout");
  VF p[R][CV];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < CV; ++c) p[r][c] = Load(S + r * stride + c * kN);
  const VF g = Set(gamma);
  const float* kt = kT;
  const float* qt = qT;
  const float* at = aT;
  const float* vt = v;
  float* ot = out;
  for (int t = 0; t < n; ++t, kt += kTileRows, qt += kTileRows, vt += vstride, ot += ostride) {
    VF vv[CV], a[CV];
    HWY_UNROLL(4)
    for (int c = 0; c < CV; ++c) {
      vv[c] = Load(vt + c * kN);
      a[c] = kFirstTile ? Zero() : Load(ot + c * kN);
    }
    HWY_UNROLL(8)
    for (int r = 0; r < R; ++r) {
      const int e = (r / kTileRows) * tile_stride + r % kTileRows;
      const VF kb = Set(kt[e]);
      const VF ab = kConst ? g : Set(at[e]);
      const VF qb = Set(qt[e]);
      HWY_UNROLL(4)
      for (int c = 0; c < CV; ++c) {
        p[r][c] = Fma(ab, p[r][c], hn::Mul(kb, vv[c]));
        a[c] = Fma(qb, p[r][c], a[c]);
      }
    }
    HWY_UNROLL(4)
    for (int c = 0; c < CV; ++c) Store(a[c], ot + c * kN);
    if constexpr (!kConst) at += kTileRows;
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < CV; ++c) Store(p[r][c], S + r * stride + c * kN);
}

template <int R, int CV>
HWY_INLINE void GatedWalkColumns(const GatedHeadView& h, int col0, const float* qT,
                                 const float* kT, const float* aT, float gamma, int tile_stride,
                                 const float* v, std::int64_t vstride, float* out,
                                 std::int64_t ostride, int n) {
  for (int row0 = 0; row0 < h.Dp; row0 += R) {
    const int off = (row0 / kTileRows) * tile_stride;
    float* S = h.S + row0 * h.dvp + col0;
    const float* q = qT + off;
    const float* k = kT + off;
    const float* a = aT ? aT + off : nullptr;
    if (row0 == 0) {
      if (a)
        GatedWalkTile<R, CV, true, false>(S, h.dvp, q, k, a, gamma, tile_stride, v + col0, vstride, out + col0, ostride, n);
      else
        GatedWalkTile<R, CV, true, true>(S, h.dvp, q, k, a, gamma, tile_stride, v + col0, vstride, out + col0, ostride, n);
    } else {
      if (a)
        GatedWalkTile<R, CV, false, false>(S, h.dvp, q, k, a, gamma, tile_stride, v + col0, vstride, out + col0, ostride, n);
      else
        GatedWalkTile<R, CV, false, true>(S, h.dvp, q, k, a, gamma, tile_stride, v + col0, vstride, out + col0, ostride, n);
    }
  }
}

void GatedWalkHead(const GatedHeadView& h, const float* qT, const float* kT, const float* aT,
                   float gamma, const float* v, std::int64_t vstride, float* out,
                   std::int64_t ostride, int n) {
  assert(h.Dp % kRowPad == 0 && h.cols % kTileCols == 0 && h.cols <= h.dvp);
  if (n <= 0) return;
  const int tile_stride = static_cast<int>(tile_stride_of(n));
  constexpr int kCols = kGatedCols * kN;
  static_assert(kRowPad % kGatedRows == 0, "register tiles divide the padded rows");
  int col0 = 0;
  for (; col0 + kCols <= h.cols; col0 += kCols)
    GatedWalkColumns<kGatedRows, kGatedCols>(h, col0, qT, kT, aT, gamma, tile_stride, v, vstride, out, ostride, n);
  // Leftover columns (cols is a multiple of 16, a register tile may be wider), a vector at a time.
  for (; col0 < h.cols; col0 += kN)
    GatedWalkColumns<kTileRows, 1>(h, col0, qT, kT, aT, gamma, tile_stride, v, vstride, out, ostride, n);
}

// log(1 + u) for u in [0, 1]: log1p(u) = 2 atanh(s), s = u / (2 + u) in [0, 1/3], by its series
// to s^15 (the next term is below 3e-9 of the sum). Small u keeps its digits: s ~ u / 2.
HWY_INLINE VF Log1pUnit(VF u) {
  const VF s = hn::Div(u, hn::Add(Set(2.0f), u));
  const VF z = hn::Mul(s, s);
  VF p = Set(1.0f / 15.0f);
  p = Fma(p, z, Set(1.0f / 13.0f));
  p = Fma(p, z, Set(1.0f / 11.0f));
  p = Fma(p, z, Set(1.0f / 9.0f));
  p = Fma(p, z, Set(1.0f / 7.0f));
  p = Fma(p, z, Set(1.0f / 5.0f));
  p = Fma(p, z, Set(1.0f / 3.0f));
  p = Fma(p, z, Set(1.0f));
  return hn::Mul(hn::Add(s, s), p);
}

// log(sigmoid(x)) = min(x, 0) - log1p(exp(-|x|)), without overflow at either end.
HWY_INLINE VF LogSigmoid(VF x) {
  const VF neg = hn::IfThenElse(hn::Lt(x, Zero()), x, Zero());
  return hn::Sub(neg, Log1pUnit(Exp(hn::Neg(hn::Abs(x)))));
}

HWY_INLINE VF AtMostOne(VF x) {
  const VF one = Set(1.0f);
  return hn::IfThenElse(hn::Gt(x, one), one, x);
}

void GlaDecay(const float* x, float* y, std::int64_t n, float normalizer, float clamp_min) {
  const VF norm = Set(normalizer), lo = Set(clamp_min);
  Map(x, y, n, [norm, lo](VF v) {
    VF g = hn::Div(LogSigmoid(v), norm);
    g = hn::IfThenElse(hn::Lt(g, lo), lo, g);
    return AtMostOne(Exp(g));
  });
}

HWY_INLINE void Hgrn2Vector(VF x, VF lb, VF& alpha, VF& k) {
  const VF one = Set(1.0f);
  const VF e = Exp(hn::Neg(x));
  const VF den = hn::Add(one, e);
  const VF s = hn::Div(one, den);  // sigmoid(x)
  const VF sn = hn::Div(e, den);   // sigmoid(-x) = 1 - sigmoid(x), without the cancellation
  const VF keep = hn::Sub(one, lb);
  alpha = AtMostOne(Fma(keep, s, lb));
  k = hn::Mul(keep, sn);
}

void Hgrn2Gates(const float* x, const float* lb, float* alpha, float* k, std::int64_t n) {
  std::int64_t i = 0;
  VF a, kk;
  for (; i + kN <= n; i += kN) {
    Hgrn2Vector(Load(x + i), lb ? Load(lb + i) : Zero(), a, kk);
    Store(a, alpha + i);
    Store(kk, k + i);
  }
  if (i < n) {  // the tail through the same vector code, zero-padded
    const auto rest = static_cast<std::size_t>(n - i);
    alignas(64) float xt[kN] = {}, lt[kN] = {};
    std::memcpy(xt, x + i, sizeof(float) * rest);
    if (lb) std::memcpy(lt, lb + i, sizeof(float) * rest);
    Hgrn2Vector(Load(xt), Load(lt), a, kk);
    Store(a, xt);
    Store(kk, lt);
    std::memcpy(alpha + i, xt, sizeof(float) * rest);
    std::memcpy(k + i, lt, sizeof(float) * rest);
  }
}

void SigmoidMap(const float* x, float* y, std::int64_t n) {
  Map(x, y, n, [](VF v) { return Sigmoid(v); });
}

void Silu(const float* x, float* y, std::int64_t n) {
  Map(x, y, n, [](VF v) { return hn::Mul(v, Sigmoid(v)); });
}

}  // namespace HWY_NAMESPACE
}  // namespace recur::kernels
HWY_AFTER_NAMESPACE();

#endif  // RECUR_KERNELS_GATED_INL_H_
