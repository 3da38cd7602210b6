// Matrix types used in recur's API. Sequences are token-major: row t is token t, and the
// heads of one token lie side by side in that row.
#pragma once

#include <Eigen/Core>

namespace recur {

/// (rows, cols) float32, row-major.
using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
/// (rows, cols) float64, row-major.
using RowMatrixD = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

/// A read-only view of a row-major float matrix (a whole matrix or a block of columns).
using ConstMatrixRef = Eigen::Ref<const RowMatrix, 0, Eigen::OuterStride<>>;
/// A writable view of a row-major float matrix.
using MatrixRef = Eigen::Ref<RowMatrix, 0, Eigen::OuterStride<>>;
/// A read-only view of a contiguous float vector.
using ConstVectorRef = Eigen::Ref<const Eigen::VectorXf>;
/// A writable view of a contiguous float vector.
using VectorRef = Eigen::Ref<Eigen::VectorXf>;

}  // namespace recur
