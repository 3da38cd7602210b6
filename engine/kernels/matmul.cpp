#include "kernels/matmul.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/dispatch.h"
#include "kernels/quant_call.h"
#include "util/parallel.h"

namespace recur::kernels {
namespace {

constexpr std::size_t kAlign = 64;

// Calls fn(p0, p1) over [0, panels) on t threads. With more than one, the panels are cut into
// more ranges than threads, taken as each thread comes free (util/parallel.h), so that a thread
// that loses its core leaves its share to the others. Ranges are whole groups of kGroupPanels,
// the most panels the decode kernel reads at once on any target, so that none is cut short.
template <class Fn>
void for_panel_ranges(int panels, int t, const Fn& fn) {
  if (t <= 1) return fn(0, panels);
  constexpr int kGroupPanels = 8, kRangesPerThread = 4;
  const int groups = (panels + kGroupPanels - 1) / kGroupPanels;
  const int ranges = std::min(groups, t * kRangesPerThread);
  detail::parallel_ranges(groups, ranges, t, [&](int g0, int g1, int) {
    fn(g0 * kGroupPanels, std::min(panels, g1 * kGroupPanels));
  });
}
// One row's quantized activations live on the stack up to this k_in, so that decode allocates
// nothing.
constexpr int kStackK = 8192;

}  // namespace

void PackedMatrix::allocate() {
  storage_bytes_.reset(new unsigned char[bytes_ + kAlign]);
  const auto addr = reinterpret_cast<std::uintptr_t>(storage_bytes_.get());
  data_ = storage_bytes_.get() + (kAlign - addr % kAlign) % kAlign;
  std::memset(data_, 0, bytes_);
}

PackedMatrix::PackedMatrix(const float* w, int n_out, int k_in, DType storage)
    : n_out_(n_out), k_in_(k_in), panels_((n_out + kPanelCols - 1) / kPanelCols), storage_(storage) {
  const auto elem = static_cast<std::size_t>(dtype_size(storage));
  // Panels whose starts lie a multiple of 4 KiB apart alias in the caches when decode reads four
  // at once; a gap of one row of the panel staggers them.
  panel_stride_ = static_cast<std::size_t>(k_in) * kPanelCols;
  if ((panel_stride_ * elem) % 4096 == 0) panel_stride_ += kPanelCols;
  bytes_ = static_cast<std::size_t>(panels_) * panel_stride_ * elem;
  allocate();
  for (int n = 0; n < n_out; ++n) {
    const std::size_t base = static_cast<std::size_t>(n / kPanelCols) * panel_stride_ +
                             static_cast<std::size_t>(n % kPanelCols);
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

PackedMatrix::PackedMatrix(const QuantizedRows& q)
    : n_out_(q.n_out), k_in_(q.k_in), panels_((q.n_out + kQuantPanel - 1) / kQuantPanel),
      quantized_(true), quant_type_(q.type) {
  check_quantized(q, "PackedMatrix");
  const bool q8 = q.type == QuantType::kQ8;
  const int blocks = q.blocks_per_row();
  const std::size_t record = q8 ? kQ8Record : kQ4Record;
  panel_stride_ = static_cast<std::size_t>(blocks) * record;
  bytes_ = static_cast<std::size_t>(panels_) * panel_stride_;
  allocate();
  if (!q8) {
    // Padded outputs: code 0 is the nibble 8.
    for (int p = 0; p < panels_; ++p)
      for (int b = 0; b < blocks; ++b)
        std::memset(data_ + std::size_t(p) * panel_stride_ + std::size_t(b) * record + 2 * kQuantPanel,
                    0x88, kQuantPanel * kQuantBlock / 2);
  }
  for (int n = 0; n < q.n_out; ++n) {
    const int o = n % kQuantPanel;
    for (int b = 0; b < blocks; ++b) {
      unsigned char* rec = data_ + std::size_t(n / kQuantPanel) * panel_stride_ + std::size_t(b) * record;
      std::memcpy(rec + 2 * o, &q.scales[std::size_t(n) * std::size_t(blocks) + std::size_t(b)], 2);
      unsigned char* codes = rec + 2 * kQuantPanel;
      if (q8) {
        const std::uint8_t* src = q.codes.data() + std::size_t(n) * std::size_t(q.k_in) + std::size_t(b) * kQuantBlock;
        for (int k = 0; k < kQuantBlock; ++k) codes[(k / 4) * 64 + o * 4 + k % 4] = src[k];
      } else {
        // File byte j holds inputs j (low) and j + 16 (high); here byte (g, o, j) holds 4g + j
        // (low) and 4g + 16 + j (high), g < 4: the same pairs, regrouped.
        const std::uint8_t* src = q.codes.data() + (std::size_t(n) * std::size_t(q.k_in) + std::size_t(b) * kQuantBlock) / 2;
        for (int k = 0; k < 16; ++k) codes[(k / 4) * 64 + o * 4 + k % 4] = src[k];
      }
    }
  }
}

void PackedMatrix::multiply_quantized(const float* X, std::int64_t rows, std::int64_t ldx,
                                      float* Y, std::int64_t ldy, int threads) const {
  // Activations are quantized once per row, before the split, so every panel and thread reads
  // the same codes.
  const int blocks = k_in_ / kQuantBlock;
  alignas(64) std::int8_t qx_stack[kStackK];
  float dx_stack[kStackK / kQuantBlock];
  std::int32_t xs_stack[kStackK / kQuantBlock];
  std::vector<std::int8_t> qx_heap;
  std::vector<float> dx_heap;
  std::vector<std::int32_t> xs_heap;
  std::int8_t* qx = qx_stack;
  float* dx = dx_stack;
  std::int32_t* xs = xs_stack;
  if (rows * k_in_ > kStackK) {
    qx_heap.resize(static_cast<std::size_t>(rows * k_in_));
    dx_heap.resize(static_cast<std::size_t>(rows * blocks));
    xs_heap.resize(static_cast<std::size_t>(rows * blocks));
    qx = qx_heap.data();
    dx = dx_heap.data();
    xs = xs_heap.data();
  }
  quantize_activations(X, rows, ldx, k_in_, qx, dx, xs);
  const std::int64_t work = rows * static_cast<std::int64_t>(n_out_) * k_in_;
  const int useful = static_cast<int>(std::max<std::int64_t>(1, std::min<std::int64_t>(work >> 15, panels_)));
  const int t = std::max(1, std::min(threads, useful));
  const QuantCall call{data_, panel_stride_, n_out_, k_in_, quant_type_, qx, dx, xs, rows, Y, ldy};
  const Kernels& kernels = active();
  for_panel_ranges(panels_, t, [&](int p0, int p1) { kernels.matmul_q(call, p0, p1); });
}

void PackedMatrix::multiply(const float* X, std::int64_t rows, std::int64_t ldx, float* Y,
                            std::int64_t ldy, int threads) const {
  if (rows <= 0 || panels_ == 0) return;
  if (quantized_) return multiply_quantized(X, rows, ldx, Y, ldy, threads);
  // Below ~64 KFLOP per worker the fork costs more than it saves.
  const std::int64_t work = rows * static_cast<std::int64_t>(n_out_) * k_in_;
  const int useful = static_cast<int>(std::max<std::int64_t>(1, std::min<std::int64_t>(work >> 15, panels_)));
  const int t = std::max(1, std::min(threads, useful));
  const MatmulCall call{data_, panel_stride_, n_out_, k_in_, storage_, X, rows, ldx, Y, ldy};
  const Kernels& kernels = active();
  for_panel_ranges(panels_, t, [&](int p0, int p1) { kernels.matmul(call, p0, p1); });
}

}  // namespace recur::kernels
