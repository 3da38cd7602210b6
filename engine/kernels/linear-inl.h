// The linear-attention recurrence for one head, per target: step (one token) and walk (a chunk
// of tokens). Both follow the canonical order of linear_kernels.h; the register tiles below
// change only which numbers sit in registers, never the order in which they are summed, and
// can be tuned per target freely.
#if defined(RECUR_KERNELS_LINEAR_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef RECUR_KERNELS_LINEAR_INL_H_
#undef RECUR_KERNELS_LINEAR_INL_H_
#else
#define RECUR_KERNELS_LINEAR_INL_H_
#endif

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstring>

#include "kernels/linear_kernels.h"
#include "kernels/ops-inl.h"

HWY_BEFORE_NAMESPACE();
namespace recur::kernels {
namespace HWY_NAMESPACE {

// Register tiles of the walk: kWalkRows feature rows (4 or 8: the rows of one or two tiles of
// the input layout, dividing kRowPad) by kWalkCols vectors of columns. Any shape gives the same bytes.
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
inline constexpr int kWalkRows = 8;   // 32 registers: a tile of 8 x 2 vectors
inline constexpr int kWalkCols = 2;
#elif HWY_TARGET == HWY_AVX2
inline constexpr int kWalkRows = 4;   // 16 registers: 4 x 2 vectors
inline constexpr int kWalkCols = 2;
#else
inline constexpr int kWalkRows = 4;   // 4-lane targets: 4 x 4 vectors (16 columns)
inline constexpr int kWalkCols = 4;
#endif
// Column vectors of P walked together by step (one pass over the rows per group); v's vectors
// and the accumulators stay in registers, so 32 registers hold twice as many as 16.
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL || HWY_TARGET == HWY_NEON
inline constexpr int kStepCols = 8;
#else
inline constexpr int kStepCols = 4;
#endif

// L64 += P, L32 = float(L64), P = 0 over a block of rows x cols of a row-major (., stride) array.
HWY_INLINE void FoldBlock(float* P, float* L32, double* L64, int rows, int cols, int stride) {
  for (int i = 0; i < rows; ++i) {
    for (int j = 0; j < cols; ++j) {
      const int e = i * stride + j;
      L64[e] += static_cast<double>(P[e]);
      L32[e] = static_cast<float>(L64[e]);
      P[e] = 0.0f;
    }
  }
}

// Step over NV column vectors from `col`: every feature row once, the accumulators in
// registers. With kDen, the denominator's chain (the column of Z beside S) runs in the same
// pass and is returned.
template <int NV, bool kDen>
HWY_INLINE float StepColumns(const HeadView& h, const float* q, const float* k, const float* v,
                             float* out, int col) {
  VF acc[NV], vv[NV];
  for (int c = 0; c < NV; ++c) {
    acc[c] = Zero();
    vv[c] = Load(v + col + c * kN);
  }
  float den = 0.0f;
  float* P = h.P + col;
  const float* L32 = h.L32 + col;
  for (int i = 0; i < h.Dp; ++i, P += h.dvp, L32 += h.dvp) {
    const VF kb = Set(k[i]);
    const VF qb = Set(q[i]);
    HWY_UNROLL(8)
    for (int c = 0; c < NV; ++c) {
      const VF p = Fma(kb, vv[c], Load(P + c * kN));
      Store(p, P + c * kN);
      acc[c] = Fma(qb, hn::Add(Load(L32 + c * kN), p), acc[c]);
    }
    if constexpr (kDen) {
      const float zp = h.Zp[i] + k[i];
      h.Zp[i] = zp;
      den = std::fma(q[i], h.Z32[i] + zp, den);
    }
  }
  for (int c = 0; c < NV; ++c) Store(acc[c], out + col + c * kN);
  return den;
}

template <bool kDen>
HWY_INLINE float StepGroup(int nv, const HeadView& h, const float* q, const float* k,
                           const float* v, float* out, int col) {
  switch (nv) {
    case 8: return StepColumns<8, kDen>(h, q, k, v, out, col);
    case 7: return StepColumns<7, kDen>(h, q, k, v, out, col);
    case 6: return StepColumns<6, kDen>(h, q, k, v, out, col);
    case 5: return StepColumns<5, kDen>(h, q, k, v, out, col);
    case 4: return StepColumns<4, kDen>(h, q, k, v, out, col);
    case 3: return StepColumns<3, kDen>(h, q, k, v, out, col);
    case 2: return StepColumns<2, kDen>(h, q, k, v, out, col);
    default: return StepColumns<1, kDen>(h, q, k, v, out, col);
  }
}

HWY_INLINE void ScaleRow(float* out, float s, int dvp) {
  const VF sv = Set(s);
  for (int c = 0; c < dvp; c += kN) Store(hn::Mul(Load(out + c), sv), out + c);
}

void StepHead(const HeadView& h, const float* q, const float* k, const float* v, float* out,
              bool normalized, float eps, std::int64_t pos) {
  static_assert(kStepCols <= 8, "StepGroup instantiates up to 8 vectors");
  assert(h.Dp % kRowPad == 0 && h.dvp % kTileCols == 0);
  const int vectors = h.dvp / kN;
  float den = 0.0f;
  for (int c = 0; c < vectors; c += kStepCols) {
    const int nv = std::min(kStepCols, vectors - c);
    if (c == 0 && normalized)
      den = StepGroup<true>(nv, h, q, k, v, out, 0);
    else
      StepGroup<false>(nv, h, q, k, v, out, c * kN);
  }
  if (normalized) ScaleRow(out, 1.0f / (den + eps), h.dvp);
  if (folds_after(pos)) {
    FoldBlock(h.P, h.L32, h.L64, h.Dp, h.dvp, h.dvp);
    if (normalized) FoldBlock(h.Zp, h.Z32, h.Z64, 1, h.Dp, h.Dp);
  }
}

// One register tile (R rows x CV column vectors) of P walks tokens [t0, t1), between two
// folds. The output columns carry the FMA chain from the tile above through memory. L32 is
// constant over the segment: a local copy keeps its addresses fixed.
template <int R, int CV, bool kFirstTile>
HWY_INLINE void WalkSegment(VF (&p)[R][CV], const float* L32, int stride, const float* qT,
                            const float* kT, int tile_stride, const float* v,
                            std::int64_t vstride, float* out, std::int64_t ostride, int t0,
                            int t1) {
  static_assert(R % kTileRows == 0, "a register tile holds whole tiles of the input layout");
  alignas(64) float l32[R][CV * kN];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < CV * kN; ++c) l32[r][c] = L32[r * stride + c];
  const float* kt = kT + t0 * kTileRows;
  const float* qt = qT + t0 * kTileRows;
  const float* vt = v + t0 * vstride;
  float* ot = out + t0 * ostride;
  for (int t = t0; t < t1; ++t, kt += kTileRows, qt += kTileRows, vt += vstride, ot += ostride) {
    VF vv[CV], a[CV];
    HWY_UNROLL(4)
    for (int c = 0; c < CV; ++c) {
      vv[c] = Load(vt + c * kN);
      a[c] = kFirstTile ? Zero() : Load(ot + c * kN);
    }
    HWY_UNROLL(8)
    for (int r = 0; r < R; ++r) {
      const int at = (r / kTileRows) * tile_stride + r % kTileRows;
      const VF kb = Set(kt[at]);
      const VF qb = Set(qt[at]);
      HWY_UNROLL(4)
      for (int c = 0; c < CV; ++c) {
        p[r][c] = Fma(kb, vv[c], p[r][c]);
        a[c] = Fma(qb, hn::Add(Load(l32[r] + c * kN), p[r][c]), a[c]);
      }
    }
    HWY_UNROLL(4)
    for (int c = 0; c < CV; ++c) Store(a[c], ot + c * kN);
  }
}

template <int R, int CV>
HWY_INLINE void WalkTile(const HeadView& h, int row0, int col0, const float* qT, const float* kT,
                         int tile_stride, const float* v, std::int64_t vstride, float* out,
                         std::int64_t ostride, int n, bool first_tile, std::int64_t pos0) {
  const int stride = h.dvp;
  float* P = h.P + row0 * stride + col0;
  float* L32 = h.L32 + row0 * stride + col0;
  VF p[R][CV];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < CV; ++c) p[r][c] = Load(P + r * stride + c * kN);
  const auto store_tile = [&] {
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < CV; ++c) Store(p[r][c], P + r * stride + c * kN);
  };
  const float* vc = v + col0;
  float* oc = out + col0;
  for (int t0 = 0; t0 < n;) {
    // The segment ends after the next token whose absolute position is followed by a fold.
    const auto to_fold = kFoldPeriod - (pos0 + t0) % kFoldPeriod;
    const int t1 = static_cast<int>(std::min<std::int64_t>(n, t0 + to_fold));
    if (first_tile)
      WalkSegment<R, CV, true>(p, L32, stride, qT, kT, tile_stride, vc, vstride, oc, ostride, t0, t1);
    else
      WalkSegment<R, CV, false>(p, L32, stride, qT, kT, tile_stride, vc, vstride, oc, ostride, t0, t1);
    if (folds_after(pos0 + t1 - 1)) {
      store_tile();
      FoldBlock(P, L32, h.L64 + row0 * stride + col0, R, CV * kN, stride);
      for (int r = 0; r < R; ++r)
        for (int c = 0; c < CV; ++c) p[r][c] = Zero();
    }
    t0 = t1;
  }
  store_tile();
}

template <int R, int CV>
HWY_INLINE void WalkColumns(const HeadView& h, int col0, const float* qT, const float* kT,
                            int tile_stride, const float* v, std::int64_t vstride, float* out,
                            std::int64_t ostride, int n, std::int64_t pos0) {
  for (int row0 = 0; row0 < h.Dp; row0 += R)
    WalkTile<R, CV>(h, row0, col0, qT + (row0 / kTileRows) * tile_stride,
                    kT + (row0 / kTileRows) * tile_stride, tile_stride, v, vstride, out, ostride,
                    n, row0 == 0, pos0);
}

// Zp's trajectory over n tokens for G tiles of the input layout side by side (G independent
// chains of adds): each tile's kTileRows rows as one vector, or several where vectors are
// narrower, in place of k. After it, kT holds Z32 + Zp as it stands after each token.
template <int G>
HWY_INLINE void TrajectoryTiles(const HeadView& h, int tile0, float* kT, int tile_stride, int n,
                                std::int64_t pos0) {
  const hn::CappedTag<float, kTileRows> d4;
  constexpr int kL = static_cast<int>(hn::MaxLanes(d4));
  static_assert(kTileRows % kL == 0, "a tile of the input layout is whole vectors");
  constexpr int kV = kTileRows / kL;
  using V4 = hn::Vec<decltype(d4)>;
  float* zp = h.Zp + tile0 * kTileRows;
  float* z32 = h.Z32 + tile0 * kTileRows;
  V4 z[G][kV], zc[G][kV];
  const auto load_z = [&] {
    for (int g = 0; g < G; ++g)
      for (int v = 0; v < kV; ++v) {
        z[g][v] = hn::LoadU(d4, zp + g * kTileRows + v * kL);
        zc[g][v] = hn::LoadU(d4, z32 + g * kTileRows + v * kL);
      }
  };
  const auto store_z = [&] {
    for (int g = 0; g < G; ++g)
      for (int v = 0; v < kV; ++v) hn::StoreU(z[g][v], d4, zp + g * kTileRows + v * kL);
  };
  load_z();
  float* kt = kT + tile0 * tile_stride;
  for (int t = 0; t < n; ++t, kt += kTileRows) {
    for (int g = 0; g < G; ++g)
      for (int v = 0; v < kV; ++v) {
        float* w = kt + g * tile_stride + v * kL;
        z[g][v] = hn::Add(z[g][v], hn::LoadU(d4, w));
        hn::StoreU(hn::Add(zc[g][v], z[g][v]), d4, w);  // now Z32 + Zp after token t
      }
    if (folds_after(pos0 + t)) {
      store_z();
      FoldBlock(zp, z32, h.Z64 + tile0 * kTileRows, 1, G * kTileRows, G * kTileRows);
      load_z();
    }
  }
  store_z();
}

// den(t) = sum over the rows i ascending of q'(t, i) w(t, i), one FMA chain per token, for the
// tokens [t0, t0 + m) one at a time.
HWY_INLINE void DenominatorsOneByOne(const HeadView& h, const float* qT, const float* wT,
                                     int tile_stride, int t0, int m, float* den) {
  for (int j = 0; j < m; ++j) {
    float d = 0.0f;
    for (int tile = 0; tile < h.Dp / kTileRows; ++tile) {
      const float* qt = qT + tile * tile_stride + (t0 + j) * kTileRows;
      const float* wt = wT + tile * tile_stride + (t0 + j) * kTileRows;
      for (int r = 0; r < kTileRows; ++r) d = std::fma(qt[r], wt[r], d);
    }
    den[j] = d;
  }
}

#if HWY_TARGET != HWY_SCALAR
// The same chains for kN tokens from t0, one token per lane. Four vectors hold the kN tokens'
// rows of one tile of the layout (a 128-bit block per token); a 4 x 4 transposition within each
// block turns them into one vector per row, so that each FMA advances every lane's chain by one
// row. Lane 4k + m then holds token t0 + m * (kN / 4) + k: den is written in token order.
HWY_INLINE void DenominatorsAcross(const HeadView& h, const float* qT, const float* wT,
                                   int tile_stride, int t0, float* den) {
  static_assert(kTileRows == 4 && kN % 4 == 0, "a tile of the layout is one 128-bit block");
  using D64 = hn::Repartition<std::uint64_t, DF>;
  const D64 d64;
  const auto rows_of = [&](const float* x, VF (&r)[4]) {
    const VF a = Load(x), b = Load(x + kN), c = Load(x + 2 * kN), d = Load(x + 3 * kN);
    const auto ab_lo = hn::BitCast(d64, hn::InterleaveLower(DF(), a, b));
    const auto cd_lo = hn::BitCast(d64, hn::InterleaveLower(DF(), c, d));
    const auto ab_hi = hn::BitCast(d64, hn::InterleaveUpper(DF(), a, b));
    const auto cd_hi = hn::BitCast(d64, hn::InterleaveUpper(DF(), c, d));
    r[0] = hn::BitCast(DF(), hn::InterleaveLower(d64, ab_lo, cd_lo));
    r[1] = hn::BitCast(DF(), hn::InterleaveUpper(d64, ab_lo, cd_lo));
    r[2] = hn::BitCast(DF(), hn::InterleaveLower(d64, ab_hi, cd_hi));
    r[3] = hn::BitCast(DF(), hn::InterleaveUpper(d64, ab_hi, cd_hi));
  };
  VF acc = Zero();
  for (int tile = 0; tile < h.Dp / kTileRows; ++tile) {
    VF q[4], w[4];
    rows_of(qT + tile * tile_stride + t0 * kTileRows, q);
    rows_of(wT + tile * tile_stride + t0 * kTileRows, w);
    for (int r = 0; r < kTileRows; ++r) acc = Fma(q[r], w[r], acc);
  }
  alignas(64) float lanes[kN];
  Store(acc, lanes);
  constexpr int kPer = kN / 4;  // tokens per vector of the layout
  for (int k = 0; k < kPer; ++k)
    for (int m = 0; m < 4; ++m) den[m * kPer + k] = lanes[4 * k + m];
}
#endif

// The denominators of n tokens, in the canonical order: first Zp's trajectory, token by token
// (in place of k), then per token one FMA chain over the rows, kN tokens at a time.
HWY_INLINE void WalkDenominators(const HeadView& h, const float* qT, float* kT, int tile_stride,
                                 float* out, std::int64_t ostride, int n, float eps,
                                 std::int64_t pos0) {
  const int tiles = h.Dp / kTileRows;  // even: Dp is a multiple of kRowPad
  static_assert(kRowPad % (2 * kTileRows) == 0, "the tiles pair up");
  int tile = 0;
  for (; tile + 4 <= tiles; tile += 4) TrajectoryTiles<4>(h, tile, kT, tile_stride, n, pos0);
  for (; tile < tiles; tile += 2) TrajectoryTiles<2>(h, tile, kT, tile_stride, n, pos0);
  alignas(64) float den[kN];
  for (int t0 = 0; t0 < n; t0 += kN) {
    const int m = std::min(kN, n - t0);
#if HWY_TARGET != HWY_SCALAR
    if (m == kN)
      DenominatorsAcross(h, qT, kT, tile_stride, t0, den);
    else
#endif
      DenominatorsOneByOne(h, qT, kT, tile_stride, t0, m, den);
    for (int j = 0; j < m; ++j)
      ScaleRow(out + (t0 + j) * ostride, 1.0f / (den[j] + eps), h.dvp);
  }
}

void WalkHead(const HeadView& h, const float* qT, float* kT, const float* v,
              std::int64_t vstride, float* out, std::int64_t ostride, int n, bool normalized,
              float eps, std::int64_t pos0) {
  assert(h.Dp % kRowPad == 0 && h.dvp % kTileCols == 0);
  if (n <= 0) return;
  const int tile_stride = static_cast<int>(tile_stride_of(n));
  constexpr int kCols = kWalkCols * kN;
  // Dp is a multiple of kRowPad, so register tiles of kWalkRows rows cover it.
  static_assert(kRowPad % kWalkRows == 0, "register tiles divide the padded rows");
  int col0 = 0;
  for (; col0 + kCols <= h.dvp; col0 += kCols)
    WalkColumns<kWalkRows, kWalkCols>(h, col0, qT, kT, tile_stride, v, vstride, out, ostride, n, pos0);
  // Leftover columns (dvp is a multiple of 16, a register tile may be wider), a vector at a time.
  for (; col0 < h.dvp; col0 += kN)
    WalkColumns<kTileRows, 1>(h, col0, qT, kT, tile_stride, v, vstride, out, ostride, n, pos0);
  if (normalized) WalkDenominators(h, qT, kT, tile_stride, out, ostride, n, eps, pos0);
}

// ---- The walk's input pass ----------------------------------------------------------------

// The kN / kTileRows tiles of one vector of features, `count` of them (the last vector of a
// head may reach past Dp), each to its own tile, `stride` floats apart. A one-lane vector is one
// feature: dst is then its own place within the tile.
HWY_INLINE void StoreTileRows(VF y, float* dst, std::int64_t stride, int count) {
  static_assert(kTileRows == 4, "a tile of the input layout is a 128-bit vector");
#if HWY_TARGET == HWY_SCALAR  // one lane: no halves to take
  dst[0] = hn::GetLane(y);
  (void)stride;
  (void)count;
#else
  if constexpr (kN == 4) {
    Store(y, dst);
  } else if constexpr (kN == 8) {
    const hn::Half<DF> d4;
    hn::StoreU(hn::LowerHalf(d4, y), d4, dst);
    if (count > 1) hn::StoreU(hn::UpperHalf(d4, y), d4, dst + stride);
  } else if constexpr (kN == 16) {
    const hn::Half<DF> d8;
    const hn::Half<decltype(d8)> d4;
    const auto lo = hn::LowerHalf(d8, y);
    hn::StoreU(hn::LowerHalf(d4, lo), d4, dst);
    if (count > 1) hn::StoreU(hn::UpperHalf(d4, lo), d4, dst + stride);
    if (count > 2) {
      const auto hi = hn::UpperHalf(d8, y);
      hn::StoreU(hn::LowerHalf(d4, hi), d4, dst + 2 * stride);
      if (count > 3) hn::StoreU(hn::UpperHalf(d4, hi), d4, dst + 3 * stride);
    }
  } else {
    static_assert(kN % kTileRows == 0, "a vector is whole tiles");
  }
#endif
}

#if HWY_TARGET != HWY_SCALAR
// Four tokens' vectors of the same kN features (a: token t, b: t + 1, ...) as the layout's
// lines: for each of the vector's kN / kTileRows tiles, the four tokens' kTileRows features,
// 16 floats in a row at dst + tile * stride. Whole stores, in place of one 16-byte store per
// token and tile: with 16-byte pieces the stores, not the exponentials, bounded the pass.
template <int kLanes = kN>  // a template, so that only the branch for kN is compiled
HWY_INLINE void StoreFourTokens(VF a, VF b, VF c, VF d, float* dst, std::int64_t stride) {
  static_assert(kTileRows == 4, "a tile of the input layout is a 128-bit vector");
  const DF df;
  if constexpr (kLanes == 16) {
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
    // A 4 x 4 transposition of 128-bit blocks.
    const VF ab_lo = hn::ConcatLowerLower(df, b, a);  // a0 a1 b0 b1
    const VF cd_lo = hn::ConcatLowerLower(df, d, c);  // c0 c1 d0 d1
    const VF ab_hi = hn::ConcatUpperUpper(df, b, a);  // a2 a3 b2 b3
    const VF cd_hi = hn::ConcatUpperUpper(df, d, c);  // c2 c3 d2 d3
    const auto even = [](VF x, VF y) { return VF{_mm512_shuffle_f32x4(x.raw, y.raw, 0x88)}; };
    const auto odd = [](VF x, VF y) { return VF{_mm512_shuffle_f32x4(x.raw, y.raw, 0xDD)}; };
    hn::StoreU(even(ab_lo, cd_lo), df, dst);               // a0 b0 c0 d0
    hn::StoreU(odd(ab_lo, cd_lo), df, dst + stride);       // a1 b1 c1 d1
    hn::StoreU(even(ab_hi, cd_hi), df, dst + 2 * stride);  // a2 b2 c2 d2
    hn::StoreU(odd(ab_hi, cd_hi), df, dst + 3 * stride);   // a3 b3 c3 d3
#else
    static_assert(kLanes != 16, "a 16-lane target without its block shuffle");
#endif
  } else if constexpr (kLanes == 8) {
    hn::StoreU(hn::ConcatLowerLower(df, b, a), df, dst);               // a0 b0
    hn::StoreU(hn::ConcatLowerLower(df, d, c), df, dst + kN);          // c0 d0
    hn::StoreU(hn::ConcatUpperUpper(df, b, a), df, dst + stride);      // a1 b1
    hn::StoreU(hn::ConcatUpperUpper(df, d, c), df, dst + stride + kN); // c1 d1
  } else {  // a vector is one tile: the four tokens' rows are already in order
    static_assert(kLanes == kTileRows, "a vector of 4, 8 or 16 lanes");
    hn::StoreU(a, df, dst);
    hn::StoreU(b, df, dst + kTileRows);
    hn::StoreU(c, df, dst + 2 * kTileRows);
    hn::StoreU(d, df, dst + 3 * kTileRows);
    (void)stride;
  }
}
#endif

// Finiteness on the bits: the exponent field of each input, kept as a running maximum per lane;
// all ones (0x7f800000) is Inf or NaN.
template <InputMap kMap, bool kScale>
HWY_INLINE bool GatherTilesOf(const float* x, std::int64_t ldx, int n, int n_heads, int d,
                              float scale, float* tiles, std::int64_t head_stride, int Dp,
                              const RowsAhead& ahead) {
  const VF sv = Set(scale);
  const auto exponent = hn::Set(DU(), 0x7f800000u);
  auto seen = hn::Zero(DU());
  const std::int64_t tile_stride = tile_stride_of(n);
  const int tiles_per_head = Dp / kTileRows;
  const auto map = [&](VF v) {
    seen = hn::Max(seen, hn::And(hn::BitCast(DU(), v), exponent));
    VF y = v;
    if constexpr (kMap == InputMap::kEluPlusOne) y = EluPlusOneOf(v);
    else if constexpr (kMap == InputMap::kRelu) y = ReluOf(v);
    if constexpr (kScale) y = hn::Mul(y, sv);
    return y;
  };
  const int full = d / kN * kN;
  // Features [i0, Dp) of token t, head j, one vector at a time.
  const auto token_head = [&](int t, int j, int i0) {
    const float* xh = x + static_cast<std::int64_t>(t) * ldx + static_cast<std::int64_t>(j) * d;
    float* dst = tiles + j * head_stride + static_cast<std::int64_t>(t) * kTileRows;
    int i = i0;
    for (; i < full; i += kN)
      StoreTileRows(map(Load(xh + i)), dst + (i / kTileRows) * tile_stride + i % kTileRows, tile_stride,
                    std::min(kN / kTileRows, tiles_per_head - i / kTileRows));
    if (i < d) {
      // The tail through the same code on a zero-padded copy; the lanes past d become 0, the
      // padding of the feature rows.
      alignas(64) float tmp[kN] = {};
      std::memcpy(tmp, xh + i, sizeof(float) * static_cast<std::size_t>(d - i));
      const VF y = hn::IfThenElseZero(hn::FirstN(DF(), static_cast<std::size_t>(d - i)),
                                      map(Load(tmp)));
      StoreTileRows(y, dst + (i / kTileRows) * tile_stride + i % kTileRows, tile_stride,
                    std::min(kN / kTileRows, tiles_per_head - i / kTileRows));
      i += kN;
    }
    // Padding the vectors did not reach (narrow vectors, d well below Dp): written as 0 each
    // time, since the layout's strides change with n and the last chunk's tiles overlap
    // the places where an earlier chunk's features were.
    for (; i < Dp; ++i) dst[(i / kTileRows) * tile_stride + i % kTileRows] = 0.0f;
  };
  int t = 0;
#if HWY_TARGET != HWY_SCALAR
  // Four tokens at a time: their whole vectors of features as whole lines of the layout (each
  // vector's tiles lie within Dp, since full <= d <= Dp), then each token's tail.
  for (; t + 4 <= n; t += 4) {
    const float* r0 = x + static_cast<std::int64_t>(t) * ldx;
    for (int j = 0; j < n_heads; ++j) {
      const float* xh = r0 + static_cast<std::int64_t>(j) * d;
      float* dst = tiles + j * head_stride + static_cast<std::int64_t>(t) * kTileRows;
      for (const auto& rows : ahead.rows) {
        if (rows.x == nullptr) continue;
        const float* a = rows.x + static_cast<std::int64_t>(t) * rows.ld +
                         static_cast<std::int64_t>(j) * rows.d;
        constexpr int kLine = 64 / static_cast<int>(sizeof(float));
        for (int k = 0; k < 4; ++k, a += rows.ld)
          for (int c = 0; c < rows.d; c += kLine) {
            if (rows.write) __builtin_prefetch(a + c, 1, 3);
            else __builtin_prefetch(a + c, 0, 3);
          }
      }
      for (int i = 0; i < full; i += kN) {
        const VF a = map(Load(xh + i)), b = map(Load(xh + ldx + i));
        const VF c = map(Load(xh + 2 * ldx + i)), e = map(Load(xh + 3 * ldx + i));
        StoreFourTokens(a, b, c, e, dst + (i / kTileRows) * tile_stride, tile_stride);
      }
      if (full < Dp)
        for (int k = 0; k < 4; ++k) token_head(t + k, j, full);
    }
  }
#else
  (void)ahead;  // one token at a time: nothing to hide the fetches behind
#endif
  for (; t < n; ++t)
    for (int j = 0; j < n_heads; ++j) token_head(t, j, 0);
  return hn::AllFalse(DU(), hn::Eq(seen, exponent));
}

bool GatherTiles(const float* x, std::int64_t ldx, int n, int n_heads, int d, InputMap map,
                 float scale, float* tiles, std::int64_t head_stride, int Dp,
                 const RowsAhead& ahead) {
  assert(Dp % kRowPad == 0 && d <= Dp && map != InputMap::kNone);
  const bool s = scale != 1.0f;
  switch (map) {
    case InputMap::kRelu:
      return s ? GatherTilesOf<InputMap::kRelu, true>(x, ldx, n, n_heads, d, scale, tiles, head_stride, Dp, ahead)
               : GatherTilesOf<InputMap::kRelu, false>(x, ldx, n, n_heads, d, scale, tiles, head_stride, Dp, ahead);
    case InputMap::kIdentity:
      return s ? GatherTilesOf<InputMap::kIdentity, true>(x, ldx, n, n_heads, d, scale, tiles, head_stride, Dp, ahead)
               : GatherTilesOf<InputMap::kIdentity, false>(x, ldx, n, n_heads, d, scale, tiles, head_stride, Dp, ahead);
    default:
      return s ? GatherTilesOf<InputMap::kEluPlusOne, true>(x, ldx, n, n_heads, d, scale, tiles, head_stride, Dp, ahead)
               : GatherTilesOf<InputMap::kEluPlusOne, false>(x, ldx, n, n_heads, d, scale, tiles, head_stride, Dp, ahead);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace recur::kernels
HWY_AFTER_NAMESPACE();

#endif  // RECUR_KERNELS_LINEAR_INL_H_
