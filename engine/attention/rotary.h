// Rotary embeddings' sin and cos, computed the same way by every layer that turns pairs (Based's
// sliding windows, fla's softmax attention layers, RetNet): one routine, shared.
#pragma once

namespace recur {

/// sin and cos of x (finite, >= 0) in double by a fixed sequence of IEEE operations (Cody-Waite
/// reduction by pi/2 in three parts, fdlibm's polynomials): the same bits on every machine. The
/// error is about 1e-16 plus 2^-53 x (the reduction's, exact below x = 2^20 pi/2 only): far
/// below float's resolution for the angles rotary meets.
void sincos_fixed(double x, double* sin_out, double* cos_out);

}  // namespace recur
