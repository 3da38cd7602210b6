// The benchmarks' baselines and machine measurements, compiled for the machine they run on
// (-march=native for this file only, bench/CMakeLists.txt): Eigen and the bandwidth loops at
// their best, not held to the portable instruction set that recur's own code is built for.
#include <omp.h>

// One thread, as the prefill it is compared with; Eigen would otherwise fork for every product.
#define EIGEN_DONT_PARALLELIZE
#include <Eigen/Dense>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <vector>

#include "bench_common.h"
#include "hwy/highway.h"

namespace recur::bench {
namespace hn = hwy::HWY_NAMESPACE;

double read_bandwidth(int threads, int streams) {
  static double measured[3][5] = {};
  const int t = std::max(1, std::min(threads, 2));
  const int S = streams >= 4 ? 4 : 1;
  if (measured[t][S] > 0) return measured[t][S];
  static std::vector<float> a(std::size_t(1) << 28, 1.0f);
  // Streams are staggered by a few KiB: starts a power of two apart alias in the caches and
  // read at half the speed.
  constexpr std::size_t kStagger = 1040;
  const std::size_t per = a.size() / std::size_t(t) / std::size_t(S) - 4096;  // floats per stream
  const hn::ScalableTag<float> d;
  const std::size_t N = hn::Lanes(d);
  double best = 0;
  for (int r = 0; r < 3; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    float total = 0;
#pragma omp parallel num_threads(t) reduction(+ : total)
    {
      const int w = omp_get_thread_num();
      const float* p0 = a.data() + (a.size() / std::size_t(t)) * std::size_t(w);
      auto s0 = hn::Zero(d), s1 = hn::Zero(d), s2 = hn::Zero(d), s3 = hn::Zero(d);
      if (S == 1) {
        for (std::size_t i = 0; i + 4 * N <= per; i += 4 * N) {
          s0 = hn::Add(s0, hn::LoadU(d, p0 + i));
          s1 = hn::Add(s1, hn::LoadU(d, p0 + i + N));
          s2 = hn::Add(s2, hn::LoadU(d, p0 + i + 2 * N));
          s3 = hn::Add(s3, hn::LoadU(d, p0 + i + 3 * N));
        }
      } else {
        const float* p1 = p0 + per + kStagger;
        const float* p2 = p1 + per + kStagger;
        const float* p3 = p2 + per + kStagger;
        for (std::size_t i = 0; i + N <= per; i += N) {
          s0 = hn::Add(s0, hn::LoadU(d, p0 + i));
          s1 = hn::Add(s1, hn::LoadU(d, p1 + i));
          s2 = hn::Add(s2, hn::LoadU(d, p2 + i));
          s3 = hn::Add(s3, hn::LoadU(d, p3 + i));
        }
      }
      total += hn::GetLane(hn::SumOfLanes(d, hn::Add(hn::Add(s0, s1), hn::Add(s2, s3))));
    }
    benchmark::DoNotOptimize(total);
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, double(std::size_t(t) * std::size_t(S) * per * sizeof(float)) / sec);
  }
  measured[t][S] = best;
  return best;
}

double state_traffic_seconds(int heads, int rows, int cols, long passes) {
  const std::size_t n = std::size_t(rows) * std::size_t(cols);
  static std::vector<float> P, L;
  P.assign(n * std::size_t(heads), 0.0f);
  L.assign(n * std::size_t(heads), 1.0f);
  const hn::ScalableTag<float> d;
  const std::size_t N = hn::Lanes(d);
  const auto x = hn::Set(d, 1e-3f);
  auto acc = hn::Zero(d);
  const auto t0 = std::chrono::steady_clock::now();
  for (long p = 0; p < passes; ++p) {
    for (std::size_t i = 0; i + N <= P.size(); i += N) {
      const auto v = hn::Add(hn::LoadU(d, P.data() + i), x);
      hn::StoreU(v, d, P.data() + i);
      acc = hn::Add(acc, hn::LoadU(d, L.data() + i));
    }
  }
  const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  benchmark::DoNotOptimize(hn::GetLane(acc));
  return sec / double(passes);
}

void eigen_chunkwise(const float* Q, const float* K, const float* V, float* O, long T, int heads,
                     int d, int chunk) {
  using Mat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using Arr = Eigen::Array<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using In = Eigen::Map<const Mat, 0, Eigen::OuterStride<>>;
  using Out = Eigen::Map<Mat, 0, Eigen::OuterStride<>>;
  const long ld = long(heads) * d;
  Arr fq(chunk, ld), fk(chunk, ld);  // features of one chunk, every head
  std::vector<Mat> S(std::size_t(heads), Mat::Zero(d, d));
  std::vector<Eigen::VectorXf> z(std::size_t(heads), Eigen::VectorXf::Zero(d));
  Mat A(chunk, chunk);
  Eigen::VectorXf den(chunk);
  for (long t0 = 0; t0 < T; t0 += chunk) {
    const int c = int(std::min<long>(chunk, T - t0));
    const auto q = Eigen::Map<const Arr>(Q + t0 * ld, c, ld);
    const auto k = Eigen::Map<const Arr>(K + t0 * ld, c, ld);
    // elu(x) + 1 = max(x, 0) + exp(min(x, 0)), in the form Eigen vectorizes.
    fq.topRows(c) = q.max(0.0f) + q.min(0.0f).exp();
    fk.topRows(c) = k.max(0.0f) + k.min(0.0f).exp();
    for (int h = 0; h < heads; ++h) {
      const auto hs = std::size_t(h);
      const In qh(fq.data() + long(h) * d, c, d, Eigen::OuterStride<>(ld));
      const In kh(fk.data() + long(h) * d, c, d, Eigen::OuterStride<>(ld));
      const In vh(V + t0 * ld + long(h) * d, c, d, Eigen::OuterStride<>(ld));
      Out oh(O + t0 * ld + long(h) * d, c, d, Eigen::OuterStride<>(ld));
      auto a = A.topLeftCorner(c, c);
      a.noalias() = qh * kh.transpose();
      a.triangularView<Eigen::StrictlyUpper>().setZero();
      oh.noalias() = qh * S[hs];
      oh.noalias() += a * vh;
      den.head(c).noalias() = qh * z[hs];
      den.head(c) += a.rowwise().sum();
      S[hs].noalias() += kh.transpose() * vh;
      z[hs] += kh.colwise().sum().transpose();
      oh.array().colwise() /= den.head(c).array() + 1e-6f;
    }
  }
}

}  // namespace recur::bench
