// Ordered inner loops of the linear-attention recurrence, shared by step() and prefill().
//
// The canonical order (docs/design.md, "One reduction order"), which every path below follows:
//   * Per element of the partial state:  P[i][j] = fma(k_i, v_j, P[i][j]).
//   * Per output column j, one FMA chain over the feature rows i = 0, 1, ..., Dp-1:
//       acc_j = fma(q_i, L32[i][j] + P[i][j], acc_j), starting from acc_j = 0.
//   * Denominator: Z is one more column of the state, beside S, whose v is 1: after
//     Zp_i += k_i, one FMA chain over the rows, den = fma(q_i, Z32_i + Zp_i, den) from 0;
//     then o_j = acc_j * (1 / (den + eps)).
//   * After the token at absolute position p, if (p + 1) % kFoldPeriod == 0, every element
//     folds: L64 += P, L32 = float(L64), P = 0 (and likewise for Z).
// Because no reduction depends on how many tokens are processed together, a prefill of any
// shape leaves the same bytes as step() token by token; because none depends on how many lanes
// a vector has, every instruction set leaves the same bytes too (kernels.cpp compiles these
// functions once per instruction set; dispatch.h picks one).
#pragma once

#include <cstddef>
#include <cstdint>

namespace recur::kernels {

/// Tokens between folds of the float32 partial into the float64 long sum (absolute positions).
inline constexpr std::int64_t kFoldPeriod = 256;
/// Rows of a register tile in the prefill walk, and the padding of d_feature.
inline constexpr int kTileRows = 4;
inline constexpr int kRowPad = 8;
/// Columns of a register tile (two 8-lane vectors), and the padding of d_value.
inline constexpr int kTileCols = 16;

/// The walk's input layout for n tokens: Dp / kTileRows tiles, each the kTileRows features of
/// every token in turn, tile_stride_of(n) floats apart. The n · kTileRows floats of a tile are
/// followed by one cache line of padding: without it the tiles are exactly 1 KiB apart at the
/// default chunk of 64, so four of every sixteen share an offset modulo 4 KiB, and the input
/// pass's loads wait on possible aliases of its stores.
inline constexpr std::int64_t tile_stride_of(int n) { return std::int64_t{n} * kTileRows + 16; }
/// Floats that Dp features of up to n tokens take in that layout.
inline constexpr std::size_t tile_floats(int n, int Dp) {
  return static_cast<std::size_t>(Dp / kTileRows) * static_cast<std::size_t>(tile_stride_of(n));
}

/// One head's state, as pointers into the owning LinearState's buffer.
struct HeadView {
  float* P;      // (Dp, dvp) partial sum of k v^T since the last fold
  float* L32;    // (Dp, dvp) float32 rounding of L64, used by the output
  double* L64;   // (Dp, dvp) long sum of all folded partials
  float* Zp;     // (Dp) partial sum of k since the last fold; null in the unnormalized form
  float* Z32;    // (Dp)
  double* Z64;   // (Dp)
  int Dp;        // padded d_feature, a multiple of kRowPad
  int dvp;       // padded d_value, a multiple of kTileCols
};

/// Whether the token at absolute position `pos` is followed by a fold.
inline bool folds_after(std::int64_t pos) { return (pos + 1) % kFoldPeriod == 0; }

/// The feature maps the walk's input pass applies itself: the built-in elementwise ones, with
/// the same operations as their FeatureMap (so the same bytes). kNone: the caller maps.
enum class InputMap : int { kNone = 0, kEluPlusOne, kRelu, kIdentity };

/// The walk's input pass, one read of each input: n tokens of n_heads heads, d floats each
/// (head j of token t at x[t * ldx + j * d + i]), checked finite, mapped by `map` (not kNone),
/// multiplied by `scale` unless it is 1 (as map_heads does), and written in walk_head's layout:
/// head j's feature i of token t at tiles[j * head_stride + (i / kTileRows) * tile_stride_of(n) +
/// t * kTileRows + i % kTileRows]. Features d .. Dp-1 are written as 0; the padding after each
/// tile is not written. Returns false if any input is Inf or NaN; tiles are then partly written.
/// `ahead` names up to two sets of rows the caller reads or writes next (head j of token t at
/// x[t * ld + j * d], d floats): the pass asks for them from memory as it goes, since its own
/// work is arithmetic.
struct RowsAhead {
  struct Rows {
    const float* x = nullptr;
    std::int64_t ld = 0;
    int d = 0;
    bool write = false;  // to be written: fetched for ownership
  };
  Rows rows[2];
};
bool gather_tiles(const float* x, std::int64_t ldx, int n, int n_heads, int d, InputMap map,
                  float scale, float* tiles, std::int64_t head_stride, int Dp,
                  const RowsAhead& ahead = {});

/// One token through one head. q, k: (Dp) feature-mapped and scaled, zero-padded; v: (dvp)
/// zero-padded; out: (dvp). `pos` is the token's absolute position. No allocation.
void step_head(const HeadView& h, const float* q, const float* k, const float* v, float* out,
               bool normalized, float eps, std::int64_t pos);

/// n tokens through one head in tile-walk order. qT, kT: tile_floats(n, Dp) floats in the
/// layout above, the feature rows of each tile contiguous per token; v: n rows of dvp values, vstride apart; out:
/// n rows of dvp, ostride apart. `pos0` is the absolute position of the first token. kT is
/// scratch: the walk overwrites it. Bitwise equal to n calls of step_head.
void walk_head(const HeadView& h, const float* qT, float* kT, const float* v,
               std::int64_t vstride, float* out, std::int64_t ostride, int n, bool normalized,
               float eps, std::int64_t pos0);

}  // namespace recur::kernels
