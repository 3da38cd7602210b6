#include "kernels/matmul.h"

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "kernels/simd.h"
#include "util/parallel.h"

namespace recur::kernels {
namespace {

constexpr std::size_t kAlign = 64;
constexpr int kRowTile = 6;      // rows per register tile: 6 x 16 outputs = 12 accumulators
constexpr int kDecodePanels = 4;  // panels walked together when there is one row

// How a panel's elements are stored and widened to float. Every policy yields the same floats
// for the same weights, so the kernels below give the same bytes with any of them.
// load16 reads the sixteen columns of one k of a panel: columns 0-7 into a, 8-15 into b.
struct F32Panel {
  using T = float;
  static void load16(const float* p, F8& a, F8& b) {
    a = load8(p);
    b = load8(p + 8);
  }
};
struct BF16Panel {  // stored in load16_bf16's order (bf16_unpack_slot)
  using T = std::uint16_t;
  static void load16(const std::uint16_t* p, F8& a, F8& b) { load16_bf16(p, a, b); }
};
struct F16Panel {
  using T = std::uint16_t;
  static void load16(const std::uint16_t* p, F8& a, F8& b) {
    a = load8_f16(p);
    b = load8_f16(p + 8);
  }
};

// Stores a row of 16 results, or its first `cols` when the panel is the padded last one.
inline void store_row(float* y, F8 a, F8 b, int cols) {
  if (cols == kPanelCols) {
    store8(y, a);
    store8(y + 8, b);
    return;
  }
  float tmp[kPanelCols];
  store8(tmp, a);
  store8(tmp + 8, b);
  std::memcpy(y, tmp, sizeof(float) * static_cast<std::size_t>(cols));
}

// R rows (R <= 6) times one panel. Each accumulator is one chain over k ascending. The
// accumulators are named variables, not an array: GCC keeps an array of vector structs in memory
// and stores it back on every iteration.
template <int R, class Panel>
void tile_rows(const float* X, std::int64_t ldx, const typename Panel::T* panel, int K, float* Y,
               std::int64_t ldy, int cols) {
  static_assert(R >= 1 && R <= 6, "tile of 1 to 6 rows");
  F8 a0 = zero8(), b0 = zero8(), a1 = zero8(), b1 = zero8(), a2 = zero8(), b2 = zero8();
  F8 a3 = zero8(), b3 = zero8(), a4 = zero8(), b4 = zero8(), a5 = zero8(), b5 = zero8();
  const float* x0 = X;
  const float* x1 = X + (R > 1 ? ldx : 0);
  const float* x2 = X + (R > 2 ? 2 * ldx : 0);
  const float* x3 = X + (R > 3 ? 3 * ldx : 0);
  const float* x4 = X + (R > 4 ? 4 * ldx : 0);
  const float* x5 = X + (R > 5 ? 5 * ldx : 0);
  for (int k = 0; k < K; ++k) {
    F8 w0, w1;
    Panel::load16(panel + 16 * k, w0, w1);
    F8 xb = broadcast8(x0 + k);
    a0 = fma8(xb, w0, a0);
    b0 = fma8(xb, w1, b0);
    if constexpr (R > 1) {
      xb = broadcast8(x1 + k);
      a1 = fma8(xb, w0, a1);
      b1 = fma8(xb, w1, b1);
    }
    if constexpr (R > 2) {
      xb = broadcast8(x2 + k);
      a2 = fma8(xb, w0, a2);
      b2 = fma8(xb, w1, b2);
    }
    if constexpr (R > 3) {
      xb = broadcast8(x3 + k);
      a3 = fma8(xb, w0, a3);
      b3 = fma8(xb, w1, b3);
    }
    if constexpr (R > 4) {
      xb = broadcast8(x4 + k);
      a4 = fma8(xb, w0, a4);
      b4 = fma8(xb, w1, b4);
    }
    if constexpr (R > 5) {
      xb = broadcast8(x5 + k);
      a5 = fma8(xb, w0, a5);
      b5 = fma8(xb, w1, b5);
    }
  }
  store_row(Y, a0, b0, cols);
  if constexpr (R > 1) store_row(Y + ldy, a1, b1, cols);
  if constexpr (R > 2) store_row(Y + 2 * ldy, a2, b2, cols);
  if constexpr (R > 3) store_row(Y + 3 * ldy, a3, b3, cols);
  if constexpr (R > 4) store_row(Y + 4 * ldy, a4, b4, cols);
  if constexpr (R > 5) store_row(Y + 5 * ldy, a5, b5, cols);
}

// One row times four whole panels: eight independent chains hide the FMA latency that a single
// row's two chains would expose. The same chain per element as tile_rows.
template <class Panel>
void row_panels4(const float* x, const typename Panel::T* panel, std::size_t panel_stride, int K,
                 float* y) {
  F8 a0 = zero8(), b0 = zero8(), a1 = zero8(), b1 = zero8();
  F8 a2 = zero8(), b2 = zero8(), a3 = zero8(), b3 = zero8();
  const auto* p0 = panel;
  const auto* p1 = p0 + panel_stride;
  const auto* p2 = p1 + panel_stride;
  const auto* p3 = p2 + panel_stride;
  for (int k = 0; k < K; ++k) {
    const F8 xb = broadcast8(x + k);
    F8 w0, w1;
    Panel::load16(p0 + 16 * k, w0, w1);
    a0 = fma8(xb, w0, a0);
    b0 = fma8(xb, w1, b0);
    Panel::load16(p1 + 16 * k, w0, w1);
    a1 = fma8(xb, w0, a1);
    b1 = fma8(xb, w1, b1);
    Panel::load16(p2 + 16 * k, w0, w1);
    a2 = fma8(xb, w0, a2);
    b2 = fma8(xb, w1, b2);
    Panel::load16(p3 + 16 * k, w0, w1);
    a3 = fma8(xb, w0, a3);
    b3 = fma8(xb, w1, b3);
  }
  store_row(y, a0, b0, kPanelCols);
  store_row(y + 16, a1, b1, kPanelCols);
  store_row(y + 32, a2, b2, kPanelCols);
  store_row(y + 48, a3, b3, kPanelCols);
}

// 1 to 5 rows (fewer than a full tile) times one panel.
template <class Panel>
void few_rows(std::int64_t rows, const float* X, std::int64_t ldx, const typename Panel::T* panel,
              int K, float* Y, std::int64_t ldy, int cols) {
  switch (rows) {
    case 5: tile_rows<5, Panel>(X, ldx, panel, K, Y, ldy, cols); break;
    case 4: tile_rows<4, Panel>(X, ldx, panel, K, Y, ldy, cols); break;
    case 3: tile_rows<3, Panel>(X, ldx, panel, K, Y, ldy, cols); break;
    case 2: tile_rows<2, Panel>(X, ldx, panel, K, Y, ldy, cols); break;
    case 1: tile_rows<1, Panel>(X, ldx, panel, K, Y, ldy, cols); break;
    default: break;
  }
}

}  // namespace

PackedMatrix::PackedMatrix(const float* w, int n_out, int k_in, DType storage)
    : n_out_(n_out), k_in_(k_in), panels_((n_out + kPanelCols - 1) / kPanelCols), storage_(storage) {
  const auto elem = static_cast<std::size_t>(dtype_size(storage));
  // Panels whose starts lie a multiple of 4 KiB apart alias in the caches when decode reads four
  // at once; a gap of one row of the panel staggers them.
  panel_stride_ = static_cast<std::size_t>(k_in) * kPanelCols;
  if ((panel_stride_ * elem) % 4096 == 0) panel_stride_ += kPanelCols;
  bytes_ = static_cast<std::size_t>(panels_) * panel_stride_ * elem;
  storage_bytes_.reset(new unsigned char[bytes_ + kAlign]);
  const auto addr = reinterpret_cast<std::uintptr_t>(storage_bytes_.get());
  data_ = storage_bytes_.get() + (kAlign - addr % kAlign) % kAlign;
  std::memset(data_, 0, bytes_);
  for (int n = 0; n < n_out; ++n) {
    const int column = n % kPanelCols;
    const int slot = storage == DType::kBF16 ? bf16_unpack_slot(column) : column;
    const std::size_t base = static_cast<std::size_t>(n / kPanelCols) * panel_stride_ +
                             static_cast<std::size_t>(slot);
    const float* row = w + static_cast<std::size_t>(n) * static_cast<std::size_t>(k_in);
    for (int k = 0; k < k_in; ++k) {
      const std::size_t at = base + static_cast<std::size_t>(k) * kPanelCols;
      if (storage == DType::kF32) {
        std::memcpy(data_ + at * 4, &row[k], 4);
      } else {
        const std::uint16_t h = storage == DType::kBF16 ? float_to_bf16(row[k]) : float_to_f16(row[k]);
        std::memcpy(data_ + at * 2, &h, 2);
      }
    }
  }
}

template <class Panel>
void PackedMatrix::multiply_panels(const float* X, std::int64_t rows, std::int64_t ldx,
                                   float* Y, std::int64_t ldy, int p0, int p1) const {
  using T = typename Panel::T;
  const auto* data = reinterpret_cast<const T*>(data_);
  const std::size_t stride = panel_stride_;
  const auto panel_cols = [&](int p) { return std::min(kPanelCols, n_out_ - p * kPanelCols); };
  if (rows < kRowTile) {
    // Few rows: widen each weight as it streams past.
    int p = p0;
    if (rows == 1) {
      for (; p + kDecodePanels <= p1 && (p + kDecodePanels) * kPanelCols <= n_out_; p += kDecodePanels)
        row_panels4<Panel>(X, data + stride * static_cast<std::size_t>(p), stride, k_in_,
                           Y + p * kPanelCols);
    }
    for (; p < p1; ++p)
      few_rows<Panel>(rows, X, ldx, data + stride * static_cast<std::size_t>(p), k_in_,
                      Y + p * kPanelCols, ldy, panel_cols(p));
    return;
  }
  // Many rows: a 16-bit panel is widened once into a float copy that every row tile then reads.
  std::vector<float> widened;
  if (!std::is_same_v<Panel, F32Panel>) widened.resize(static_cast<std::size_t>(k_in_) * kPanelCols);
  for (int p = p0; p < p1; ++p) {
    const T* stored = data + stride * static_cast<std::size_t>(p);
    const float* panel;
    if constexpr (std::is_same_v<Panel, F32Panel>) {
      panel = stored;
    } else {
      for (std::size_t i = 0; i < widened.size(); i += kPanelCols) {
        F8 a, b;
        Panel::load16(stored + i, a, b);
        store8(widened.data() + i, a);
        store8(widened.data() + i + 8, b);
      }
      panel = widened.data();
    }
    const int cols = panel_cols(p);
    float* Yp = Y + p * kPanelCols;
    std::int64_t r = 0;
    for (; r + kRowTile <= rows; r += kRowTile)
      tile_rows<kRowTile, F32Panel>(X + r * ldx, ldx, panel, k_in_, Yp + r * ldy, ldy, cols);
    few_rows<F32Panel>(rows - r, X + r * ldx, ldx, panel, k_in_, Yp + r * ldy, ldy, cols);
  }
}

void PackedMatrix::multiply(const float* X, std::int64_t rows, std::int64_t ldx, float* Y,
                            std::int64_t ldy, int threads) const {
  if (rows <= 0 || panels_ == 0) return;
  // Below ~64 KFLOP per worker the fork costs more than it saves.
  const std::int64_t work = rows * static_cast<std::int64_t>(n_out_) * k_in_;
  const int useful = static_cast<int>(std::max<std::int64_t>(1, std::min<std::int64_t>(work >> 15, panels_)));
  const int t = std::max(1, std::min(threads, useful));
  detail::parallel_ranges(panels_, t, [&](int p0, int p1, int) {
    switch (storage_) {
      case DType::kF32: multiply_panels<F32Panel>(X, rows, ldx, Y, ldy, p0, p1); break;
      case DType::kBF16: multiply_panels<BF16Panel>(X, rows, ldx, Y, ldy, p0, p1); break;
      case DType::kF16: multiply_panels<F16Panel>(X, rows, ldx, Y, ldy, p0, p1); break;
    }
  });
}

}  // namespace recur::kernels
