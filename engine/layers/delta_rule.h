// The delta-rule mixer (engine/layers/): a matrix of state per head, walked over a sequence's
// rows by kernels::delta_walk_head in its one order (docs/delta-rule.md), the heads split over
// threads. RWKV-7's time mix and the Gated DeltaNet mixer compose it: each computes the walk's
// inputs from its own projections, and reads its output.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/delta_kernels.h"

namespace recur::model {

/// The delta rule over n_heads heads. Per head h and token, with S_h (d_v, d_k):
///   S_h = S_h diag(w) + (S_h a) b^T + v k^T,   y = S_h r
/// (kernels/delta_kernels.h gives the order of every operation). Heads share a key head in
/// groups of `group` (Gated DeltaNet's value heads over its key heads): head h reads a, k and r
/// of key head h / group, and its own w, b and v.
struct DeltaRuleMixer {
  int n_heads = 0;
  int d_k = 0;  // a multiple of 16 (the kernel's chains): a caller with another width pads k, a,
                // b, r and w with zeros, which keeps S's padding columns zero
  int d_v = 0;
  int group = 1;
  bool decay_per_token = false;  // w: one decay per head and token (Gated DeltaNet's alpha)

  /// Floats of one sequence's state, S (n_heads, d_v, d_k): zero at the sequence's start.
  std::size_t state_floats() const {
    return std::size_t(n_heads) * std::size_t(d_v) * std::size_t(d_k);
  }

  /// Walks `count` rows of heads [begin, end) through the state S (state_floats()) and writes
  /// their read-outs y, rows y_stride floats apart. x points at head 0 of the first row: a row
  /// holds the heads side by side, w n_heads * d_k floats (n_heads when decay_per_token), b
  /// n_heads * d_k, v and y n_heads * d_v, a, k and r (n_heads / group) * d_k. Heads are
  /// independent, so callers split them over their threads (each range with the stages around
  /// the walk that work per head) and no byte depends on the split; a single row's walk is
  /// worth splitting too, each head's state being read from memory and written back.
  void walk_heads(float* S, const kernels::DeltaInputs& x, float* y, std::int64_t y_stride,
                  int count, int begin, int end) const;
};

}  // namespace recur::model
