#include "kernels/matmul.h"

#include <algorithm>
#include <cstring>

#include "kernels/dispatch.h"
#include "util/parallel.h"

namespace recur::kernels {
namespace {

constexpr std::size_t kAlign = 64;

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

void PackedMatrix::multiply(const float* X, std::int64_t rows, std::int64_t ldx, float* Y,
                            std::int64_t ldy, int threads) const {
  if (rows <= 0 || panels_ == 0) return;
  // Below ~64 KFLOP per worker the fork costs more than it saves.
  const std::int64_t work = rows * static_cast<std::int64_t>(n_out_) * k_in_;
  const int useful = static_cast<int>(std::max<std::int64_t>(1, std::min<std::int64_t>(work >> 15, panels_)));
  const int t = std::max(1, std::min(threads, useful));
  const MatmulCall call{data_, panel_stride_, n_out_, k_in_, storage_, X, rows, ldx, Y, ldy};
  const Kernels& kernels = active();
  detail::parallel_ranges(panels_, t, [&](int p0, int p1, int) { kernels.matmul(call, p0, p1); });
}

}  // namespace recur::kernels
