// The benchmarks' baselines and machine measurements, compiled for the machine they run on
// (-march=native for this file only, bench/CMakeLists.txt): Eigen and the bandwidth loops at
// their best, not held to the portable instruction set that recur's own code is built for.
#include <omp.h>

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
  const long ld = long(heads) * d;
  const auto phi = [](float x) { return x > 0 ? x + 1.0f : std::exp(x); };
  Mat q(chunk, d), k(chunk, d), v(chunk, d), S(d, d), A(chunk, chunk), o(chunk, d);
  Eigen::VectorXf z(d), den(chunk);
  for (int h = 0; h < heads; ++h) {
    S.setZero();
    z.setZero();
    for (long t0 = 0; t0 < T; t0 += chunk) {
      const int c = int(std::min<long>(chunk, T - t0));
      for (int t = 0; t < c; ++t)
        for (int i = 0; i < d; ++i) {
          const long at = (t0 + t) * ld + long(h) * d + i;
          q(t, i) = phi(Q[at]);
          k(t, i) = phi(K[at]);
          v(t, i) = V[at];
        }
      auto qc = q.topRows(c);
      auto kc = k.topRows(c);
      auto vc = v.topRows(c);
      A.topLeftCorner(c, c).noalias() = qc * kc.transpose();
      A.topLeftCorner(c, c).triangularView<Eigen::StrictlyUpper>().setZero();
      o.topRows(c).noalias() = qc * S;
      o.topRows(c).noalias() += A.topLeftCorner(c, c) * vc;
      den.head(c).noalias() = qc * z;
      den.head(c) += A.topLeftCorner(c, c).rowwise().sum();
      S.noalias() += kc.transpose() * vc;
      z += kc.colwise().sum().transpose();
      for (int t = 0; t < c; ++t)
        for (int i = 0; i < d; ++i)
          O[(t0 + t) * ld + long(h) * d + i] = o(t, i) / (den(t) + 1e-6f);
    }
  }
}

}  // namespace recur::bench
