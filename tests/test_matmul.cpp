// The row-invariant matrix kernel: a row's products are the same bytes alone or among many, on
// one thread or two, and they are right.
#include <catch2/catch.hpp>

#include <cstring>
#include <random>

#include "kernels/matmul.h"
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
