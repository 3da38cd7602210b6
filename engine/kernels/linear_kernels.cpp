#include "kernels/linear_kernels.h"

#include <algorithm>
#include <cassert>

#include "kernels/simd.h"

namespace recur::kernels {
namespace {

// Eight feature rows of q or k. In step they are contiguous; in the walk a group of eight rows
// spans two tiles of four, so it is loaded as two halves. Both give the same eight lanes.
struct RowLoader {
  const float* p;
  F8 operator()(int r) const { return load8(p + r * kLanes); }
};
struct TileLoader {
  const float* p;   // first tile of this token: p[tile * tile_stride + row]
  int tile_stride;  // n * kTileRows
  F8 operator()(int r) const {
    static_assert(2 * kTileRows == kLanes, "a lane group is two tiles");
    return load8_halves(p + (2 * r) * tile_stride, p + (2 * r + 1) * tile_stride);
  }
};

// Zp += k, then the denominator q . (Z32 + Zp) in the canonical order (lane chains, fixed tree).
template <class LoadQ, class LoadK>
inline float update_z_and_den(float* Zp, const float* Z32, const LoadQ& q, const LoadK& k,
                              int Dp) {
  F8 acc = zero8();
  for (int r = 0; r < Dp / kLanes; ++r) {
    const F8 zp = add8(load8(Zp + r * kLanes), k(r));
    store8(Zp + r * kLanes, zp);
    acc = fma8(q(r), add8(load8(Z32 + r * kLanes), zp), acc);
  }
  return hsum8(acc);
}

inline void scale_row(float* out, float s, int dvp) {
  const F8 sv = broadcast8(s);
  for (int c = 0; c < dvp; c += kLanes) store8(out + c, mul8(load8(out + c), sv));
}

// L64 += P, L32 = float(L64), P = 0 over a block of rows x cols of a row-major (., stride) array.
inline void fold_block(float* P, float* L32, double* L64, int rows, int cols, int stride) {
  for (int i = 0; i < rows; ++i) {
    for (int j = 0; j < cols; ++j) {
      const int e = i * stride + j;
      L64[e] += static_cast<double>(P[e]);
      L32[e] = static_cast<float>(L64[e]);
      P[e] = 0.0f;
    }
  }
}

inline void fold_z(const HeadView& h) { fold_block(h.Zp, h.Z32, h.Z64, 1, h.Dp, h.Dp); }

// Step over a group of NV column vectors: every feature row once, the accumulators in registers.
template <int NV>
inline void step_columns(const HeadView& h, const float* q, const float* k, const float* v,
                         float* out, int col) {
  F8 acc[NV];
  for (int c = 0; c < NV; ++c) acc[c] = zero8();
  float* P = h.P + col;
  const float* L32 = h.L32 + col;
  for (int i = 0; i < h.Dp; ++i, P += h.dvp, L32 += h.dvp) {
    const F8 kb = broadcast8(k + i);
    const F8 qb = broadcast8(q + i);
#pragma GCC unroll 8
    for (int c = 0; c < NV; ++c) {
      const F8 p = fma8(kb, load8(v + col + c * kLanes), load8(P + c * kLanes));
      store8(P + c * kLanes, p);
      acc[c] = fma8(qb, add8(load8(L32 + c * kLanes), p), acc[c]);
    }
  }
  for (int c = 0; c < NV; ++c) store8(out + col + c * kLanes, acc[c]);
}

// One register tile (kTileRows rows x kTileCols columns) of P walks tokens [t0, t1), between
// two folds. The output columns carry the FMA chain from the previous tile (rows above)
// through memory. L32 is constant over the segment, so a local copy keeps its addresses
// fixed and frees the registers that row pointers would take.
template <bool kFirstTile>
inline void walk_segment(F8 (&p)[kTileRows][2], const float* L32, int stride, const float* qT,
                         const float* kT, const float* v, float* out, int t0, int t1) {
  alignas(64) float l32[kTileRows][kTileCols];
  for (int r = 0; r < kTileRows; ++r)
    for (int c = 0; c < kTileCols; ++c) l32[r][c] = L32[r * stride + c];
  const float* kt = kT + t0 * kTileRows;
  const float* qt = qT + t0 * kTileRows;
  const float* vt = v + static_cast<std::int64_t>(t0) * stride;
  float* ot = out + static_cast<std::int64_t>(t0) * stride;
  for (int t = t0; t < t1; ++t, kt += kTileRows, qt += kTileRows, vt += stride, ot += stride) {
    const F8 v0 = load8(vt), v1 = load8(vt + kLanes);
    F8 a0 = kFirstTile ? zero8() : load8(ot);
    F8 a1 = kFirstTile ? zero8() : load8(ot + kLanes);
#pragma GCC unroll 4
    for (int r = 0; r < kTileRows; ++r) {
      const F8 kb = broadcast8(kt + r);
      p[r][0] = fma8(kb, v0, p[r][0]);
      p[r][1] = fma8(kb, v1, p[r][1]);
      const F8 qb = broadcast8(qt + r);
      a0 = fma8(qb, add8(load8(l32[r]), p[r][0]), a0);
      a1 = fma8(qb, add8(load8(l32[r] + kLanes), p[r][1]), a1);
    }
    store8(ot, a0);
    store8(ot + kLanes, a1);
  }
}

inline void walk_tile(const HeadView& h, int row0, int col0, const float* qT, const float* kT,
                      const float* v, float* out, int n, bool first_tile, std::int64_t pos0) {
  const int stride = h.dvp;
  float* P = h.P + row0 * stride + col0;
  float* L32 = h.L32 + row0 * stride + col0;
  F8 p[kTileRows][2];
  for (int r = 0; r < kTileRows; ++r) {
    p[r][0] = load8(P + r * stride);
    p[r][1] = load8(P + r * stride + kLanes);
  }
  const auto store_tile = [&] {
    for (int r = 0; r < kTileRows; ++r) {
      store8(P + r * stride, p[r][0]);
      store8(P + r * stride + kLanes, p[r][1]);
    }
  };
  const float* vc = v + col0;
  float* oc = out + col0;
  for (int t0 = 0; t0 < n;) {
    // The segment ends after the next token whose absolute position is followed by a fold.
    const auto to_fold = kFoldPeriod - (pos0 + t0) % kFoldPeriod;
    const int t1 = static_cast<int>(std::min<std::int64_t>(n, t0 + to_fold));
    if (first_tile)
      walk_segment<true>(p, L32, stride, qT, kT, vc, oc, t0, t1);
    else
      walk_segment<false>(p, L32, stride, qT, kT, vc, oc, t0, t1);
    if (folds_after(pos0 + t1 - 1)) {
      store_tile();
      fold_block(P, L32, h.L64 + row0 * stride + col0, kTileRows, kTileCols, stride);
      for (int r = 0; r < kTileRows; ++r) p[r][0] = p[r][1] = zero8();
    }
    t0 = t1;
  }
  store_tile();
}

}  // namespace

void step_head(const HeadView& h, const float* q, const float* k, const float* v, float* out,
               bool normalized, float eps, std::int64_t pos) {
  assert(h.Dp % kRowPad == 0 && h.dvp % kTileCols == 0);
  int col = 0;
  // Eight accumulators at a time: 64 columns per pass over the rows of P and L32.
  for (; col + 8 * kLanes <= h.dvp; col += 8 * kLanes) step_columns<8>(h, q, k, v, out, col);
  if (col + 4 * kLanes <= h.dvp) {
    step_columns<4>(h, q, k, v, out, col);
    col += 4 * kLanes;
  }
  if (col < h.dvp) step_columns<2>(h, q, k, v, out, col);
  if (normalized) {
    const float den = update_z_and_den(h.Zp, h.Z32, RowLoader{q}, RowLoader{k}, h.Dp);
    scale_row(out, 1.0f / (den + eps), h.dvp);
  }
  if (folds_after(pos)) {
    fold_block(h.P, h.L32, h.L64, h.Dp, h.dvp, h.dvp);
    if (normalized) fold_z(h);
  }
}

void walk_head(const HeadView& h, const float* qT, const float* kT, const float* v, float* out,
               int n, bool normalized, float eps, std::int64_t pos0) {
  assert(h.Dp % kRowPad == 0 && h.dvp % kTileCols == 0);
  if (n <= 0) return;
  const int tile_stride = n * kTileRows;
  for (int col0 = 0; col0 < h.dvp; col0 += kTileCols) {
    for (int tile = 0; tile < h.Dp / kTileRows; ++tile) {
      walk_tile(h, tile * kTileRows, col0, qT + tile * tile_stride, kT + tile * tile_stride, v,
                out, n, tile == 0, pos0);
    }
  }
  if (!normalized) return;
  for (int t = 0; t < n; ++t) {
    const float den = update_z_and_den(h.Zp, h.Z32, TileLoader{qT + t * kTileRows, tile_stride},
                                       TileLoader{kT + t * kTileRows, tile_stride}, h.Dp);
    scale_row(out + static_cast<std::int64_t>(t) * h.dvp, 1.0f / (den + eps), h.dvp);
    if (folds_after(pos0 + t)) fold_z(h);
  }
}

}  // namespace recur::kernels
