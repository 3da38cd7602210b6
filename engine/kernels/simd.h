// An 8-lane float vector: the unit in which recur's canonical reduction order is defined.
//
// Every kernel whose result must not depend on chunking is written against F8, never against
// raw intrinsics, so that the step and prefill paths share one sequence of roundings. With AVX2
// and FMA the type wraps __m256; otherwise it is an array of eight floats whose operations use
// std::fma and plain IEEE adds, which round exactly as the vector instructions do. A build
// without AVX2 is slower but produces the same bytes.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__AVX2__) && defined(__FMA__)
#define RECUR_SIMD_AVX2 1
#include <immintrin.h>
#else
#define RECUR_SIMD_AVX2 0
#endif

namespace recur::kernels {

inline constexpr int kLanes = 8;

/// Where load16_bf16 expects column c (0-15) of a group of sixteen: within each 128-bit half,
/// unpacking takes the low four and the high four values, so columns 4-7 and 8-11 trade places.
inline int bf16_unpack_slot(int c) { return c < 4 || c >= 12 ? c : c < 8 ? c + 4 : c - 4; }

/// IEEE half to float, exactly (subnormals, infinities and NaN included).
inline float half_to_float(std::uint16_t x) {
  const std::uint32_t sign = static_cast<std::uint32_t>(x & 0x8000u) << 16;
  const std::uint32_t exp = (x >> 10) & 0x1fu;
  const std::uint32_t man = x & 0x3ffu;
  std::uint32_t u;
  if (exp == 0) {
    const float f = static_cast<float>(man) * 5.9604644775390625e-8f;  // man * 2^-24, exact
    std::memcpy(&u, &f, 4);
    u |= sign;
  } else if (exp == 31) {
    u = sign | 0x7f800000u | (man << 13);
  } else {
    u = sign | ((exp + 112u) << 23) | (man << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

#if RECUR_SIMD_AVX2

struct F8 {
  __m256 v;
};

inline F8 zero8() { return {_mm256_setzero_ps()}; }
inline F8 broadcast8(float x) { return {_mm256_set1_ps(x)}; }
inline F8 broadcast8(const float* p) { return {_mm256_broadcast_ss(p)}; }
inline F8 load8(const float* p) { return {_mm256_loadu_ps(p)}; }
/// Lanes 0-3 from lo, lanes 4-7 from hi.
inline F8 load8_halves(const float* lo, const float* hi) {
  return {_mm256_set_m128(_mm_loadu_ps(hi), _mm_loadu_ps(lo))};
}
inline void store8(float* p, F8 a) { _mm256_storeu_ps(p, a.v); }
/// Sixteen bfloat16 values widened to float (exact) in one load and two unpacks. The values are
/// stored in the order bf16_unpack_slot() gives: lo receives columns 0-7, hi columns 8-15.
inline void load16_bf16(const std::uint16_t* p, F8& lo, F8& hi) {
  const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  const __m256i z = _mm256_setzero_si256();
  lo.v = _mm256_castsi256_ps(_mm256_unpacklo_epi16(z, x));
  hi.v = _mm256_castsi256_ps(_mm256_unpackhi_epi16(z, x));
}
/// Eight IEEE half values widened to float (exact).
#if defined(__F16C__)
inline F8 load8_f16(const std::uint16_t* p) {
  return {_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)))};
}
#else
inline F8 load8_f16(const std::uint16_t* p) {
  alignas(32) float tmp[kLanes];
  for (int l = 0; l < kLanes; ++l) tmp[l] = half_to_float(p[l]);
  return {_mm256_load_ps(tmp)};
}
#endif
inline F8 add8(F8 a, F8 b) { return {_mm256_add_ps(a.v, b.v)}; }
inline F8 sub8(F8 a, F8 b) { return {_mm256_sub_ps(a.v, b.v)}; }
inline F8 mul8(F8 a, F8 b) { return {_mm256_mul_ps(a.v, b.v)}; }
inline F8 div8(F8 a, F8 b) { return {_mm256_div_ps(a.v, b.v)}; }
/// a * b + c with a single rounding.
inline F8 fma8(F8 a, F8 b, F8 c) { return {_mm256_fmadd_ps(a.v, b.v, c.v)}; }
inline F8 max8(F8 a, F8 b) { return {_mm256_max_ps(a.v, b.v)}; }
inline F8 min8(F8 a, F8 b) { return {_mm256_min_ps(a.v, b.v)}; }
/// Per lane: mask ? a : b, with mask = (x > 0).
inline F8 select_positive8(F8 x, F8 a, F8 b) {
  const __m256 mask = _mm256_cmp_ps(x.v, _mm256_setzero_ps(), _CMP_GT_OQ);
  return {_mm256_blendv_ps(b.v, a.v, mask)};
}
/// Round to the nearest integer, ties to even (the default IEEE mode).
inline F8 round8(F8 a) {
  return {_mm256_round_ps(a.v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)};
}
/// 2^n for integral n in [-126, 127], built from the exponent bits.
inline F8 exp2_int8(F8 n) {
  const __m256i e = _mm256_add_epi32(_mm256_cvtps_epi32(n.v), _mm256_set1_epi32(127));
  return {_mm256_castsi256_ps(_mm256_slli_epi32(e, 23))};
}
/// Sum of the eight lanes in a fixed tree: ((0+4)+(2+6)) + ((1+5)+(3+7)).
inline float hsum8(F8 a) {
  const __m128 lo = _mm256_castps256_ps128(a.v);
  const __m128 hi = _mm256_extractf128_ps(a.v, 1);
  const __m128 s4 = _mm_add_ps(lo, hi);                          // (0+4, 1+5, 2+6, 3+7)
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));       // (s0+s2, s1+s3, ..)
  const __m128 s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 0x1));  // (s0+s2)+(s1+s3)
  return _mm_cvtss_f32(s1);
}

#else  // portable emulation, bit-identical to the AVX2 path

struct F8 {
  float v[kLanes];
};

#define RECUR_F8_MAP(expr)                                    \
  F8 r;                                                       \
  for (int l = 0; l < kLanes; ++l) r.v[l] = (expr);           \
  return r

inline F8 zero8() { RECUR_F8_MAP(0.0f); }
inline F8 broadcast8(float x) { RECUR_F8_MAP(x); }
inline F8 broadcast8(const float* p) { RECUR_F8_MAP(*p); }
inline F8 load8(const float* p) { RECUR_F8_MAP(p[l]); }
inline F8 load8_halves(const float* lo, const float* hi) { RECUR_F8_MAP(l < 4 ? lo[l] : hi[l - 4]); }
inline void store8(float* p, F8 a) { std::memcpy(p, a.v, sizeof a.v); }
inline F8 load8_f16(const std::uint16_t* p) { RECUR_F8_MAP(half_to_float(p[l])); }
inline float bf16_bits_to_float(std::uint16_t h) {
  const std::uint32_t bits = static_cast<std::uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}
inline void load16_bf16(const std::uint16_t* p, F8& lo, F8& hi) {
  for (int l = 0; l < kLanes; ++l) {
    lo.v[l] = bf16_bits_to_float(p[l < 4 ? l : l + 4]);
    hi.v[l] = bf16_bits_to_float(p[l < 4 ? l + 4 : l + 8]);
  }
}
inline F8 add8(F8 a, F8 b) { RECUR_F8_MAP(a.v[l] + b.v[l]); }
inline F8 sub8(F8 a, F8 b) { RECUR_F8_MAP(a.v[l] - b.v[l]); }
inline F8 mul8(F8 a, F8 b) { RECUR_F8_MAP(a.v[l] * b.v[l]); }
inline F8 div8(F8 a, F8 b) { RECUR_F8_MAP(a.v[l] / b.v[l]); }
inline F8 fma8(F8 a, F8 b, F8 c) { RECUR_F8_MAP(std::fma(a.v[l], b.v[l], c.v[l])); }
// vmaxps/vminps return the second operand when either is NaN or both are zero.
inline F8 max8(F8 a, F8 b) { RECUR_F8_MAP(a.v[l] > b.v[l] ? a.v[l] : b.v[l]); }
inline F8 min8(F8 a, F8 b) { RECUR_F8_MAP(a.v[l] < b.v[l] ? a.v[l] : b.v[l]); }
inline F8 select_positive8(F8 x, F8 a, F8 b) { RECUR_F8_MAP(x.v[l] > 0.0f ? a.v[l] : b.v[l]); }
inline F8 round8(F8 a) { RECUR_F8_MAP(std::nearbyint(a.v[l])); }
inline F8 exp2_int8(F8 n) {
  F8 r;
  for (int l = 0; l < kLanes; ++l) {
    const auto bits = static_cast<std::uint32_t>(static_cast<std::int32_t>(n.v[l]) + 127) << 23;
    std::memcpy(&r.v[l], &bits, sizeof bits);
  }
  return r;
}
inline float hsum8(F8 a) {
  const float s0 = a.v[0] + a.v[4], s1 = a.v[1] + a.v[5];
  const float s2 = a.v[2] + a.v[6], s3 = a.v[3] + a.v[7];
  return (s0 + s2) + (s1 + s3);
}
#undef RECUR_F8_MAP

#endif

/// exp(x) to about 2 ulp for x in [-87, 88]; inputs below -87 give a tiny positive number, not 0.
/// A range reduction x = n ln2 + r with ln2 split in two parts, then a degree-6 polynomial.
inline F8 exp8(F8 x) {
  x = min8(max8(x, broadcast8(-87.0f)), broadcast8(88.0f));
  const F8 n = round8(mul8(x, broadcast8(1.44269504088896341f)));
  F8 r = fma8(n, broadcast8(-0.693359375f), x);
  r = fma8(n, broadcast8(2.12194440e-4f), r);
  F8 p = broadcast8(1.9875691500e-4f);
  p = fma8(p, r, broadcast8(1.3981999507e-3f));
  p = fma8(p, r, broadcast8(8.3334519073e-3f));
  p = fma8(p, r, broadcast8(4.1665795894e-2f));
  p = fma8(p, r, broadcast8(1.6666665459e-1f));
  p = fma8(p, r, broadcast8(5.0000001201e-1f));
  const F8 y = add8(fma8(p, mul8(r, r), r), broadcast8(1.0f));
  return mul8(y, exp2_int8(n));
}

}  // namespace recur::kernels
