// The vector vocabulary of recur's kernels, compiled once per instruction set (Highway target).
//
// Every operation here gives the same bytes on every target, whatever its vector width:
//   * Fma is one fused multiply-add with a single rounding. Highway's MulAdd is fused on AVX2,
//     AVX-512 and NEON, but on its emulated target it multiplies and adds with two roundings, so
//     there each lane goes through std::fma instead (exact, and slow where the CPU has no FMA).
//   * RoundEven rounds with the add-and-subtract of 1.5 * 2^23, which is ties-to-even on any
//     IEEE machine for |x| < 2^22, rather than with a target's own rounding instruction.
//   * Comparisons choose with IfThenElse, never Min/Max on values that may be equal with
//     different signs (x86's max and std::max disagree about -0 and +0).
//   * Widening bfloat16 and IEEE half to float is exact on every target.
// Reductions across lanes never happen inside a vector: a kernel either gives each lane its own
// output (a column, a token) or sums through SumChains, whose order is written for 16 chains
// whatever the width (docs/design.md, "One reduction order").
//
// Highway's per-target headers are included once per target: the guard toggles with
// HWY_TARGET_TOGGLE.
#if defined(RECUR_KERNELS_OPS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef RECUR_KERNELS_OPS_INL_H_
#undef RECUR_KERNELS_OPS_INL_H_
#else
#define RECUR_KERNELS_OPS_INL_H_
#endif

#include <cmath>
#include <cstdint>
#include <cstring>

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace recur::kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;
using DI = hn::RebindToSigned<DF>;
using DU = hn::RebindToUnsigned<DF>;
/// Lanes of a float vector on this target: 4 (SSE-class, NEON, emulated), 8 (AVX2), 16 (AVX-512).
inline constexpr int kN = static_cast<int>(hn::MaxLanes(DF()));

#if HWY_TARGET == HWY_EMU128 || HWY_TARGET == HWY_SCALAR || HWY_TARGET == HWY_SSE4 || \
    HWY_TARGET == HWY_SSSE3
inline constexpr bool kNativeFma = false;
#else
inline constexpr bool kNativeFma = true;
#endif

HWY_INLINE VF Zero() { return hn::Zero(DF()); }
HWY_INLINE VF Set(float x) { return hn::Set(DF(), x); }
HWY_INLINE VF Load(const float* p) { return hn::LoadU(DF(), p); }
HWY_INLINE VF Broadcast(const float* p) { return hn::Set(DF(), *p); }
HWY_INLINE void Store(VF v, float* p) { hn::StoreU(v, DF(), p); }

/// a * b + c with one rounding, on every target.
HWY_INLINE VF Fma(VF a, VF b, VF c) {
  if constexpr (kNativeFma) {
    return hn::MulAdd(a, b, c);
  } else if constexpr (kN == 1) {
    return Set(std::fma(hn::GetLane(a), hn::GetLane(b), hn::GetLane(c)));
  } else {
    alignas(64) float x[kN], y[kN], z[kN];
    hn::Store(a, DF(), x);
    hn::Store(b, DF(), y);
    hn::Store(c, DF(), z);
    for (int l = 0; l < kN; ++l) z[l] = std::fma(x[l], y[l], z[l]);
    return hn::Load(DF(), z);
  }
}

/// Per lane: x > 0 ? a : b.
HWY_INLINE VF IfPositive(VF x, VF a, VF b) { return hn::IfThenElse(hn::Gt(x, Zero()), a, b); }

/// Round to the nearest integer, ties to even, for |x| < 2^22.
HWY_INLINE VF RoundEven(VF x) {
  const VF magic = Set(12582912.0f);  // 1.5 * 2^23
  return hn::Sub(hn::Add(x, magic), magic);
}

/// exp(x) to about 2 ulp for x in [-87, 88]; inputs below -87 give a tiny positive number, not
/// 0. A range reduction x = n ln2 + r with ln2 split in two parts, then a degree-6 polynomial.
/// n = round(x log2 e), ties to even, comes from adding 1.5 * 2^23: the sum's low bits are n
/// itself, so 2^n's exponent field is the sum's bits less a constant, with no conversion.
/// With kClampHigh false, the clamp at 88 is left out: for callers that discard the lanes above
/// 0 (elu+1); every lane at or below 88 is the same.
template <bool kClampHigh = true>
HWY_INLINE VF Exp(VF x) {
  x = hn::IfThenElse(hn::Lt(x, Set(-87.0f)), Set(-87.0f), x);
  if constexpr (kClampHigh) x = hn::IfThenElse(hn::Gt(x, Set(88.0f)), Set(88.0f), x);
  const VF magic = Set(12582912.0f);  // 1.5 * 2^23, bits 0x4b400000
  const VF shifted = hn::Add(hn::Mul(x, Set(1.44269504088896341f)), magic);
  const VF n = hn::Sub(shifted, magic);
  VF r = Fma(n, Set(-0.693359375f), x);
  r = Fma(n, Set(2.12194440e-4f), r);
  VF p = Set(1.9875691500e-4f);
  p = Fma(p, r, Set(1.3981999507e-3f));
  p = Fma(p, r, Set(8.3334519073e-3f));
  p = Fma(p, r, Set(4.1665795894e-2f));
  p = Fma(p, r, Set(1.6666665459e-1f));
  p = Fma(p, r, Set(5.0000001201e-1f));
  const VF y = hn::Add(Fma(p, hn::Mul(r, r), r), Set(1.0f));
  // 2^n: n + 127 in the exponent field; n is within [-126, 127], shifted's bits are 0x4b400000 + n.
  const auto e = hn::Sub(hn::BitCast(DU(), shifted), hn::Set(DU(), 0x4b400000u - 127u));
  return hn::Mul(y, hn::BitCast(DF(), hn::ShiftLeft<23>(e)));
}

/// elu(x) + 1: x + 1 for x > 0, exp(x) otherwise. The one definition of the default feature map,
/// for its FeatureMap and for the walk's input pass alike.
HWY_INLINE VF EluPlusOneOf(VF v) {
  return IfPositive(v, hn::Add(v, Set(1.0f)), Exp</*kClampHigh=*/false>(v));
}
/// max(x, 0), written as a select (see IfPositive).
HWY_INLINE VF ReluOf(VF v) { return IfPositive(v, v, Zero()); }

/// erf(x) to about 2e-7 absolute: Abramowitz and Stegun's 7.1.26, erf(|x|) = 1 - p(t) exp(-x^2)
/// with t = 1 / (1 + 0.3275911 |x|), and the sign of x. Our own rather than the C library's, whose
/// erff rounds differently on different architectures.
HWY_INLINE VF Erf(VF x) {
  const VF ax = hn::Abs(x);
  const VF t = hn::Div(Set(1.0f), Fma(Set(0.3275911f), ax, Set(1.0f)));
  VF p = Set(1.061405429f);
  p = Fma(p, t, Set(-1.453152027f));
  p = Fma(p, t, Set(1.421413741f));
  p = Fma(p, t, Set(-0.284496736f));
  p = Fma(p, t, Set(0.254829592f));
  p = hn::Mul(p, t);
  const VF e = Exp(hn::Neg(hn::Mul(ax, ax)));
  return hn::CopySign(Fma(hn::Neg(p), e, Set(1.0f)), x);
}

/// 1 / (1 + exp(-x)).
HWY_INLINE VF Sigmoid(VF x) {
  const VF one = Set(1.0f);
  return hn::Div(one, hn::Add(one, Exp(hn::Sub(Zero(), x))));
}

/// kN bfloat16 values widened to float (exact): the 16 bits become the high half of a float.
HWY_INLINE VF LoadBF16(const std::uint16_t* p) {
  const hn::Rebind<std::uint16_t, DF> d16;
  return hn::BitCast(DF(), hn::ShiftLeft<16>(hn::PromoteTo(DU(), hn::LoadU(d16, p))));
}

/// kN IEEE half values widened to float (exact, subnormals included).
HWY_INLINE VF LoadF16(const std::uint16_t* p) {
  const hn::Rebind<hwy::float16_t, DF> dh;
  return hn::PromoteTo(DF(), hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(p)));
}

/// Applies op to n floats, a vector at a time; the tail goes through the same vector code on a
/// zero-padded copy. Only for per-lane ops, so that a value's result does not depend on where it
/// sits.
template <class Op>
HWY_INLINE void Map(const float* x, float* y, std::int64_t n, const Op& op) {
  std::int64_t i = 0;
  for (; i + kN <= n; i += kN) Store(op(Load(x + i)), y + i);
  if (i < n) {
    alignas(64) float tmp[kN] = {};
    const auto rest = static_cast<std::size_t>(n - i);
    std::memcpy(tmp, x + i, sizeof(float) * rest);
    Store(op(Load(tmp)), tmp);
    std::memcpy(y + i, tmp, sizeof(float) * rest);
  }
}

/// The canonical sum of n terms: 16 chains, chain c taking the terms i = 16 r + c in ascending r
/// (missing terms of the last round count as +0), then a fixed tree over the chains,
///   s[c] += s[c + 8], then s[c] += s[c + 4], s[c] += s[c + 2], s[0] + s[1].
/// A target of width kN carries the chains as 16 / kN vectors. term(i) returns the kN terms from
/// i; pad(i, m) returns the m < kN terms from i followed by zeros.
inline constexpr int kSumChains = 16;
template <class Term, class Pad>
HWY_INLINE float SumChains(int n, const Term& term, const Pad& pad) {
  static_assert(kSumChains % kN == 0, "the chains fill whole vectors");
  constexpr int kV = kSumChains / kN;
  VF acc[kV];
  for (int v = 0; v < kV; ++v) acc[v] = Zero();
  int i = 0;
  for (; i + kSumChains <= n; i += kSumChains)
    for (int v = 0; v < kV; ++v) acc[v] = hn::Add(acc[v], term(i + v * kN));
  for (int v = 0; v < kV && i < n; ++v, i += kN)
    acc[v] = hn::Add(acc[v], n - i >= kN ? term(i) : pad(i, n - i));
  alignas(64) float s[kSumChains];
  for (int v = 0; v < kV; ++v) Store(acc[v], s + v * kN);
  for (int width = kSumChains / 2; width >= 1; width /= 2)
    for (int c = 0; c < width; ++c) s[c] += s[c + width];
  return s[0];
}

}  // namespace HWY_NAMESPACE
}  // namespace recur::kernels
HWY_AFTER_NAMESPACE();

#endif  // RECUR_KERNELS_OPS_INL_H_
