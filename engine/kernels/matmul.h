// A row-invariant matrix product for the model's projections: Y = X W^T, with W stored as a
// torch Linear weight (n_out, k_in).
//
// The canonical order: every output element is one FMA chain over k = 0, 1, ..., k_in - 1,
//   y[r][n] = fma(x[r][k], w[n][k], y[r][n]),  starting from y = 0,
// whatever the number of rows, the tile a row falls in, or the thread that computes it. A token's
// projections therefore give the same bytes whether it is decoded alone or prefilled among
// thousands (docs/design.md, "One reduction order"). Eigen's product cannot promise that: it picks different kernels and
// blockings for one row and for many.
//
// Weights may be kept as float32, bfloat16 or IEEE half. The 16-bit forms widen to float exactly
// as they are loaded, so a product reads the same numbers, and gives the same bytes, as with the
// weights widened in advance; decode, which only streams weights, reads half the bytes.
// Quantized weights (q8, q4: quant.h) follow their own rule, integer dot products per block of
// 32 and one float chain over the blocks, equally independent of rows, threads and target.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "kernels/quant.h"
#include "recur/dtype.h"

namespace recur::kernels {

/// Output columns per panel: one vector of 16 lanes, two of 8 or four of 4.
inline constexpr int kPanelCols = 16;

class PackedMatrix;

/// One product of a fused job (multiply_all): Y (rows, n_out; row stride ldy) = X W^T.
struct Product {
  const PackedMatrix* w;
  const float* X;
  std::int64_t rows, ldx;
  float* Y;
  std::int64_t ldy;
};

/// The most products one multiply_all call takes.
inline constexpr int kMaxProducts = 8;

/// Several products as one job over up to `threads` workers: their panels in one list, cut into
/// ranges of about equal bytes of weights (what decode's time goes by), so that the threads
/// meet once for all of them instead of once per product, and finish together however unequal
/// the products are. Each output is computed as its own multiply() computes it: the same bytes
/// for any split. Products that read the same X (pointer, rows, ldx and k_in) share one
/// quantization of it. n <= kMaxProducts; outputs must not overlap inputs or each other.
void multiply_all(const Product* products, int n, int threads);

class PackedMatrix {
 public:
  PackedMatrix() = default;
  /// Packs w (n_out rows of k_in floats, row stride k_in) into panels of 16 output columns,
  /// k-major within a panel, stored as `storage`; the last panel is padded with zero columns.
  /// Padding changes where numbers are stored, never the order in which they are summed. With
  /// a 16-bit storage, w's values should be exactly representable in it (they are when they
  /// were read from a file of that dtype); others are rounded to nearest even.
  PackedMatrix(const float* w, int n_out, int k_in, DType storage = DType::kF32);
  /// Packs quantized weights (checked with check_quantized, as "PackedMatrix") into panels of
  /// 16 output rows for the integer kernels (kernels/quant_call.h); the product then follows
  /// the quantized rule of quant.h instead of the FMA chain over k.
  explicit PackedMatrix(const QuantizedRows& q);

  int n_out() const { return n_out_; }
  int k_in() const { return k_in_; }
  /// The float storage; meaningless when quantized().
  DType storage() const { return storage_; }
  /// Whether the weights are quantized, and how (quant_type() only when quantized()).
  bool quantized() const { return quantized_; }
  QuantType quant_type() const { return quant_type_; }
  /// Bytes of the packed panels (codes and scales when quantized): what one product reads of
  /// the weights.
  std::size_t bytes() const { return bytes_; }

  /// Y (rows, n_out; row stride ldy) = X (rows, k_in; row stride ldx) W^T. Splits the panels
  /// over up to `threads` workers (>= 1); the split changes no result. With one row it
  /// allocates nothing.
  void multiply(const float* X, std::int64_t rows, std::int64_t ldx, float* Y, std::int64_t ldy,
                int threads) const;

 private:
  int n_out_ = 0;
  int k_in_ = 0;
  int panels_ = 0;
  DType storage_ = DType::kF32;
  bool quantized_ = false;
  QuantType quant_type_ = QuantType::kQ8;
  std::size_t panel_stride_ = 0;  // elements (bytes when quantized) from one panel to the next
  std::size_t bytes_ = 0;
  std::shared_ptr<unsigned char[]> storage_bytes_;  // shared: a packed matrix is immutable
  unsigned char* data_ = nullptr;  // 64-byte aligned, (panels, k_in, 16) or quantized records

  void allocate();
  friend void multiply_all(const Product* products, int n, int threads);
};

}  // namespace recur::kernels
