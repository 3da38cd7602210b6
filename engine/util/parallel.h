// Work split over threads. The split into ranges is fixed by the caller (from the thread count
// it asked for, never from how many threads actually run), and what a range computes never
// depends on which thread runs it, so the results are the same bytes however the ranges are
// handed out.
//
// The ranges are handed out dynamically: the calling thread and a few helper threads take the
// next range from one counter until none is left, and the caller waits only for ranges a helper
// has already taken. A helper that has lost its core (another process busy on it) therefore
// holds nothing up: the caller takes the ranges it would have taken. With OpenMP's fork and join
// every thread of the team had to arrive at every barrier, so one thread without a core stalled
// every matrix product of every token (docs/performance.md, "Threads on a busy machine").
#pragma once

#include <algorithm>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace recur::detail {

/// 0 means every core OpenMP reports (OMP_NUM_THREADS if set).
inline int resolve_threads(int requested) {
#ifdef _OPENMP
  return requested > 0 ? requested : std::max(1, omp_get_max_threads());
#else
  (void)requested;
  return 1;
#endif
}

using RangeFn = void (*)(const void* ctx, int begin, int end, int range);

/// Runs fn(ctx, begin, end, r) once for each of `ranges` contiguous ranges of [0, n) (range r is
/// [n r / ranges, n (r + 1) / ranges)), on the calling thread and up to threads - 1 helpers.
/// Inside a range of another call, inside an OpenMP parallel region, or under OMP_THREAD_LIMIT=1
/// it runs every range on the calling thread. fn must not throw.
void run_ranges(int n, int ranges, int threads, RangeFn fn, const void* ctx);

/// Splits [0, n) into `ranges` contiguous ranges and calls fn(begin, end, range) once for each,
/// on up to `threads` threads. Which thread runs a range, and in which order, is not fixed;
/// two ranges never run on one thread at the same time, so `range` may index per-range scratch.
template <class Fn>
void parallel_ranges(int n, int ranges, int threads, const Fn& fn) {
  run_ranges(n, ranges, threads,
             [](const void* ctx, int begin, int end, int r) {
               (*static_cast<const Fn*>(ctx))(begin, end, r);
             },
             &fn);
}

/// Ranges per thread for work that the threads share by heads or panels: the caller waits only
/// for ranges a helper has already taken, so the finer the ranges, the less of its share a
/// helper that came late leaves the caller waiting for at the end.
constexpr int kRangesPerThread = 4;

/// How many ranges to cut n items into for `threads` threads: kRangesPerThread each, one range
/// for one thread, never more than n.
inline int ranges_for(int n, int threads) {
  return std::max(1, std::min(n, threads > 1 ? threads * kRangesPerThread : 1));
}

/// As many threads as ranges.
template <class Fn>
void parallel_ranges(int n, int ranges, const Fn& fn) {
  parallel_ranges(n, ranges, ranges, fn);
}

/// Below this many rows per thread a row-wise stage runs on the calling thread: handing out a
/// range costs more than a few rows' work.
constexpr int kRowsPerRange = 4;

/// fn(r0, r1) over the rows [0, n) of a stage that works on each row alone (so that no split
/// changes a byte), in ranges over up to `threads` threads, or on the calling thread when the
/// rows are too few to share.
template <class Fn>
void parallel_rows(int n, int threads, const Fn& fn) {
  const int ranges = std::min(std::max(threads, 1), n / kRowsPerRange);
  if (ranges <= 1) return fn(0, n);
  parallel_ranges(n, ranges, [&](int r0, int r1, int) { fn(r0, r1); });
}

/// For tests only: the order in which ranges are handed out. kReversed hands them out last
/// first, so that a test can check that the order changes no byte. Returns the order before.
enum class RangeOrder { kAscending, kReversed };
RangeOrder set_range_order(RangeOrder order);

}  // namespace recur::detail
