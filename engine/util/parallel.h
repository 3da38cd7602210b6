// Work split over heads. Heads are independent, so how they are split over threads changes
// nothing in the arithmetic; OpenMP keeps its workers alive between calls.
#pragma once

#include <algorithm>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace recur::detail {

/// 0 means every core OpenMP reports.
inline int resolve_threads(int requested) {
#ifdef _OPENMP
  return requested > 0 ? requested : std::max(1, omp_get_max_threads());
#else
  (void)requested;
  return 1;
#endif
}

/// Splits [0, n) into `threads` contiguous ranges and calls fn(begin, end, worker) for each,
/// in parallel. fn must not throw.
template <class Fn>
void parallel_ranges(int n, int threads, const Fn& fn) {
  const auto range = [&](int w) {
    fn(n * w / threads, n * (w + 1) / threads, w);
  };
  if (threads <= 1) {
    range(0);
    return;
  }
#ifdef _OPENMP
#pragma omp parallel num_threads(threads)
  range(omp_get_thread_num());
#endif
}

}  // namespace recur::detail
