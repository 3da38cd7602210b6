#include "kernels/matmul.h"

#include <algorithm>
#include <cassert>
#include <cstring>
#include <vector>

#include "kernels/dispatch.h"
#include "kernels/quant_call.h"
#include "util/parallel.h"

namespace recur::kernels {
namespace {

constexpr std::size_t kAlign = 64;

// A job's panels are handed out in units of kGroupPanels, the most panels the decode kernel reads
// at once on any target, so that none is cut short; with more than one thread, the units are cut
// into more ranges than threads, taken as each thread comes free (util/parallel.h), so that a
// thread that loses its core leaves its share to the others.
constexpr int kGroupPanels = 8, kMaxRanges = 256;

// One row's quantized activations live on the stack up to this k_in (per product, up to
// kStackProducts distinct inputs), so that decode allocates nothing.
constexpr int kStackK = 8192, kStackProducts = 4;

// The activations of the quantized products of one job, quantized once per distinct input: in
// an arena on the caller's stack while it lasts, on the heap after.
struct QuantArena {
  alignas(64) std::int8_t qx[kStackProducts * kStackK];
  float dx[kStackProducts * kStackK / kQuantBlock];
  std::int32_t xs[kStackProducts * kStackK / kQuantBlock];
  std::size_t used = 0;  // codes taken
  std::vector<std::int8_t> qx_heap[kMaxProducts];
  std::vector<float> dx_heap[kMaxProducts];
  std::vector<std::int32_t> xs_heap[kMaxProducts];

  // Room for `codes` codes (a multiple of kQuantBlock) for product j.
  void take(int j, std::size_t codes, std::int8_t*& q, float*& d, std::int32_t*& x) {
    if (used + codes <= sizeof qx) {
      q = qx + used;
      d = dx + used / kQuantBlock;
      x = xs + used / kQuantBlock;
      used += codes;
      return;
    }
    const auto u = std::size_t(j);
    qx_heap[u].resize(codes);
    dx_heap[u].resize(codes / kQuantBlock);
    xs_heap[u].resize(codes / kQuantBlock);
    q = qx_heap[u].data();
    d = dx_heap[u].data();
    x = xs_heap[u].data();
  }
};

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

void PackedMatrix::multiply(const float* X, std::int64_t rows, std::int64_t ldx, float* Y,
                            std::int64_t ldy, int threads) const {
  const Product p{this, X, rows, ldx, Y, ldy};
  multiply_all(&p, 1, threads);
}

void multiply_all(const Product* products, int n, int threads) {
  assert(n >= 0 && n <= kMaxProducts);
  // Per product: its call, its first unit (a group of kGroupPanels panels) in the job's list,
  // and the bytes of one of its panels.
  MatmulCall calls[kMaxProducts] = {};
  QuantCall qcalls[kMaxProducts] = {};
  std::int8_t* qxs[kMaxProducts] = {};
  float* dxs[kMaxProducts] = {};
  std::int32_t* xss[kMaxProducts] = {};
  int first_unit[kMaxProducts + 1];
  std::size_t panel_bytes[kMaxProducts];
  QuantArena arena;
  std::int64_t work = 0;
  int panels = 0;
  first_unit[0] = 0;
  for (int j = 0; j < n; ++j) {
    const Product& p = products[j];
    const PackedMatrix& w = *p.w;
    const auto u = std::size_t(j);
    const bool live = p.rows > 0 && w.panels_ > 0;
    first_unit[j + 1] = first_unit[j] + (live ? (w.panels_ + kGroupPanels - 1) / kGroupPanels : 0);
    panel_bytes[u] = live ? w.bytes_ / std::size_t(w.panels_) : 0;
    if (!live) continue;
    work += p.rows * std::int64_t(w.n_out_) * w.k_in_;
    panels += w.panels_;
    if (!w.quantized_) {
      calls[u] = MatmulCall{w.data_, w.panel_stride_, w.n_out_, w.k_in_, w.storage_, p.X, p.rows, p.ldx, p.Y, p.ldy};
      continue;
    }
    // Activations are quantized once per row, before the split, so every panel and thread
    // reads the same codes; a product reading an input already quantized shares its codes.
    std::int8_t*& qx = qxs[u];
    float*& dx = dxs[u];
    std::int32_t*& xs = xss[u];
    for (int i = 0; i < j && !qx; ++i) {
      const Product& o = products[i];
      const auto v = std::size_t(i);
      if (qxs[v] && o.X == p.X && o.rows == p.rows && o.ldx == p.ldx && o.w->k_in_ == w.k_in_) {
        qx = qxs[v];
        dx = dxs[v];
        xs = xss[v];
      }
    }
    if (!qx) {
      arena.take(j, std::size_t(p.rows) * std::size_t(w.k_in_), qx, dx, xs);
      quantize_activations(p.X, p.rows, p.ldx, w.k_in_, qx, dx, xs);
    }
    qcalls[u] = QuantCall{w.data_, w.panel_stride_, w.n_out_, w.k_in_, w.quant_type_, qx, dx, xs, p.rows, p.Y, p.ldy};
  }
  if (panels == 0) return;
  const Kernels& kernels = active();
  // Runs product j's panels [p0, p1).
  const auto run = [&](int j, int p0, int p1) {
    const auto u = std::size_t(j);
    if (products[j].w->quantized_) kernels.matmul_q(qcalls[u], p0, p1);
    else kernels.matmul(calls[u], p0, p1);
  };
  // Runs the units [u0, u1) of the job's list.
  const auto run_units = [&](int u0, int u1) {
    for (int j = 0; j < n && u0 < u1; ++j) {
      const int a = std::max(u0, first_unit[j]), b = std::min(u1, first_unit[j + 1]);
      if (a >= b) continue;
      const int total = products[j].w->panels_;
      run(j, (a - first_unit[j]) * kGroupPanels,
          std::min(total, (b - first_unit[j]) * kGroupPanels));
    }
  };
  // Below ~64 KFLOP per worker the fork costs more than it saves.
  const int useful = static_cast<int>(std::max<std::int64_t>(1, std::min<std::int64_t>(work >> 15, panels)));
  const int t = std::max(1, std::min(threads, useful));
  const int units = first_unit[n];
  if (t <= 1) return run_units(0, units);
  // Range r holds the units whose bytes start at or after total r / R: ranges of about equal
  // bytes, whichever products their units belong to.
  const int ranges = std::min({units, t * detail::kRangesPerThread, kMaxRanges});
  std::size_t total = 0;
  for (int j = 0; j < n; ++j)
    for (int g = first_unit[j]; g < first_unit[j + 1]; ++g) {
      const int p0 = (g - first_unit[j]) * kGroupPanels;
      total += std::size_t(std::min(kGroupPanels, products[j].w->panels_ - p0)) * panel_bytes[std::size_t(j)];
    }
  int bound[kMaxRanges + 1];
  std::size_t before = 0;  // bytes of the units before unit `u`
  int u = 0, j = 0;
  for (int r = 0; r <= ranges; ++r) {
    const std::size_t at = r == ranges ? total + 1 : total * std::size_t(r) / std::size_t(ranges);
    while (u < units && before < at) {
      while (u >= first_unit[j + 1]) ++j;
      const int p0 = (u - first_unit[j]) * kGroupPanels;
      before += std::size_t(std::min(kGroupPanels, products[j].w->panels_ - p0)) * panel_bytes[std::size_t(j)];
      ++u;
    }
    bound[r] = u;
  }
  bound[ranges] = units;
  detail::parallel_ranges(ranges, ranges, t, [&](int r0, int, int) {
    run_units(bound[r0], bound[r0 + 1]);
  });
}

}  // namespace recur::kernels
