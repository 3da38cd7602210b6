// Work split over threads. The split is fixed by the thread count the caller asked for, and
// what a range computes never depends on which thread runs it, so the results are the same
// bytes however many threads OpenMP actually starts.
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

/// Splits [0, n) into `ranges` contiguous ranges and calls fn(begin, end, range) once for each,
/// in parallel where OpenMP gives threads. OpenMP may start fewer threads than asked (inside
/// another parallel region with nesting off, under OMP_THREAD_LIMIT or OMP_DYNAMIC), so the
/// threads of the team it does start take the ranges in turn: every range runs exactly once,
/// whatever the team's size. fn must not throw.
template <class Fn>
void parallel_ranges(int n, int ranges, const Fn& fn) {
  const auto range = [&](int r) { fn(n * r / ranges, n * (r + 1) / ranges, r); };
  if (ranges <= 1) {
    range(0);
    return;
  }
#ifdef _OPENMP
#pragma omp parallel num_threads(ranges)
  {
    const int team = omp_get_num_threads();
    for (int r = omp_get_thread_num(); r < ranges; r += team) range(r);
  }
#else
  for (int r = 0; r < ranges; ++r) range(r);
#endif
}

}  // namespace recur::detail
