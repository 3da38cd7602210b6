// The row-invariant matrix kernel: a row's products are the same bytes alone or among many, on
// one thread or two, and they are right.
#include <catch2/catch.hpp>

#include <cstring>
#include <random>

#include "kernels/matmul.h"
#include "kernels/quant.h"
#include "util/parallel.h"
#include "recur/safetensors.h"
#include "recur/types.h"

using recur::RowMatrix;
using recur::kernels::PackedMatrix;

namespace {

RowMatrix random_matrix(Eigen::Index rows, Eigen::Index cols, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d;
  RowMatrix m(rows, cols);
  for (Eigen::Index i = 0; i < m.size(); ++i) m.data()[i] = d(rng);
  return m;
}

}  // namespace

TEST_CASE("matmul: every row gives the same bytes whatever the rows and threads around it",
          "[matmul][exact]") {
  // n_out values that fill panels exactly, leave a partial panel, or are smaller than one; k_in
  // values small and large.
  for (const auto& [n_out, k_in] : std::vector<std::pair<int, int>>{{64, 32}, {100, 37}, {7, 5}, {1536, 512}, {80, 1}}) {
    const RowMatrix W = random_matrix(n_out, k_in, 1);
    const PackedMatrix P(W.data(), n_out, k_in);
    const int rows = 23;  // 3 tiles of 6 and a tail of 5
    const RowMatrix X = random_matrix(rows, k_in, 2);
    RowMatrix alone(rows, n_out);
    for (int r = 0; r < rows; ++r) P.multiply(X.row(r).data(), 1, k_in, alone.row(r).data(), n_out, 1);

    // Double-precision check of the values themselves.
    const Eigen::MatrixXd want = X.cast<double>() * W.cast<double>().transpose();
    const double scale = std::sqrt(double(k_in));
    CHECK((alone.cast<double>() - want).cwiseAbs().maxCoeff() < 1e-5 * scale);

    for (int threads : {1, 2}) {
      for (int first : {0, 1, 5}) {
        for (int count : {1, 2, 6, 7, 13, rows - first}) {
          if (first + count > rows) continue;
          RowMatrix Y(count, n_out);
          P.multiply(X.row(first).data(), count, k_in, Y.data(), n_out, threads);
          INFO("n_out " << n_out << ", k_in " << k_in << ", rows " << first << ".." << first + count
                        << ", threads " << threads);
          REQUIRE(std::memcmp(Y.data(), alone.row(first).data(),
                              sizeof(float) * static_cast<std::size_t>(count * n_out)) == 0);
        }
      }
    }
  }
}

TEST_CASE("matmul: strided inputs and outputs", "[matmul]") {
  const RowMatrix W = random_matrix(40, 24, 3);
  const PackedMatrix P(W.data(), 40, 24);
  const RowMatrix X = random_matrix(9, 50, 4);  // use columns 10..33
  RowMatrix Y = RowMatrix::Constant(9, 60, -7.0f);
  P.multiply(X.data() + 10, 9, 50, Y.data() + 5, 60, 2);
  const RowMatrix want = X.middleCols(10, 24) * W.transpose();
  CHECK((Y.middleCols(5, 40) - want).cwiseAbs().maxCoeff() < 1e-4f);
  CHECK((Y.leftCols(5).array() == -7.0f).all());     // nothing written outside the block
  CHECK((Y.rightCols(15).array() == -7.0f).all());
  CHECK(P.bytes() == 3 * 24 * 16 * sizeof(float));  // three panels of 16 columns
}

TEST_CASE("matmul: a different summation order gives different bytes (the test can fail)",
          "[matmul][exact]") {
  // Eigen's product sums in its own blocked order; on these shapes it differs from ours in some
  // bytes, which is why the model does not use it.
  const RowMatrix W = random_matrix(64, 512, 5);
  const RowMatrix X = random_matrix(16, 512, 6);
  const PackedMatrix P(W.data(), 64, 512);
  RowMatrix ours(16, 64);
  P.multiply(X.data(), 16, 512, ours.data(), 64, 1);
  RowMatrix eigen = X * W.transpose();
  CHECK(std::memcmp(ours.data(), eigen.data(), sizeof(float) * 16 * 64) != 0);
}

TEST_CASE("matmul: 16-bit storage gives the bytes of float storage of the same values",
          "[matmul][exact]") {
  for (const recur::DType dt : {recur::DType::kBF16, recur::DType::kF16}) {
    for (const auto& [n_out, k_in] : std::vector<std::pair<int, int>>{{100, 37}, {64, 256}, {1536, 64}}) {
      RowMatrix W = random_matrix(n_out, k_in, 7);
      for (Eigen::Index i = 0; i < W.size(); ++i)  // values exact in the 16-bit format
        W.data()[i] = dt == recur::DType::kBF16 ? recur::bf16_to_float(recur::float_to_bf16(W.data()[i]))
                                                : recur::f16_to_float(recur::float_to_f16(W.data()[i]));
      const PackedMatrix wide(W.data(), n_out, k_in, recur::DType::kF32);
      const PackedMatrix narrow(W.data(), n_out, k_in, dt);
      // Half the bytes, up to the few KiB of padding that staggers the panels.
      CHECK(narrow.bytes() * 2 <= wide.bytes() + wide.bytes() / 50);
      CHECK(narrow.bytes() * 2 >= wide.bytes() - wide.bytes() / 50);
      const RowMatrix X = random_matrix(23, k_in, 8);
      for (int rows : {1, 3, 6, 7, 23}) {
        for (int threads : {1, 2}) {
          RowMatrix a(rows, n_out), b(rows, n_out);
          wide.multiply(X.data(), rows, k_in, a.data(), n_out, threads);
          narrow.multiply(X.data(), rows, k_in, b.data(), n_out, threads);
          INFO(recur::dtype_name(dt) << ", " << n_out << " x " << k_in << ", rows " << rows << ", threads " << threads);
          REQUIRE(std::memcmp(a.data(), b.data(), sizeof(float) * static_cast<std::size_t>(a.size())) == 0);
        }
      }
    }
  }
}

TEST_CASE("matmul: products fused in one job give each product's own bytes at 1, 2 and 3 threads, "
          "in either range order", "[matmul][exact][threads]") {
  using recur::kernels::Product;
  using recur::kernels::QuantType;
  // Unequal products (one panel to 96) of float, bfloat16 and q8 weights, two of them reading
  // one input (their q8 activations are quantized once), the others their own.
  const int k_in = 256;
  struct Spec {
    int n_out;
    int kind;  // 0 f32, 1 bf16, 2 q8
    int input;
  };
  const std::vector<Spec> specs = {{1536, 2, 0}, {16, 2, 0}, {700, 1, 1}, {33, 0, 2}, {512, 2, 1}};
  std::vector<PackedMatrix> mats;
  for (std::size_t i = 0; i < specs.size(); ++i) {
    const RowMatrix W = random_matrix(specs[i].n_out, k_in, std::uint32_t(10 + i));
    if (specs[i].kind == 2)
      mats.emplace_back(recur::kernels::quantize_rows(W.data(), specs[i].n_out, k_in, QuantType::kQ8));
    else
      mats.emplace_back(W.data(), specs[i].n_out, k_in, specs[i].kind ? recur::DType::kBF16 : recur::DType::kF32);
  }
  for (const int rows : {1, 5}) {
    const RowMatrix X = random_matrix(3 * rows, k_in, 7);  // three inputs, rows apart
    std::vector<RowMatrix> want;
    for (std::size_t i = 0; i < specs.size(); ++i) {
      want.emplace_back(rows, specs[i].n_out);
      mats[i].multiply(X.row(specs[i].input * rows).data(), rows, k_in, want.back().data(),
                       specs[i].n_out, 1);
    }
    for (const auto order : {recur::detail::RangeOrder::kAscending, recur::detail::RangeOrder::kReversed}) {
      const auto before = recur::detail::set_range_order(order);
      for (const int threads : {1, 2, 3}) {
        std::vector<RowMatrix> got;
        std::vector<Product> products;
        for (std::size_t i = 0; i < specs.size(); ++i) got.emplace_back(rows, specs[i].n_out);
        for (std::size_t i = 0; i < specs.size(); ++i)
          products.push_back({&mats[i], X.row(specs[i].input * rows).data(), rows, k_in,
                              got[i].data(), specs[i].n_out});
        recur::kernels::multiply_all(products.data(), int(products.size()), threads);
        for (std::size_t i = 0; i < specs.size(); ++i) {
          INFO("rows " << rows << ", threads " << threads << ", product " << i);
          REQUIRE(std::memcmp(got[i].data(), want[i].data(),
                              sizeof(float) * std::size_t(got[i].size())) == 0);
        }
      }
      recur::detail::set_range_order(before);
    }
  }
}
