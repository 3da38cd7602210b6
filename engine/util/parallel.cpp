#include "util/parallel.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cctype>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#if defined(__linux__)
#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace recur::detail {
namespace {

using Clock = std::chrono::steady_clock;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// How long a waiting thread spins before it sleeps. Long enough to bridge the gaps between
// the products of one token (the attention step, the norms), short enough that a helper whose
// core is wanted by another process gives it back. OMP_WAIT_POLICY keeps its meaning for
// users who set it (passive: sleep at once; active: spin for a long time); RECUR_SPIN_US sets
// the time itself.
Clock::duration spin_budget() {
  static const Clock::duration budget = [] {
    using std::chrono::microseconds;
    if (const char* us = std::getenv("RECUR_SPIN_US")) return Clock::duration(microseconds(std::atol(us)));
    if (const char* p = std::getenv("OMP_WAIT_POLICY")) {
      const auto is = [&](const char* word) {
        for (std::size_t i = 0;; ++i) {
          if (std::tolower(static_cast<unsigned char>(p[i])) != word[i]) return false;
          if (!word[i]) return true;
        }
      };
      if (is("passive")) return Clock::duration(0);
      if (is("active")) return Clock::duration(std::chrono::milliseconds(100));
    }
    return Clock::duration(microseconds(100));
  }();
  return budget;
}

// How much time helpers may have saved the caller (on the jobs since the last late one) that
// later waits for them can spend before they count as late (Pool::note_wait). A helper that
// woke a little late for a short job (tens of microseconds) is paid for by the long products
// it shares, while waits that cost more than the helpers save, however short each one, add up
// to a loss. 0 judges each job alone. RECUR_LATE_US sets it.
Clock::duration late_credit() {
  static const Clock::duration credit = [] {
    if (const char* us = std::getenv("RECUR_LATE_US"))
      return Clock::duration(std::chrono::microseconds(std::atol(us)));
    return Clock::duration(std::chrono::microseconds(500));
  }();
  return credit;
}

// Whether lateness is judged per kind of job (its function, size and range count: the same
// product of every layer is one kind) or over all jobs at once. Per kind, a short job whose
// helper woke late sends only the jobs of its own kind to the caller alone, not the long
// products that helpers pay for. RECUR_LATE_BY=all judges all jobs together.
bool late_per_kind() {
  static const bool per_kind = [] {
    const char* by = std::getenv("RECUR_LATE_BY");
    return !(by && std::strcmp(by, "all") == 0);
  }();
  return per_kind;
}

// Whether the caller reads its helpers' time spent waiting for a CPU (RunDelayGate).
// RECUR_RUN_DELAY=off leaves it to the lateness balance alone.
bool run_delay_gate_on() {
  static const bool on = [] {
    const char* v = std::getenv("RECUR_RUN_DELAY");
    return !(v && std::strcmp(v, "off") == 0);
  }();
  return on;
}

// Spins until done() or the budget is spent; true if done.
template <class Done>
bool spin_until(const Done& done) {
  const Clock::duration budget = spin_budget();
  if (budget.count() <= 0) return done();
  const auto until = Clock::now() + budget;
  for (;;) {
    for (int i = 0; i < 64; ++i) {
      if (done()) return true;
      cpu_relax();
    }
    if (Clock::now() >= until) return done();
  }
}

std::atomic<RangeOrder> g_order{RangeOrder::kAscending};

// True on a helper thread, and on a caller while it runs ranges: a nested call runs inline.
thread_local bool t_in_ranges = false;

// The ranges in order on the calling thread: the same ranges as any split among threads.
void run_inline(int n, int ranges, RangeFn fn, const void* ctx) {
  const bool reversed = g_order.load(std::memory_order_relaxed) == RangeOrder::kReversed;
  for (int i = 0; i < ranges; ++i) {
    const int r = reversed ? ranges - 1 - i : i;
    fn(ctx, int(std::int64_t(n) * r / ranges), int(std::int64_t(n) * (r + 1) / ranges), r);
  }
}

// The helpers' own account of whether they have a core. Linux counts, for every thread, the time
// it spent runnable but waiting for a CPU (the second field of /proc/self/task/TID/schedstat).
// A helper that shares its core with a busy process waits about as long as it runs; one with a
// core of its own waits only the microseconds of a wake-up. So every few milliseconds of the
// caller's jobs, the caller reads each helper's count: when one waited for a CPU more than an
// eighth of the window, the helpers have no core to run on, and the jobs of the next stretch run
// on the caller alone (16 ms after the first such window, twice as long after each that follows,
// up to a second; each window that finds a core halves it). The first window after a stretch
// measures again. This catches what the lateness balance (below) misses: a helper that takes
// its ranges on time but runs them at half speed, and one that loses its core for long enough
// to lose a scheduler's turn in the middle of a range. Where the count cannot be read (not
// Linux, or a kernel without it) the gate is open and the balance alone decides.
class RunDelayGate {
 public:
  ~RunDelayGate() {
    for (const int fd : fds_)
      if (fd >= 0) close_fd(fd);
  }

  // Called by the caller before it starts helper `index` (so that the helper, which may start
  // late, allocates nothing after the caller's first job: test_alloc).
  void add_helper(int index) {
    std::lock_guard<std::mutex> lock(mutex_);
    fds_.resize(std::size_t(index) + 1, -1);
    last_.resize(std::size_t(index) + 1, -1);
  }

  // Called by helper `index` on its own thread when it starts.
  void register_helper(int index) {
    const int fd = open_own_schedstat();
    std::lock_guard<std::mutex> lock(mutex_);
    fds_[std::size_t(index)] = fd;
  }

  // True while the helpers are judged to have no core: the caller runs the job alone.
  bool closed() {
    if (!run_delay_gate_on()) return false;
    const auto now = Clock::now();
    if (now < open_at_) return true;
    if (!measuring_) {  // a stretch has ended (or none began): start a window
      measuring_ = read_delays(nullptr);
      window_start_ = now;
      return false;
    }
    if (now - window_start_ < kWindow) return false;
    std::int64_t waited = 0;
    if (!read_delays(&waited)) return measuring_ = false;
    const auto window = std::chrono::duration_cast<std::chrono::nanoseconds>(now - window_start_);
    window_start_ = now;
    if (waited * 8 <= window.count()) {
      stretch_ /= 2;
      return false;
    }
    stretch_ = std::clamp(2 * stretch_, kFirstStretch, kLongestStretch);
    open_at_ = now + stretch_;
    measuring_ = false;
    return true;
  }

 private:
  static constexpr Clock::duration kWindow = std::chrono::milliseconds(4);
  static constexpr Clock::duration kFirstStretch = std::chrono::milliseconds(16);
  static constexpr Clock::duration kLongestStretch = std::chrono::seconds(1);

  static int open_own_schedstat() {
#if defined(__linux__)
    const long tid = syscall(SYS_gettid);
    char path[64];
    std::snprintf(path, sizeof path, "/proc/self/task/%ld/schedstat", tid);
    return ::open(path, O_RDONLY | O_CLOEXEC);
#else
    return -1;
#endif
  }
  static void close_fd(int fd) {
#if defined(__linux__)
    ::close(fd);
#else
    (void)fd;
#endif
  }
  // The nanoseconds the thread of `fd` has waited for a CPU, or -1.
  static std::int64_t run_delay(int fd) {
#if defined(__linux__)
    char text[96];
    const ssize_t got = ::pread(fd, text, sizeof text - 1, 0);
    if (got <= 0) return -1;
    text[got] = 0;
    unsigned long long ran = 0, waited = 0;
    if (std::sscanf(text, "%llu %llu", &ran, &waited) != 2) return -1;
    return static_cast<std::int64_t>(waited);
#else
    (void)fd;
    return -1;
#endif
  }
  // Reads every helper's count; with `most`, the largest growth since the last read. False
  // when a count cannot be read.
  bool read_delays(std::int64_t* most) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (fds_.empty()) return false;
    for (std::size_t i = 0; i < fds_.size(); ++i) {
      if (fds_[i] < 0) return false;
      const std::int64_t now = run_delay(fds_[i]);
      if (now < 0) return false;
      if (most && last_[i] >= 0) *most = std::max(*most, now - last_[i]);
      last_[i] = now;
    }
    return true;
  }

  std::mutex mutex_;              // fds_ grows as helpers start
  std::vector<int> fds_;          // each helper's schedstat, opened by the helper
  std::vector<std::int64_t> last_;
  bool measuring_ = false;
  Clock::time_point window_start_{}, open_at_{};
  Clock::duration stretch_{0};
};

// One job at a time, published in a single word: generation (32 bits), number of ranges (16)
// and the next range to hand out (16). A range is taken by a compare-and-swap on the word, so a
// thread that read the word of a job already finished can never take a range of the next one.
// Once a thread holds a range, the job cannot finish before that range does, which keeps the
// job's other fields (written before the word) valid while the thread reads them.
class Pool {
 public:
  ~Pool() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_.store(true);
    }
    wake_.notify_all();
    for (auto& t : threads_) t.join();
  }

  void run(int n, int ranges, int helpers, RangeFn fn, const void* ctx) {
    // After a job whose helper came late (below), the next jobs of its kind run on this thread
    // alone.
    if (gate_.closed()) return run_inline(n, ranges, fn, ctx);
    Lateness& late = lateness_of(fn, n, ranges);
    if (late.inline_jobs > 0) {
      --late.inline_jobs;
      return run_inline(n, ranges, fn, ctx);
    }
    while (static_cast<int>(threads_.size()) < helpers) {
      const int index = static_cast<int>(threads_.size());
      gate_.add_helper(index);
      threads_.emplace_back([this, index] { helper(index); });
    }
    fn_.store(fn, std::memory_order_relaxed);
    ctx_.store(ctx, std::memory_order_relaxed);
    n_.store(n, std::memory_order_relaxed);
    helpers_.store(helpers, std::memory_order_relaxed);
    done_.store(0, std::memory_order_relaxed);
    ++generation_;
    const std::uint64_t word = (std::uint64_t(generation_) << 32) | (std::uint64_t(ranges) << 16);
    word_.store(word, std::memory_order_seq_cst);
    if (sleepers_.load(std::memory_order_seq_cst) > 0) {
      { std::lock_guard<std::mutex> lock(mutex_); }
      wake_.notify_all();
    }
    const auto start = Clock::now();
    t_in_ranges = true;
    const int own = take(word);
    t_in_ranges = false;
    // Only ranges a helper has taken are left: wait for them, spinning first.
    const auto own_done = Clock::now();
    const auto finished = [&] { return done_.load(std::memory_order_seq_cst) == ranges; };
    if (!spin_until(finished)) {
      std::unique_lock<std::mutex> lock(mutex_);
      caller_sleeps_.store(true, std::memory_order_seq_cst);
      finished_.wait(lock, finished);
      caller_sleeps_.store(false, std::memory_order_relaxed);
    }
    late.note_wait(own_done - start, Clock::now() - own_done, own, ranges);
  }

 private:
  static std::uint32_t generation_of(std::uint64_t w) { return std::uint32_t(w >> 32); }

  // A helper that loses its core to another process while it holds a range makes the caller
  // wait for that range. The caller ran `own` of the job's ranges in `worked`; alone it would
  // have run the others too, in about worked (ranges - own) / own (the ranges are of about equal
  // work). Waiting less than that, the helpers saved the difference; more, they cost it. The
  // balance of savings and costs since the last late job, its savings held to late_credit(),
  // going below zero makes the helpers late: the next jobs run on the caller alone, 8 of them
  // after the first late job and twice as many after each late one that follows (up to 4096,
  // a few hundred tokens of a small model); each job that saves time halves the next stretch,
  // so that a helper that is late now and then keeps it long. So a helper that woke a little
  // late for a short job is not late when the long jobs of its kind paid for it, and short
  // waits that each cost a little still add up to a loss.
  // Which thread runs a range never changes a byte, so this is only a question of speed.
  struct Lateness {
    RangeFn fn = nullptr;  // the kind of job (late_per_kind)
    int n = 0, ranges = 0;
    int backoff = 0;      // jobs to run alone after the last late one
    Clock::duration balance{0};  // time the helpers saved since the last late job
    int inline_jobs = 0;  // jobs still to run alone

    void note_wait(Clock::duration worked, Clock::duration waited, int own, int n_ranges) {
      if (own <= 0) return;  // the helpers ran it all: nothing to compare with
      const Clock::duration saved = worked * (n_ranges - own) / own - waited;
      balance = std::min(balance + saved, late_credit());
      if (balance >= Clock::duration(0)) {
        if (saved >= Clock::duration(0)) backoff /= 2;
        return;
      }
      balance = Clock::duration(0);
      backoff = backoff == 0 ? 8 : std::min(2 * backoff, 4096);
      inline_jobs = backoff;
    }
  };

  // The caller's record of the job's kind: one of a small table, a kind that takes the slot of
  // another starting afresh.
  Lateness& lateness_of(RangeFn fn, int n, int ranges) {
    if (!late_per_kind()) return kinds_[0];
    const std::uintptr_t key = reinterpret_cast<std::uintptr_t>(fn) ^
                               (std::uintptr_t(std::uint32_t(n)) * 0x9E3779B1u) ^
                               (std::uintptr_t(ranges) << 7);
    Lateness& k = kinds_[(key ^ (key >> 6) ^ (key >> 17)) % kinds_.size()];
    if (k.fn != fn || k.n != n || k.ranges != ranges) {
      k = Lateness{};
      k.fn = fn;
      k.n = n;
      k.ranges = ranges;
    }
    return k;
  }

  // Takes and runs ranges of the job whose word was `w` until none is left; returns how many
  // it ran.
  int take(std::uint64_t w) {
    const std::uint32_t gen = generation_of(w);
    int taken = 0;
    for (;;) {
      const int ranges = int((w >> 16) & 0xffff), next = int(w & 0xffff);
      if (next >= ranges) return taken;
      if (!word_.compare_exchange_weak(w, w + 1, std::memory_order_acq_rel,
                                       std::memory_order_acquire)) {
        if (generation_of(w) != gen) return taken;
        continue;
      }
      ++taken;
      const int r = g_order.load(std::memory_order_relaxed) == RangeOrder::kReversed ? ranges - 1 - next : next;
      const int n = n_.load(std::memory_order_relaxed);
      fn_.load(std::memory_order_relaxed)(ctx_.load(std::memory_order_relaxed),
                                          int(std::int64_t(n) * r / ranges),
                                          int(std::int64_t(n) * (r + 1) / ranges), r);
      if (done_.fetch_add(1, std::memory_order_seq_cst) + 1 == ranges &&
          caller_sleeps_.load(std::memory_order_seq_cst)) {
        { std::lock_guard<std::mutex> lock(mutex_); }
        finished_.notify_one();
      }
      w = word_.load(std::memory_order_acquire);
      if (generation_of(w) != gen) return taken;
    }
  }

  void helper(int index) {
    t_in_ranges = true;
    gate_.register_helper(index);
    std::uint32_t seen = generation_of(word_.load(std::memory_order_acquire));
    for (;;) {
      std::uint64_t w = 0;
      const auto fresh = [&] {
        w = word_.load(std::memory_order_seq_cst);
        return generation_of(w) != seen || stop_.load(std::memory_order_relaxed);
      };
      if (!spin_until(fresh)) {
        std::unique_lock<std::mutex> lock(mutex_);
        sleepers_.fetch_add(1, std::memory_order_seq_cst);
        wake_.wait(lock, fresh);
        sleepers_.fetch_sub(1, std::memory_order_relaxed);
      }
      if (stop_.load(std::memory_order_relaxed)) return;
      seen = generation_of(w);
      if (index < helpers_.load(std::memory_order_relaxed)) take(w);
    }
  }

  std::atomic<std::uint64_t> word_{0};
  std::atomic<RangeFn> fn_{nullptr};
  std::atomic<const void*> ctx_{nullptr};
  std::atomic<int> n_{0};
  std::atomic<int> helpers_{0};
  std::atomic<int> done_{0};
  std::uint32_t generation_ = 0;  // the caller's own count
  std::array<Lateness, 64> kinds_{};  // the caller's: per kind of job, or [0] for all
  RunDelayGate gate_;                 // the caller's, fed by the helpers' schedstat

  std::mutex mutex_;
  std::condition_variable wake_;      // helpers wait here for a job
  std::condition_variable finished_;  // the caller waits here for the helpers' last ranges
  std::atomic<int> sleepers_{0};
  std::atomic<bool> caller_sleeps_{false};
  std::atomic<bool> stop_{false};
  std::vector<std::thread> threads_;
};

// Each calling thread has its own helpers, as each thread had its own OpenMP team: decoders
// on several threads never wait for one another.
Pool& pool() {
  thread_local std::unique_ptr<Pool> p(new Pool);
  return *p;
}

// Threads that can run at once: the cores this process may use, and OMP_THREAD_LIMIT. More
// threads than cores would only take turns.
int thread_limit() {
#ifdef _OPENMP
  static const int limit = std::max(1, std::min(omp_get_thread_limit(), omp_get_num_procs()));
  return limit;
#else
  return 1;
#endif
}

bool inside_openmp() {
#ifdef _OPENMP
  return omp_in_parallel() != 0;
#else
  return false;
#endif
}

}  // namespace

RangeOrder set_range_order(RangeOrder order) { return g_order.exchange(order); }

void run_ranges(int n, int ranges, int threads, RangeFn fn, const void* ctx) {
  const int helpers = std::min({threads, ranges, thread_limit()}) - 1;
  // A job's word holds 16 bits of range count; more ranges than that (never asked for in
  // practice) run inline.
  if (helpers <= 0 || ranges > 0xffff || t_in_ranges || inside_openmp())
    return run_inline(n, ranges, fn, ctx);
  pool().run(n, ranges, helpers, fn, ctx);
}

}  // namespace recur::detail
