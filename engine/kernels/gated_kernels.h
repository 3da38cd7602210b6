// Ordered inner loops of the decayed (gated) recurrence, shared by GlaRecurrence's step() and
// prefill(), and the elementwise gates of the models that use it.
//
// The canonical order (docs/gated-layers.md), which every path below follows:
//   * Per element of the state:  S[i][j] = fma(alpha_i, S[i][j], k_i * v_j)
//     (the product k_i * v_j rounded first, then one fused multiply-add: the larger term,
//     alpha_i * S[i][j], enters unrounded, and the chain through S is one FMA long).
//   * Per output column j, one FMA chain over the key rows i = 0, 1, ..., Dp-1 from 0:
//       acc_j = fma(q'_i, S[i][j], acc_j),  q'_i = scale * q_i rounded once.
// A vector holds columns side by side, never terms of one sum, so every instruction set gives
// the same bytes; the prefill walks tokens inside a register tile of S in the same order, so it
// gives the bytes of step() token by token. kernels.cpp compiles gated-inl.h per target.
#pragma once

#include <cstdint>

namespace recur::kernels {

/// One head's state: S (Dp, dvp) row-major; Dp a multiple of kRowPad, dvp of kTileCols
/// (linear_kernels.h). Padding rows and columns hold zeros. The walk covers `cols` columns from
/// S (a panel: S may point into the row, cols a multiple of kTileCols); step covers all dvp.
struct GatedHeadView {
  float* S;
  int Dp;
  int dvp;   // row stride of S
  int cols;  // columns the walk covers
};

/// One token through one head. q (scaled), k, alpha: (Dp), zero-padded; v: (dvp) zero-padded;
/// out: (dvp). alpha null means every row decays by gamma. No allocation.
void gated_step_head(const GatedHeadView& h, const float* q, const float* k, const float* v,
                     const float* alpha, float gamma, float* out);

/// n tokens through a panel of one head's columns. qT, kT, aT: in the walk's input layout
/// (linear_kernels.h, tile_stride_of), the rows of each tile contiguous per token (aT null: every row decays by gamma); v: n rows of h.cols values,
/// vstride apart; out: n rows of h.cols, ostride apart. Bitwise equal to n calls of
/// gated_step_head.
void gated_walk_head(const GatedHeadView& h, const float* qT, const float* kT, const float* aT,
                     float gamma, const float* v, std::int64_t vstride, float* out,
                     std::int64_t ostride, int n);

}  // namespace recur::kernels
