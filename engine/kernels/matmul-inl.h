// The matrix kernel of matmul.h, per target. Every output element is one FMA chain over k
// ascending; the tiles below only choose which chains run side by side.
#if defined(RECUR_KERNELS_MATMUL_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef RECUR_KERNELS_MATMUL_INL_H_
#undef RECUR_KERNELS_MATMUL_INL_H_
#else
#define RECUR_KERNELS_MATMUL_INL_H_
#endif

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "hwy/aligned_allocator.h"
#include "kernels/dispatch.h"
#include "kernels/matmul.h"
#include "kernels/ops-inl.h"

HWY_BEFORE_NAMESPACE();
namespace recur::kernels {
namespace HWY_NAMESPACE {

// Vectors in one k of a panel (16 columns).
inline constexpr int kPanelVectors = kPanelCols / kN;
static_assert(kPanelCols % kN == 0, "a panel is whole vectors");
// Row tiles for many rows: kMatRows rows by one panel, kMatRows * kPanelVectors accumulators.
// Decode (one row): kDecodePanels panels at once, so that enough chains hide the FMA latency.
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
inline constexpr int kMatRows = 12;
inline constexpr int kDecodePanels = 4;
// Decode of 16-bit and quantized panels: 8 at once. A 16-bit panel's k is half a cache line,
// so 8 panels read as many lines per k as 4 of f32; quantized decode reads fewer bytes per FMA
// still. On Zen 5, 8 panels took bf16 decode from 4.2-4.6 to 3.8-4.1 ms and q8 from 1.9-2.1 to
// 1.8-1.9 ms (bench_model BM_WeightsDecode); f32 with 8 was slower on Zen 4.
inline constexpr int kDecodePanelsPacked = 8;
#elif HWY_TARGET == HWY_AVX2
inline constexpr int kMatRows = 6;
inline constexpr int kDecodePanels = 4;
inline constexpr int kDecodePanelsPacked = kDecodePanels;
#else
inline constexpr int kMatRows = 6;
inline constexpr int kDecodePanels = 2;
inline constexpr int kDecodePanelsPacked = kDecodePanels;
#endif

// How a panel's elements are stored and widened to float. Every policy yields the same floats
// for the same weights. Load reads kN columns of one k of a panel.
struct F32Panel {
  using T = float;
  static VF Load(const float* p) { return HWY_NAMESPACE::Load(p); }
};
struct BF16Panel {
  using T = std::uint16_t;
  static VF Load(const std::uint16_t* p) { return LoadBF16(p); }
};
struct F16Panel {
  using T = std::uint16_t;
  static VF Load(const std::uint16_t* p) { return LoadF16(p); }
};

// Stores one row of a panel's results, or its first `cols` when the panel is the padded last one.
HWY_INLINE void StoreRow(const VF* a, float* y, int cols) {
  if (cols == kPanelCols) {
    for (int v = 0; v < kPanelVectors; ++v) Store(a[v], y + v * kN);
    return;
  }
  alignas(64) float tmp[kPanelCols];
  for (int v = 0; v < kPanelVectors; ++v) Store(a[v], tmp + v * kN);
  std::memcpy(y, tmp, sizeof(float) * static_cast<std::size_t>(cols));
}

// The next panel to stream from memory while a tile computes: its k-th row (`step` bytes, the
// stored panel's row: 64 for f32, 32 for 16-bit) is prefetched beside the k-th step, so that
// reading the weights overlaps the arithmetic on them instead of waiting for them all at once.
struct Ahead {
  const unsigned char* at = nullptr;  // null: nothing to stream
  int step = 0;
};
template <class T>
HWY_INLINE Ahead AheadOf(const T* panel) {
  return {reinterpret_cast<const unsigned char*>(panel), int(sizeof(T)) * kPanelCols};
}

// R rows times one panel, each accumulator one chain over k ascending, streaming `ahead` in.
template <int R, class Panel>
HWY_INLINE void TileRows(const float* X, std::int64_t ldx, const typename Panel::T* panel, int K,
                         float* Y, std::int64_t ldy, int cols, Ahead ahead = {}) {
  VF acc[R][kPanelVectors];
  HWY_UNROLL(12)
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < kPanelVectors; ++v) acc[r][v] = Zero();
  for (int k = 0; k < K; ++k) {
    if (ahead.at) hwy::Prefetch(ahead.at + std::size_t(ahead.step) * std::size_t(k));
    VF w[kPanelVectors];
    for (int v = 0; v < kPanelVectors; ++v) w[v] = Panel::Load(panel + kPanelCols * k + v * kN);
    HWY_UNROLL(12)
    for (int r = 0; r < R; ++r) {
      const VF xb = Set(X[r * ldx + k]);
      for (int v = 0; v < kPanelVectors; ++v) acc[r][v] = Fma(xb, w[v], acc[r][v]);
    }
  }
  for (int r = 0; r < R; ++r) StoreRow(acc[r], Y + r * ldy, cols);
}

// Rows of a panel (k steps) that decode asks for ahead of the one it reads: each of the NP
// panels is a stream of its own, and the hardware's prefetchers start again at every 4 KiB page
// of each. Measured on the Xeon of docs/machines.md (bf16, 1 row, 384 MiB of panels): 10.7-11.3
// GB/s without, 12.0-12.7 with 16 or 48 rows ahead. Past a panel's end it asks for the next
// panel's first rows (or for nothing that faults: a prefetch never does).
inline constexpr int kDecodeAhead = 32;

// One row times NP whole panels.
template <int NP, class Panel>
HWY_INLINE void RowPanels(const float* x, const typename Panel::T* panel, std::size_t stride,
                          int K, float* y) {
  VF acc[NP][kPanelVectors];
  for (int p = 0; p < NP; ++p)
    for (int v = 0; v < kPanelVectors; ++v) acc[p][v] = Zero();
  for (int k = 0; k < K; ++k) {
    const VF xb = Set(x[k]);
    HWY_UNROLL(8)
    for (int p = 0; p < NP; ++p)
      hwy::Prefetch(panel + static_cast<std::size_t>(p) * stride + kPanelCols * (k + kDecodeAhead));
    HWY_UNROLL(8)
    for (int p = 0; p < NP; ++p)
      for (int v = 0; v < kPanelVectors; ++v)
        acc[p][v] = Fma(xb, Panel::Load(panel + static_cast<std::size_t>(p) * stride + kPanelCols * k + v * kN), acc[p][v]);
  }
  for (int p = 0; p < NP; ++p) StoreRow(acc[p], y + p * kPanelCols, kPanelCols);
}

// A tile of `rows` (1 to R) rows.
template <class Panel, int R = kMatRows>
HWY_INLINE void FewRows(std::int64_t rows, const float* X, std::int64_t ldx,
                        const typename Panel::T* panel, int K, float* Y, std::int64_t ldy,
                        int cols, Ahead ahead = {}) {
  if constexpr (R >= 1) {
    if (rows == R) return TileRows<R, Panel>(X, ldx, panel, K, Y, ldy, cols, ahead);
    FewRows<Panel, R - 1>(rows, X, ldx, panel, K, Y, ldy, cols, ahead);
  }
}

// The row tiles over a widened (float) copy of a 16-bit panel. Kept out of line: inlined into
// MultiplyPanels beside the 16-bit tiles, GCC 12 keeps the accumulators in memory and stores
// all twelve at every k, which halves the speed.
HWY_NOINLINE void WidenedRows(std::int64_t rows, const float* X, std::int64_t ldx,
                              const float* panel, int K, float* Y, std::int64_t ldy, int cols,
                              Ahead ahead) {
  FewRows<F32Panel>(rows, X, ldx, panel, K, Y, ldy, cols, ahead);
}

// Two panels side by side (32 columns) for R rows, over widened (float) panels a and b: per k,
// two weight vectors and R broadcasts feed 2R FMAs, where one panel's tile loads R + 1 values
// for R FMAs; the loads, not the FMAs, bounded that tile. Each accumulator is the same chain
// over k ascending from +0 as in TileRows, so the bytes are those of two single-panel tiles.
// 16 lanes only (one vector per panel: 2R accumulators fit in the 32 registers).
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
inline constexpr bool kPairTiles = true;
inline constexpr int kPairRows = 12;
template <int R>
HWY_INLINE void TilePair(const float* X, std::int64_t ldx, const float* a, const float* b, int K,
                         float* Y, std::int64_t ldy, Ahead ahead) {
  static_assert(kPanelVectors == 1, "one vector per panel");
  VF acc[R][2];
  HWY_UNROLL(12)
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = Zero();
  for (int k = 0; k < K; ++k) {
    if (ahead.at) hwy::Prefetch(ahead.at + std::size_t(ahead.step) * std::size_t(k));
    const VF wa = Load(a + kPanelCols * k), wb = Load(b + kPanelCols * k);
    HWY_UNROLL(12)
    for (int r = 0; r < R; ++r) {
      const VF xb = Set(X[r * ldx + k]);
      acc[r][0] = Fma(xb, wa, acc[r][0]);
      acc[r][1] = Fma(xb, wb, acc[r][1]);
    }
  }
  for (int r = 0; r < R; ++r) {
    Store(acc[r][0], Y + r * ldy);
    Store(acc[r][1], Y + r * ldy + kPanelCols);
  }
}
template <int R = kPairRows>
HWY_INLINE void FewRowsPair(std::int64_t rows, const float* X, std::int64_t ldx, const float* a,
                            const float* b, int K, float* Y, std::int64_t ldy, Ahead ahead) {
  if constexpr (R >= 1) {
    if (rows == R) return TilePair<R>(X, ldx, a, b, K, Y, ldy, ahead);
    FewRowsPair<R - 1>(rows, X, ldx, a, b, K, Y, ldy, ahead);
  }
}
// Out of line for the reason WidenedRows is.
HWY_NOINLINE void WidenedPairRows(std::int64_t rows, const float* X, std::int64_t ldx,
                                  const float* a, const float* b, int K, float* Y,
                                  std::int64_t ldy, Ahead ahead) {
  FewRowsPair(rows, X, ldx, a, b, K, Y, ldy, ahead);
}
#else
inline constexpr bool kPairTiles = false;
inline constexpr int kPairRows = 1;
HWY_INLINE void WidenedPairRows(std::int64_t, const float*, std::int64_t, const float*,
                                const float*, int, float*, std::int64_t, Ahead) {}
#endif

// The calling thread's buffer for a widened panel (at least n floats), kept from call to call,
// so that a product allocates nothing after a thread's first (it allocated and freed 64-256 KiB
// per range of every product before).
HWY_INLINE float* WidenedBuffer(std::size_t n) {
  thread_local hwy::AlignedFreeUniquePtr<float[]> buffer;
  thread_local std::size_t size = 0;
  if (size < n) {
    buffer = hwy::AllocateAligned<float>(n);
    size = n;
  }
  return buffer.get();
}

template <class Panel>
void MultiplyPanels(const MatmulCall& m, int p0, int p1) {
  using T = typename Panel::T;
  const auto* data = reinterpret_cast<const T*>(m.data);
  const std::size_t stride = m.panel_stride;
  const int K = m.k_in;
  const auto panel_cols = [&](int p) { return std::min(kPanelCols, m.n_out - p * kPanelCols); };
  if (m.rows < kMatRows) {
    // Few rows: widen each weight as it streams past.
    int p = p0;
    if (m.rows == 1) {
      constexpr int NP = sizeof(T) == 2 ? kDecodePanelsPacked : kDecodePanels;
      for (; p + NP <= p1 && (p + NP) * kPanelCols <= m.n_out; p += NP)
        RowPanels<NP, Panel>(m.X, data + stride * static_cast<std::size_t>(p), stride, K,
                             m.Y + p * kPanelCols);
    }
    for (; p < p1; ++p)
      FewRows<Panel>(m.rows, m.X, m.ldx, data + stride * static_cast<std::size_t>(p), K,
                     m.Y + p * kPanelCols, m.ldy, panel_cols(p),
                     p + 1 < p1 ? AheadOf(data + stride * static_cast<std::size_t>(p + 1)) : Ahead{});
    return;
  }
  // Many rows: a 16-bit panel is widened once into a float copy that every row tile then reads.
  // The copy is aligned to cache lines as the stored panels are: a panel's row is one line.
  const std::size_t widened_size =
      std::is_same_v<Panel, F32Panel> ? 0 : static_cast<std::size_t>(K) * kPanelCols;
  float* widened = nullptr;
  if constexpr (!std::is_same_v<Panel, F32Panel>) widened = WidenedBuffer(2 * widened_size);
  int p = p0;
  if constexpr (kPairTiles && !std::is_same_v<Panel, F32Panel>) {
    // Whole panels two at a time, widened side by side; the first row tile streams the next
    // two stored panels in (contiguous but for a gap of at most one panel row).
    for (; p + 2 <= p1 && (p + 2) * kPanelCols <= m.n_out; p += 2) {
      const T* stored = data + stride * static_cast<std::size_t>(p);
      for (std::size_t i = 0; i < widened_size; i += kN) {
        Store(Panel::Load(stored + i), widened + i);
        Store(Panel::Load(stored + stride + i), widened + widened_size + i);
      }
      Ahead ahead;
      if (p + 2 < p1) {
        ahead = AheadOf(data + stride * static_cast<std::size_t>(p + 2));
        ahead.step *= 2;
      }
      const std::int64_t tiles = (m.rows + kPairRows - 1) / kPairRows;
      std::int64_t r = 0;
      for (std::int64_t t = 0; t < tiles; ++t) {
        const std::int64_t n = m.rows / tiles + (t < m.rows % tiles ? 1 : 0);
        WidenedPairRows(n, m.X + r * m.ldx, m.ldx, widened, widened + widened_size, K,
                        m.Y + r * m.ldy + p * kPanelCols, m.ldy, t == 0 ? ahead : Ahead{});
        r += n;
      }
    }
  }
  for (; p < p1; ++p) {
    const T* stored = data + stride * static_cast<std::size_t>(p);
    const float* panel;
    if constexpr (std::is_same_v<Panel, F32Panel>) {
      panel = stored;
    } else {
      for (std::size_t i = 0; i < widened_size; i += kN) Store(Panel::Load(stored + i), widened + i);
      panel = widened;
    }
    const int cols = panel_cols(p);
    float* Yp = m.Y + p * kPanelCols;
    // Row tiles of nearly equal size (16 rows: 8 + 8, not 12 + 4), so that every tile runs
    // enough chains side by side to hide the FMA latency. The first tile streams the next panel
    // in (for 16-bit panels, the stored one), a row of it per step: asking for the whole panel
    // at once filled the line fill buffers and stalled the widening (15% of RWKV-7's bf16
    // prefill waited there).
    const Ahead ahead = p + 1 < p1 ? AheadOf(data + stride * static_cast<std::size_t>(p + 1)) : Ahead{};
    const std::int64_t tiles = (m.rows + kMatRows - 1) / kMatRows;
    std::int64_t r = 0;
    for (std::int64_t t = 0; t < tiles; ++t) {
      const std::int64_t n = m.rows / tiles + (t < m.rows % tiles ? 1 : 0);
      if constexpr (std::is_same_v<Panel, F32Panel>) {
        FewRows<F32Panel>(n, m.X + r * m.ldx, m.ldx, panel, K, Yp + r * m.ldy, m.ldy, cols,
                          t == 0 ? ahead : Ahead{});
      } else {
        WidenedRows(n, m.X + r * m.ldx, m.ldx, panel, K, Yp + r * m.ldy, m.ldy, cols,
                    t == 0 ? ahead : Ahead{});
      }
      r += n;
    }
  }
}

void Matmul(const MatmulCall& m, int p0, int p1) {
  switch (m.storage) {
    case DType::kF32: MultiplyPanels<F32Panel>(m, p0, p1); break;
    case DType::kBF16: MultiplyPanels<BF16Panel>(m, p0, p1); break;
    case DType::kF16: MultiplyPanels<F16Panel>(m, p0, p1); break;
    case DType::kI8:
    case DType::kU8: break;  // integer codes are quantized matrices, multiplied by quant-inl.h
    case DType::kI64: break;  // never a matrix: the loader packs only float or quantized weights
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace recur::kernels
HWY_AFTER_NAMESPACE();

#endif  // RECUR_KERNELS_MATMUL_INL_H_
