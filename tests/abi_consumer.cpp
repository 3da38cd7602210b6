// A program compiled for the x86-64 baseline (no AVX), linked with the library as it was built
// (with -march=native, say): Eigen objects that the library allocates are freed here, and the
// other way round. Without one Eigen alignment for both sides (recur's public compile
// definitions) this crashes in free() or is reported by AddressSanitizer.
#include <cstdio>
#include <cstring>

#include "recur/linear_attention.h"

int main() {
  int passed = 0, failed = 0;
  const auto check = [&](bool ok, const char* what) {
    (ok ? passed : failed) += 1;
    if (!ok) std::printf("FAILED: %s\n", what);
  };
  recur::LinearAttentionConfig c;
  c.n_heads = 2;
  c.d_key = 16;
  c.d_value = 16;
  const recur::LinearAttention layer(c);
  for (int round = 0; round < 3; ++round) {
    auto state = layer.make_state();
    const recur::RowMatrix Q = recur::RowMatrix::Random(40, 32), K = recur::RowMatrix::Random(40, 32);
    const recur::RowMatrix V = recur::RowMatrix::Random(40, 32);
    recur::RowMatrix O = layer.prefill(state, Q, K, V);  // allocated by the library
    check(O.rows() == 40 && O.allFinite(), "prefill returns a finite (40, 32) matrix");
    Eigen::VectorXf o = layer.step(state, Q.row(0).transpose(), K.row(0).transpose(),
                                   V.row(0).transpose());  // allocated by the library
    Eigen::VectorXf o2(32);                               // allocated here, written there
    auto branch = state.clone();
    state.reset();
    layer.step(state, Q.row(0).transpose(), K.row(0).transpose(), V.row(0).transpose(), o2);
    check(o.allFinite() && o2.allFinite(), "step outputs are finite");
    Eigen::MatrixXd S = branch.S(1);  // allocated by the library, freed here
    check(S.rows() == 16 && S.cols() == 16 && S.allFinite(), "S has the head's shape");
    O.resize(100, 100);  // reallocated here: frees the library's buffer
    o.resize(1000);
    S.resize(3, 3);
  }
  std::printf("%d passed, %d failed\n", passed, failed);
  return failed == 0 ? 0 : 1;
}
