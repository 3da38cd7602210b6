// The quantized matrix kernel of quant_call.h, per target.
//
// For each row r, output n and block b of 32 inputs, one integer
//   isum = sum_j q_w[n][32b + j] * q_x[r][32b + j]
// (exact in int32 whatever the order: |isum| <= 32 * 127 * 127 < 2^31, and every partial sum the
// instructions below form is bounded as noted), then the one float chain over b ascending:
//   y = 0;  y = fma(float(isum), d_w[n][b] * d_x[r][b], y)
// with d_w the half scale widened (exact) and the product of the two scales rounded once. Every
// target computes these same integers and floats: only how the integers are formed differs.
//   AVX-512 VNNI: 512-bit vpdpbusd (16 outputs per vector; the avx512vnni table).
//   AVX-512: 512-bit vpmaddubsw + vpmaddwd (16 outputs per vector).
//   AVX2:    256-bit vpmaddubsw + vpmaddwd (8 outputs per vector).
//   NEON:    vmull_s8 + vpadalq_s16 (the dot-product extension is not assumed).
//   others:  plain int32 loops.
// q8 multiplies |w| (unsigned) by x with w's sign: each pair of products is at most
// 2 * 127 * 127 = 32258 < 2^15, so the 16-bit sums never saturate. q4 multiplies the stored
// nibble u = q + 8 (0..15) by x and subtracts 8 * sum(x) once per block: eight pairs of products
// sum to at most 8 * 2 * 15 * 127 = 30480 < 2^15 in 16 bits before they widen. vpdpbusd adds
// four products straight into int32 (no saturation), so its sums are these same integers.
#if defined(RECUR_KERNELS_QUANT_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef RECUR_KERNELS_QUANT_INL_H_
#undef RECUR_KERNELS_QUANT_INL_H_
#else
#define RECUR_KERNELS_QUANT_INL_H_
#endif

#include <cfloat>
#include <cstdint>
#include <cstring>
#include <vector>

#include "hwy/cache_control.h"
#include "kernels/matmul-inl.h"
#include "kernels/ops-inl.h"
#include "kernels/quant_call.h"

HWY_BEFORE_NAMESPACE();
namespace recur::kernels {
namespace HWY_NAMESPACE {

using VI = hn::Vec<DI>;
// Float (and int32) vectors per panel of 16 outputs.
inline constexpr int kQV = kQuantPanel / kN;
static_assert(kQuantPanel == kPanelCols, "StoreRow stores one quantized panel row");

// Rows that share each block of weights while it is in registers (a tile of rows times one
// panel); decode runs tiles of one.
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
inline constexpr int kQRows = 4;  // 8 was slower with VNNI on Zen 5
#elif HWY_TARGET == HWY_AVX2
inline constexpr int kQRows = 4;
#elif HWY_TARGET == HWY_NEON
inline constexpr int kQRows = 2;
#else
inline constexpr int kQRows = 1;
#endif

// The four activation codes 4g .. 4g + 3 of a block as one 32-bit word.
HWY_INLINE std::int32_t Quad(const std::int8_t* x) {
  std::int32_t v;
  std::memcpy(&v, x, 4);
  return v;
}

#if HWY_TARGET == HWY_AVX2

using RawI = __m256i;
inline constexpr bool kBiasedQ8 = false;

template <int R>
HWY_INLINE void DotQ8(const unsigned char* codes, const std::int8_t* const* x,
                      const std::int32_t*, VI (*isum)[kQV]) {
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i acc[R][2];
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_si256();
  for (int g = 0; g < 8; ++g) {
    const __m256i w0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + g * 64));
    const __m256i w1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + g * 64 + 32));
    const __m256i a0 = _mm256_abs_epi8(w0), a1 = _mm256_abs_epi8(w1);
    for (int r = 0; r < R; ++r) {
      const __m256i xv = _mm256_set1_epi32(Quad(x[r] + 4 * g));
      acc[r][0] = _mm256_add_epi32(
          acc[r][0], _mm256_madd_epi16(_mm256_maddubs_epi16(a0, _mm256_sign_epi8(xv, w0)), ones));
      acc[r][1] = _mm256_add_epi32(
          acc[r][1], _mm256_madd_epi16(_mm256_maddubs_epi16(a1, _mm256_sign_epi8(xv, w1)), ones));
    }
  }
  for (int r = 0; r < R; ++r) {
    isum[r][0] = VI{acc[r][0]};
    isum[r][1] = VI{acc[r][1]};
  }
}

template <int R>
HWY_INLINE void DotQ4(const unsigned char* codes, const std::int8_t* const* x,
                      const std::int32_t* xsum, VI (*isum)[kQV]) {
  const __m256i ones = _mm256_set1_epi16(1), low = _mm256_set1_epi8(0x0f);
  __m256i s[R][2];
  for (int r = 0; r < R; ++r) s[r][0] = s[r][1] = _mm256_setzero_si256();
  for (int g = 0; g < 4; ++g) {
    for (int h = 0; h < 2; ++h) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + g * 64 + h * 32));
      const __m256i lo = _mm256_and_si256(v, low);
      const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low);
      for (int r = 0; r < R; ++r) {
        const __m256i xl = _mm256_set1_epi32(Quad(x[r] + 4 * g));
        const __m256i xh = _mm256_set1_epi32(Quad(x[r] + 4 * g + 16));
        s[r][h] = _mm256_add_epi16(s[r][h], _mm256_add_epi16(_mm256_maddubs_epi16(lo, xl),
                                                             _mm256_maddubs_epi16(hi, xh)));
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    const __m256i off = _mm256_set1_epi32(8 * xsum[r]);
    isum[r][0] = VI{_mm256_sub_epi32(_mm256_madd_epi16(s[r][0], ones), off)};
    isum[r][1] = VI{_mm256_sub_epi32(_mm256_madd_epi16(s[r][1], ones), off)};
  }
}

// Decode (one row) against NP panels at once, block by block: the activation's four codes of a
// group are broadcast once for all NP panels. q8 multiplies |x| (unsigned) by w with x's sign,
// so the absolute value is taken once per broadcast rather than once per weight vector: the
// same products, x * w, and the same bounds as DotQ8's (each pair at most 2 * 127 * 127).
template <int NP>
HWY_INLINE void DecodeBlockQ8(const unsigned char* const* rec, const std::int8_t* xb,
                              RawI (*isum)[kQV]) {
  const __m256i ones = _mm256_set1_epi16(1);
  for (int p = 0; p < NP; ++p) isum[p][0] = isum[p][1] = _mm256_setzero_si256();
  for (int g = 0; g < 8; ++g) {
    const __m256i xv = _mm256_set1_epi32(Quad(xb + 4 * g));
    const __m256i ax = _mm256_abs_epi8(xv);
    for (int p = 0; p < NP; ++p) {
      const unsigned char* codes = rec[p] + 2 * kQuantPanel + g * 64;
      const __m256i w0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes));
      const __m256i w1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + 32));
      isum[p][0] = _mm256_add_epi32(
          isum[p][0], _mm256_madd_epi16(_mm256_maddubs_epi16(ax, _mm256_sign_epi8(w0, xv)), ones));
      isum[p][1] = _mm256_add_epi32(
          isum[p][1], _mm256_madd_epi16(_mm256_maddubs_epi16(ax, _mm256_sign_epi8(w1, xv)), ones));
    }
  }
}

// q4 as DotQ4, the two broadcasts of a group shared by the NP panels.
template <int NP>
HWY_INLINE void DecodeBlockQ4(const unsigned char* const* rec, const std::int8_t* xb,
                              std::int32_t xsum, RawI (*isum)[kQV]) {
  const __m256i ones = _mm256_set1_epi16(1), low = _mm256_set1_epi8(0x0f);
  __m256i s[NP][2];
  for (int p = 0; p < NP; ++p) s[p][0] = s[p][1] = _mm256_setzero_si256();
  for (int g = 0; g < 4; ++g) {
    const __m256i xl = _mm256_set1_epi32(Quad(xb + 4 * g));
    const __m256i xh = _mm256_set1_epi32(Quad(xb + 4 * g + 16));
    for (int p = 0; p < NP; ++p)
      for (int h = 0; h < 2; ++h) {
        const __m256i v = _mm256_loadu_si256(
            reinterpret_cast<const __m256i*>(rec[p] + 2 * kQuantPanel + g * 64 + h * 32));
        const __m256i lo = _mm256_and_si256(v, low);
        const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low);
        s[p][h] = _mm256_add_epi16(s[p][h], _mm256_add_epi16(_mm256_maddubs_epi16(lo, xl),
                                                             _mm256_maddubs_epi16(hi, xh)));
      }
  }
  const __m256i off = _mm256_set1_epi32(8 * xsum);
  for (int p = 0; p < NP; ++p)
    for (int h = 0; h < 2; ++h) isum[p][h] = _mm256_sub_epi32(_mm256_madd_epi16(s[p][h], ones), off);
}

#elif HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL

// The AVX2 kernels with 16 outputs per vector, and a mask in place of vpsignb (which AVX-512
// lacks). With VNNI (the avx512vnni table), one vpdpbusd adds each lane's four byte products
// to its int32 sum directly: the same integers, with no 16-bit step.
using RawI = __m512i;

// acc + the sum of each 32-bit lane's four products u * s (u unsigned bytes, s signed).
// Written as assembly: Highway 1.0 compiles its AVX3_DL target for AVX-VNNI, not AVX512-VNNI,
// so the intrinsic is not enabled there; the table runs only on CPUs with AVX512-VNNI.
HWY_INLINE __m512i DotBytes(__m512i acc, __m512i u, __m512i s) {
#if HWY_TARGET == HWY_AVX3_DL
  asm("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(u), "v"(s));
  return acc;
#else
  // Each pair of products is at most 2 * 127 * 127 (q8) or 2 * 15 * 127 (q4) < 2^15.
  return _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_maddubs_epi16(u, s), _mm512_set1_epi16(1)));
#endif
}

// q4's nibbles u (0..15) times x over the two halves of a group, added to acc: with VNNI in
// int32 lanes; without, in 16-bit lanes (eight pairs at most 30480 < 2^15 before they widen).
HWY_INLINE __m512i DotNibbles(__m512i acc, __m512i lo, __m512i xl, __m512i hi, __m512i xh) {
#if HWY_TARGET == HWY_AVX3_DL
  return DotBytes(DotBytes(acc, lo, xl), hi, xh);
#else
  return _mm512_add_epi16(acc, _mm512_add_epi16(_mm512_maddubs_epi16(lo, xl), _mm512_maddubs_epi16(hi, xh)));
#endif
}

// What DotNibbles gathered, less 8 * sum(x): the block's integer sums in int32 lanes.
HWY_INLINE __m512i FinishNibbles(__m512i acc, std::int32_t xsum) {
#if HWY_TARGET != HWY_AVX3_DL
  acc = _mm512_madd_epi16(acc, _mm512_set1_epi16(1));
#endif
  return _mm512_sub_epi32(acc, _mm512_set1_epi32(8 * xsum));
}

#if HWY_TARGET == HWY_AVX3_DL
// With VNNI the rows' codes come biased, x + 128 as unsigned bytes (kBiasedQ8, MultiplyQ), so
// that each group and row is one broadcast and one vpdpbusd, with no sign to move:
//   sum (x + 128) w - 128 sum w = sum x w,
// where sum w is gathered once per group for all R rows (vpdpbusd by ones). Every partial sum is
// at most 32 * 255 * 127 < 2^20: the same integers as DotQ8's below.
inline constexpr bool kBiasedQ8 = true;

template <int R>
HWY_INLINE void DotQ8(const unsigned char* codes, const std::int8_t* const* x,
                      const std::int32_t*, VI (*isum)[kQV]) {
  const __m512i ones = _mm512_set1_epi8(1);
  __m512i wsum = _mm512_setzero_si512(), acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_si512();
  for (int g = 0; g < 8; ++g) {
    const __m512i w = _mm512_loadu_si512(codes + g * 64);
    wsum = DotBytes(wsum, ones, w);
    for (int r = 0; r < R; ++r) acc[r] = DotBytes(acc[r], _mm512_set1_epi32(Quad(x[r] + 4 * g)), w);
  }
  const __m512i bias = _mm512_slli_epi32(wsum, 7);
  for (int r = 0; r < R; ++r) isum[r][0] = VI{_mm512_sub_epi32(acc[r], bias)};
}
#else
inline constexpr bool kBiasedQ8 = false;

template <int R>
HWY_INLINE void DotQ8(const unsigned char* codes, const std::int8_t* const* x,
                      const std::int32_t*, VI (*isum)[kQV]) {
  const __m512i zero = _mm512_setzero_si512();
  __m512i acc[R];
  for (int r = 0; r < R; ++r) acc[r] = zero;
  for (int g = 0; g < 8; ++g) {
    const __m512i w = _mm512_loadu_si512(codes + g * 64);
    const __m512i a = _mm512_abs_epi8(w);
    const __mmask64 negative = _mm512_movepi8_mask(w);
    for (int r = 0; r < R; ++r) {
      const __m512i xv = _mm512_set1_epi32(Quad(x[r] + 4 * g));
      acc[r] = DotBytes(acc[r], a, _mm512_mask_sub_epi8(xv, negative, zero, xv));  // x with w's sign
    }
  }
  for (int r = 0; r < R; ++r) isum[r][0] = VI{acc[r]};
}
#endif

template <int R>
HWY_INLINE void DotQ4(const unsigned char* codes, const std::int8_t* const* x,
                      const std::int32_t* xsum, VI (*isum)[kQV]) {
  const __m512i low = _mm512_set1_epi8(0x0f);
  __m512i s[R];
  for (int r = 0; r < R; ++r) s[r] = _mm512_setzero_si512();
  for (int g = 0; g < 4; ++g) {
    const __m512i v = _mm512_loadu_si512(codes + g * 64);
    const __m512i lo = _mm512_and_si512(v, low);
    const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), low);
    for (int r = 0; r < R; ++r)
      s[r] = DotNibbles(s[r], lo, _mm512_set1_epi32(Quad(x[r] + 4 * g)), hi,
                        _mm512_set1_epi32(Quad(x[r] + 4 * g + 16)));
  }
  for (int r = 0; r < R; ++r) isum[r][0] = VI{FinishNibbles(s[r], xsum[r])};
}

// Decode against NP panels, as on AVX2: |x| and x's sign taken once per group for all NP
// panels, and the weights given x's sign (the same products, x * w).
template <int NP>
HWY_INLINE void DecodeBlockQ8(const unsigned char* const* rec, const std::int8_t* xb,
                              RawI (*isum)[kQV]) {
  const __m512i zero = _mm512_setzero_si512();
  for (int p = 0; p < NP; ++p) isum[p][0] = zero;
  for (int g = 0; g < 8; ++g) {
    const __m512i xv = _mm512_set1_epi32(Quad(xb + 4 * g));
    const __m512i ax = _mm512_abs_epi8(xv);
    const __mmask64 negative = _mm512_movepi8_mask(xv);
    for (int p = 0; p < NP; ++p) {
      const __m512i w = _mm512_loadu_si512(rec[p] + 2 * kQuantPanel + g * 64);
      isum[p][0] = DotBytes(isum[p][0], ax, _mm512_mask_sub_epi8(w, negative, zero, w));
    }
  }
}

template <int NP>
HWY_INLINE void DecodeBlockQ4(const unsigned char* const* rec, const std::int8_t* xb,
                              std::int32_t xsum, RawI (*isum)[kQV]) {
  const __m512i low = _mm512_set1_epi8(0x0f);
  for (int p = 0; p < NP; ++p) isum[p][0] = _mm512_setzero_si512();
  for (int g = 0; g < 4; ++g) {
    const __m512i xl = _mm512_set1_epi32(Quad(xb + 4 * g));
    const __m512i xh = _mm512_set1_epi32(Quad(xb + 4 * g + 16));
    for (int p = 0; p < NP; ++p) {
      const __m512i v = _mm512_loadu_si512(rec[p] + 2 * kQuantPanel + g * 64);
      isum[p][0] = DotNibbles(isum[p][0], _mm512_and_si512(v, low), xl,
                              _mm512_and_si512(_mm512_srli_epi16(v, 4), low), xh);
    }
  }
  for (int p = 0; p < NP; ++p) isum[p][0] = FinishNibbles(isum[p][0], xsum);
}

#elif HWY_TARGET == HWY_NEON

inline constexpr bool kBiasedQ8 = false;

// int8 x int8 -> int16 (exact: 127 * 127 < 2^15), then pairs widened into int32 lanes that hold
// half of one output's group of four; a pairwise add at the end gives one output per lane.
template <int R>
HWY_INLINE void DotQuarters(const int8x16_t (&w)[4], const std::int8_t* const* x, int at,
                            int32x4_t (*acc)[8]) {
  for (int r = 0; r < R; ++r) {
    const int8x8_t xv = vreinterpret_s8_s32(vdup_n_s32(Quad(x[r] + at)));
    for (int q = 0; q < 4; ++q) {
      acc[r][2 * q] = vpadalq_s16(acc[r][2 * q], vmull_s8(vget_low_s8(w[q]), xv));
      acc[r][2 * q + 1] = vpadalq_s16(acc[r][2 * q + 1], vmull_s8(vget_high_s8(w[q]), xv));
    }
  }
}

template <int R>
HWY_INLINE void FinishQuarters(int32x4_t (*acc)[8], VI (*isum)[kQV]) {
  for (int r = 0; r < R; ++r)
    for (int q = 0; q < 4; ++q) isum[r][q] = VI{vpaddq_s32(acc[r][2 * q], acc[r][2 * q + 1])};
}

template <int R>
HWY_INLINE void DotQ8(const unsigned char* codes, const std::int8_t* const* x,
                      const std::int32_t*, VI (*isum)[kQV]) {
  int32x4_t acc[R][8];
  for (int r = 0; r < R; ++r)
    for (int i = 0; i < 8; ++i) acc[r][i] = vdupq_n_s32(0);
  for (int g = 0; g < 8; ++g) {
    int8x16_t w[4];
    for (int q = 0; q < 4; ++q) w[q] = vld1q_s8(reinterpret_cast<const std::int8_t*>(codes + g * 64 + q * 16));
    DotQuarters<R>(w, x, 4 * g, acc);
  }
  FinishQuarters<R>(acc, isum);
}

template <int R>
HWY_INLINE void DotQ4(const unsigned char* codes, const std::int8_t* const* x,
                      const std::int32_t*, VI (*isum)[kQV]) {
  int32x4_t acc[R][8];
  for (int r = 0; r < R; ++r)
    for (int i = 0; i < 8; ++i) acc[r][i] = vdupq_n_s32(0);
  const uint8x16_t low = vdupq_n_u8(0x0f);
  const int8x16_t eight = vdupq_n_s8(8);
  for (int g = 0; g < 4; ++g) {
    int8x16_t lo[4], hi[4];
    for (int q = 0; q < 4; ++q) {
      const uint8x16_t v = vld1q_u8(codes + g * 64 + q * 16);
      lo[q] = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(v, low)), eight);
      hi[q] = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(v, 4)), eight);
    }
    DotQuarters<R>(lo, x, 4 * g, acc);
    DotQuarters<R>(hi, x, 4 * g + 16, acc);
  }
  FinishQuarters<R>(acc, isum);
}

#else

inline constexpr bool kBiasedQ8 = false;

// Plain int32 loops, one output at a time.
template <int R>
HWY_INLINE void DotQ8(const unsigned char* codes, const std::int8_t* const* x,
                      const std::int32_t*, VI (*isum)[kQV]) {
  alignas(64) std::int32_t t[kQuantPanel];
  for (int r = 0; r < R; ++r) {
    for (int o = 0; o < kQuantPanel; ++o) {
      std::int32_t s = 0;
      for (int k = 0; k < kQuantBlock; ++k)
        s += static_cast<std::int8_t>(codes[(k / 4) * 64 + o * 4 + k % 4]) * x[r][k];
      t[o] = s;
    }
    for (int v = 0; v < kQV; ++v) isum[r][v] = hn::Load(DI(), t + v * kN);
  }
}

template <int R>
HWY_INLINE void DotQ4(const unsigned char* codes, const std::int8_t* const* x,
                      const std::int32_t*, VI (*isum)[kQV]) {
  alignas(64) std::int32_t t[kQuantPanel];
  for (int r = 0; r < R; ++r) {
    for (int o = 0; o < kQuantPanel; ++o) {
      std::int32_t s = 0;
      for (int k = 0; k < 16; ++k) {
        const int byte = codes[(k / 4) * 64 + o * 4 + k % 4];
        s += ((byte & 15) - 8) * x[r][k] + ((byte >> 4) - 8) * x[r][k + 16];
      }
      t[o] = s;
    }
    for (int v = 0; v < kQV; ++v) isum[r][v] = hn::Load(DI(), t + v * kN);
  }
}

#endif

// R rows times one panel: the blocks in ascending order, each output's one float chain.
// `ahead` (may be null) is the next panel to stream from memory: its b-th record is prefetched
// beside the b-th block, so that two streams keep more reads in flight than one.
template <QuantType T, int R>
HWY_INLINE void TileQ(const QuantCall& c, const unsigned char* panel, std::int64_t r0,
                      float* Y, int cols, const unsigned char* ahead) {
  constexpr std::size_t record = T == QuantType::kQ8 ? kQ8Record : kQ4Record;
  const int blocks = c.k_in / kQuantBlock;
  VF y[R][kQV];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < kQV; ++v) y[r][v] = Zero();
  const std::int8_t* x[R];
  const float* dx[R];
  const std::int32_t* xs[R];
  for (int r = 0; r < R; ++r) {
    x[r] = c.qx + (r0 + r) * c.k_in;
    dx[r] = c.dx + (r0 + r) * blocks;
    xs[r] = c.xsum + (r0 + r) * blocks;
  }
  for (int b = 0; b < blocks; ++b) {
    const unsigned char* rec = panel + static_cast<std::size_t>(b) * record;
    if (ahead)
      for (std::size_t off = 0; off < record; off += 64)
        hwy::Prefetch(ahead + static_cast<std::size_t>(b) * record + off);
    const auto* scales = reinterpret_cast<const std::uint16_t*>(rec);
    const std::int8_t* xb[R];
    std::int32_t sb[R];
    for (int r = 0; r < R; ++r) {
      xb[r] = x[r] + b * kQuantBlock;
      sb[r] = xs[r][b];
    }
    VI isum[R][kQV];
    if constexpr (T == QuantType::kQ8) {
      DotQ8<R>(rec + 2 * kQuantPanel, xb, sb, isum);
    } else {
      DotQ4<R>(rec + 2 * kQuantPanel, xb, sb, isum);
    }
    for (int v = 0; v < kQV; ++v) {
      const VF dw = LoadF16(scales + v * kN);
      for (int r = 0; r < R; ++r)
        y[r][v] = Fma(hn::ConvertTo(DF(), isum[r][v]), hn::Mul(dw, Set(dx[r][b])), y[r][v]);
    }
  }
  for (int r = 0; r < R; ++r) StoreRow(y[r], Y + (r0 + r) * c.ldy, cols);
}

// Decode: one row times NP whole consecutive panels, block by block, so that NP streams of
// weights are in flight at once (one stream per core reads well below the memory's bandwidth).
template <QuantType T, int NP>
HWY_INLINE void RowPanelsQ(const QuantCall& c, const unsigned char* panel, float* Y) {
  constexpr std::size_t record = T == QuantType::kQ8 ? kQ8Record : kQ4Record;
  const int blocks = c.k_in / kQuantBlock;
  VF y[NP][kQV];
  for (int p = 0; p < NP; ++p)
    for (int v = 0; v < kQV; ++v) y[p][v] = Zero();
  for (int b = 0; b < blocks; ++b) {
    const std::int8_t* xb[1] = {c.qx + b * kQuantBlock};
    const VF dx = Set(c.dx[b]);
    const unsigned char* rec[NP];
    for (int p = 0; p < NP; ++p)
      rec[p] = panel + c.panel_stride * static_cast<std::size_t>(p) + static_cast<std::size_t>(b) * record;
#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
    RawI isum[NP][kQV];
    if constexpr (T == QuantType::kQ8) {
      DecodeBlockQ8<NP>(rec, xb[0], isum);
    } else {
      DecodeBlockQ4<NP>(rec, xb[0], c.xsum[b], isum);
    }
    for (int p = 0; p < NP; ++p) {
      const auto* scales = reinterpret_cast<const std::uint16_t*>(rec[p]);
      for (int v = 0; v < kQV; ++v)
        y[p][v] = Fma(hn::ConvertTo(DF(), VI{isum[p][v]}), hn::Mul(LoadF16(scales + v * kN), dx), y[p][v]);
    }
#else
    const std::int32_t sb[1] = {c.xsum[b]};
    for (int p = 0; p < NP; ++p) {
      const auto* scales = reinterpret_cast<const std::uint16_t*>(rec[p]);
      VI isum[1][kQV];
      if constexpr (T == QuantType::kQ8) {
        DotQ8<1>(rec[p] + 2 * kQuantPanel, xb, sb, isum);
      } else {
        DotQ4<1>(rec[p] + 2 * kQuantPanel, xb, sb, isum);
      }
      for (int v = 0; v < kQV; ++v)
        y[p][v] = Fma(hn::ConvertTo(DF(), isum[0][v]), hn::Mul(LoadF16(scales + v * kN), dx), y[p][v]);
    }
#endif
  }
  for (int p = 0; p < NP; ++p) StoreRow(y[p], Y + p * kQuantPanel, kQuantPanel);
}

// A tile of `rows` (1 to R) rows.
template <QuantType T, int R = kQRows>
HWY_INLINE void FewRowsQ(const QuantCall& c, const unsigned char* panel, std::int64_t r0,
                         std::int64_t rows, float* Y, int cols, const unsigned char* ahead) {
  if constexpr (R >= 1) {
    if (rows == R) return TileQ<T, R>(c, panel, r0, Y, cols, ahead);
    FewRowsQ<T, R - 1>(c, panel, r0, rows, Y, cols, ahead);
  }
}

// The rows' q8 codes as x + 128 (unsigned), for the targets whose DotQ8 takes them so
// (kBiasedQ8); one buffer per thread, grown once.
HWY_INLINE const std::int8_t* BiasedCodes(const QuantCall& c) {
  thread_local std::vector<std::uint8_t> buffer;
  const std::size_t n = static_cast<std::size_t>(c.rows) * static_cast<std::size_t>(c.k_in);
  if (buffer.size() < n) buffer.resize(n);
  const auto* x = reinterpret_cast<const std::uint8_t*>(c.qx);
  for (std::size_t i = 0; i < n; ++i) buffer[i] = static_cast<std::uint8_t>(x[i] ^ 0x80u);
  return reinterpret_cast<const std::int8_t*>(buffer.data());
}

template <QuantType T>
void MultiplyQ(const QuantCall& c, int p0, int p1) {
  int p = p0;
  if (c.rows == 1) {
    constexpr int NP = kDecodePanelsPacked;
    for (; p + NP <= p1 && (p + NP) * kQuantPanel <= c.n_out; p += NP)
      RowPanelsQ<T, NP>(c, c.data + c.panel_stride * static_cast<std::size_t>(p), c.Y + p * kQuantPanel);
  }
  if (p == p1) return;
  QuantCall tiles = c;
  if constexpr (T == QuantType::kQ8 && kBiasedQ8) tiles.qx = BiasedCodes(c);
  for (; p < p1; ++p) {
    const unsigned char* panel = c.data + c.panel_stride * static_cast<std::size_t>(p);
    const int cols = std::min(kQuantPanel, c.n_out - p * kQuantPanel);
    float* Yp = c.Y + p * kQuantPanel;
    // The first tile streams the next panel in; the others find this one in the caches.
    const unsigned char* ahead = p + 1 < p1 ? panel + c.panel_stride : nullptr;
    std::int64_t r = 0;
    for (; r + kQRows <= c.rows; r += kQRows, ahead = nullptr)
      TileQ<T, kQRows>(tiles, panel, r, Yp, cols, ahead);
    if (r < c.rows) FewRowsQ<T>(tiles, panel, r, c.rows - r, Yp, cols, ahead);
  }
}

// The activation rule of quant_call.h, in vectors; the same bytes at any width: the maximum of
// |x| keeps a lane unless the new value is greater (a NaN never is), and that is the same
// maximum in any order; the codes are RoundEven(x * inv), clamped to [-127, 127] by
// comparisons, with a NaN sent to 0.
void QuantizeActivations(const float* X, std::int64_t rows, std::int64_t ldx, int k_in,
                         std::int8_t* qx, float* dx, std::int32_t* xsum) {
  static_assert(kQuantBlock % kN == 0, "a block is whole vectors");
  constexpr int kV = kQuantBlock / kN;
  const hn::Rebind<std::int8_t, DF> d8;
  const VF lo = Set(-127.0f), hi = Set(127.0f);
  const int blocks = k_in / kQuantBlock;
  for (std::int64_t r = 0; r < rows; ++r) {
    for (int b = 0; b < blocks; ++b) {
      const float* x = X + r * ldx + b * kQuantBlock;
      std::int8_t* q = qx + r * k_in + b * kQuantBlock;
      const std::int64_t at = r * blocks + b;
      VF v[kV];
      VF lane = Zero();
      for (int j = 0; j < kV; ++j) {
        v[j] = Load(x + j * kN);
        const VF a = hn::Abs(v[j]);
        lane = hn::IfThenElse(hn::Gt(a, lane), a, lane);
      }
      const float m = hn::GetLane(hn::MaxOfLanes(DF(), lane));  // no NaN among the lanes
      if (!(m >= FLT_MIN)) {
        std::memset(q, 0, kQuantBlock);
        dx[at] = 0.0f;
        xsum[at] = 0;
        continue;
      }
      dx[at] = m / 127.0f;
      const VF inv = Set(127.0f / m);
      auto sum = hn::Zero(DI());
      for (int j = 0; j < kV; ++j) {
        VF c = RoundEven(hn::Mul(v[j], inv));
        c = hn::IfThenElse(hn::Lt(c, lo), lo, hn::IfThenElse(hn::Gt(c, hi), hi, c));
        c = hn::IfThenElse(hn::Eq(c, c), c, Zero());
        const auto ci = hn::ConvertTo(DI(), c);
        sum = hn::Add(sum, ci);
        hn::StoreU(hn::DemoteTo(d8, ci), d8, q + j * kN);
      }
      xsum[at] = hn::GetLane(hn::SumOfLanes(DI(), sum));
    }
  }
}

void MatmulQ(const QuantCall& c, int p0, int p1) {
  if (c.type == QuantType::kQ8) {
    MultiplyQ<QuantType::kQ8>(c, p0, p1);
  } else {
    MultiplyQ<QuantType::kQ4>(c, p0, p1);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace recur::kernels
HWY_AFTER_NAMESPACE();

#endif  // RECUR_KERNELS_QUANT_INL_H_
