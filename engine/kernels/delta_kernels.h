// The delta rule's state update for one head, in one order on every instruction set: RWKV-7's
// update and Gated DeltaNet's (a special case of it), walked token by token (docs/delta-rule.md).
//
// Per head the state S is d_v x d_k float32, row-major by value index: row i (a d_k vector) is
// what value channel i remembers. Per token t, with w, a, b, k, r (d_k floats each) and v (d_v):
//     sa_i   = S_i . a                 (the OLD row)
//     S_i    = S_i * w + sa_i * b + v_i * k
//     y_t[i] = S_i . r                 (the NEW row)
// RWKV-7: a = -kk, b = kk * a_gate. Gated DeltaNet: w = alpha (one float per token, see
// DeltaInputs::w_per_token), a = k, b = -alpha * beta * k, v scaled by beta, r = q (scaled).
//
// The canonical order, which every target computes (kernels.cpp compiles delta-inl.h per target):
//   * A dot product x . y over d_k (a multiple of 16) runs as 16 chains: chain c takes the terms
//     j = c, c + 16, c + 32, ... in ascending j, each an FMA chain from +0:
//         s[c] = fma(x[j], y[j], s[c]),
//     and the 16 chains are added in one tree (that of the canonical sum, ops-inl.h SumChains):
//         s[c] += s[c + 8] (c < 8);  s[c] += s[c + 4] (c < 4);  s[c] += s[c + 2] (c < 2);
//         result = s[0] + s[1].
//   * The row update, per element j, three roundings in this order:
//         S_ij = fma(v_i, k_j, fma(sa_i, b_j, S_ij * w_j)).
// Rows are independent of one another, so the walk may visit them in any grouping and
// interleaving (delta-inl.h: groups of rows per token, panels of rows per block of tokens);
// none changes an operation, so a walk of n tokens gives the bytes of n walks of one token, and
// every target gives the scalar one's bytes.
#pragma once

#include <cstdint>

namespace recur::kernels {

/// One head's state: S (d_v, d_k) row-major, rows d_k floats apart.
struct DeltaHeadView {
  float* S;  // (d_v, d_k)
  int d_k;   // a multiple of 16
  int d_v;
};

/// The per-token inputs of a walk over n tokens, each a row per token `*_stride` floats apart,
/// so that a caller can pass its (T, H * d) projections at the head's offset directly.
struct DeltaInputs {
  const float* w;  // (n, d_k), or (n) one decay per token when w_per_token
  std::int64_t w_stride;
  bool w_per_token;  // w_t = w[t * w_stride] for every j: the same bytes as a broadcast row
  const float* a;    // (n, d_k)
  std::int64_t a_stride;
  const float* b;  // (n, d_k)
  std::int64_t b_stride;
  const float* k;  // (n, d_k)
  std::int64_t k_stride;
  const float* r;  // (n, d_k)
  std::int64_t r_stride;
  const float* v;  // (n, d_v)
  std::int64_t v_stride;
};

/// The chains of every dot product, and the largest d_k and d_v the walk takes.
inline constexpr int kDeltaChains = 16;
inline constexpr int kDeltaMaxDim = 1 << 16;

/// Walks n tokens through one head: updates h.S in place and writes y (n, d_v), rows y_stride
/// floats apart. Throws ShapeError if d_k is not a positive multiple of 16 (a caller with
/// another d_k pads k, a, b, r and w with zeros, which adds only +0 terms and keeps the padding
/// columns of S at 0) or d_v is out of range; ArgumentError for a null pointer, a negative n
/// or stride, or a y_stride below d_v when n > 1. The state is untouched then. An input stride
/// of 0 repeats one row for every token. No allocation. Heads are independent: threads may walk
/// different heads at once. Bitwise equal to n calls with n = 1 (delta_step_head).
void delta_walk_head(const DeltaHeadView& h, const DeltaInputs& x, float* y,
                     std::int64_t y_stride, int n);

/// One token: the walk with n = 1 (strides unused).
inline void delta_step_head(const DeltaHeadView& h, const DeltaInputs& x, float* y) {
  delta_walk_head(h, x, y, 0, 1);
}

}  // namespace recur::kernels
