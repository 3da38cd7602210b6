// recur bench: constant-memory generation against a softmax KV cache, measured in one run.
//
// A stack of layers (attention only, random inputs) streams tokens once with linear-attention
// states and once with KV caches. At log-spaced contexts it times a window of single-token
// steps through every layer and records the median, the process's resident memory and the
// bytes the states or caches hold. The linear run steps every token. The KV run fills its caches
// between windows by appending keys and values (what a prefill stores) instead of stepping,
// since stepping every token to 64K would take hours at O(context) per token; the windows
// themselves are real steps.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <sys/stat.h>
#include <vector>

#include "cli.h"
#include "commands.h"
#include "plot.h"
#include "recur/error.h"
#include "recur/linear_attention.h"
#include "recur/softmax_attention.h"
#include "util/file.h"

namespace recur::cli {
namespace {

struct Row {
  std::string impl;
  std::int64_t context;
  double ns_per_token;
  std::int64_t rss_bytes;
  std::int64_t state_bytes;
};

constexpr Eigen::Index kPool = 1024;  // distinct random tokens, cycled

struct Pool {
  RowMatrix Q, K, V;
  Pool(Eigen::Index width, std::uint64_t seed) : Q(kPool, width), K(kPool, width), V(kPool, width) {
    std::uint64_t s = seed * 0x9E3779B97F4A7C15ull + 7;
    for (RowMatrix* m : {&Q, &K, &V})
      for (Eigen::Index i = 0; i < m->size(); ++i) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        m->data()[i] = float(s >> 40) * (2.0f / 16777216.0f) - 1.0f;
      }
  }
  // Token t's row for layer l: layers see different inputs.
  Eigen::Index row(std::int64_t t, int l) const { return (t + 97 * l) % kPool; }
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

std::vector<std::int64_t> log_points(std::int64_t n, std::int64_t window) {
  std::vector<std::int64_t> points;
  for (std::int64_t c = 64; c + window <= n; c *= 2) points.push_back(c);
  if (n - window > 0 && (points.empty() || points.back() < n - window)) points.push_back(n - window);
  return points;
}

// The stack's shape and the run's length.
struct Stack {
  int layers, heads, d_head;
  std::int64_t tokens, window;
};

// The linear stack: every token through step(), a row at the end of each timed window.
void run_linear(const Stack& st, const Pool& pool, const std::vector<std::int64_t>& points,
                std::vector<Row>& rows) {
  const int L = st.layers, H = st.heads, d = st.d_head;
  const std::int64_t n = st.tokens, window = st.window;
  Eigen::VectorXf o(Eigen::Index(H) * d);
  LinearAttentionConfig c;
  c.n_heads = H;
  c.d_key = c.d_value = d;
  const LinearAttention layer(c);
  std::vector<LinearState> states;
  for (int l = 0; l < L; ++l) states.push_back(layer.make_state());
  std::int64_t state_bytes = 0;
  for (const auto& s : states) state_bytes += static_cast<std::int64_t>(s.bytes());
  fmt::print(stderr, "linear: {} layers x {} heads x d {}, {} tokens, state {}\n", L, H, d, n,
             human_bytes(double(state_bytes)));
  Progress progress("linear", n);
  std::size_t next = 0;
  std::vector<double> times;
  for (std::int64_t t = 0; t < n; ++t) {
    const bool timed = next < points.size() && t >= points[next] && t < points[next] + window;
    const double t0 = timed ? now_seconds() : 0.0;
    for (int l = 0; l < L; ++l) {
      const auto r = pool.row(t, l);
      layer.step(states[std::size_t(l)], pool.Q.row(r).transpose(), pool.K.row(r).transpose(),
                 pool.V.row(r).transpose(), o);
    }
    if (timed) {
      times.push_back(1e9 * (now_seconds() - t0));
      if (t + 1 == points[next] + window) {
        rows.push_back({"linear", points[next], median(times), resident_bytes(), state_bytes});
        times.clear();
        ++next;
      }
    }
    if ((t & 1023) == 0) progress.update(t);
  }
  progress.finish();
}

// The softmax stack: its KV caches appended up to each point, then a timed window of steps;
// it stops before the caches would pass `cap` bytes.
void run_kv(const Stack& st, std::int64_t cap, const Pool& pool,
            const std::vector<std::int64_t>& points, std::vector<Row>& rows) {
  const int L = st.layers, H = st.heads, d = st.d_head;
  const std::int64_t window = st.window;
  Eigen::VectorXf o(Eigen::Index(H) * d);
  SoftmaxAttentionConfig c;
  c.n_heads = H;
  c.d_head = d;
  const SoftmaxAttention layer(c);
  std::vector<KVCache> caches;
  for (int l = 0; l < L; ++l) caches.push_back(layer.make_cache());
  const double per_token = 2.0 * L * H * d * double(sizeof(float));
  fmt::print(stderr, "kv: {} bytes per token, cap {}\n", per_token, human_bytes(double(cap)));
  Progress progress("kv", points.empty() ? 0 : points.back() + window);
  std::int64_t filled = 0;
  for (const std::int64_t point : points) {
    if (double(point + window) * per_token > double(cap)) {
      fmt::print(stderr, "kv: stopping before context {}: the caches would pass --kv-cap\n", point);
      break;
    }
    while (filled < point) {  // append in pool-sized pieces
      const Eigen::Index a = filled % kPool;
      const Eigen::Index m = std::min<Eigen::Index>(kPool - a, point - filled);
      for (int l = 0; l < L; ++l)
        layer.append(caches[std::size_t(l)], pool.K.middleRows(a, m), pool.V.middleRows(a, m));
      filled += m;
      progress.update(filled);
    }
    std::vector<double> times;
    for (std::int64_t t = filled; t < filled + window; ++t) {
      const double t0 = now_seconds();
      for (int l = 0; l < L; ++l) {
        const auto r = pool.row(t, l);
        layer.step(caches[std::size_t(l)], pool.Q.row(r).transpose(), pool.K.row(r).transpose(),
                   pool.V.row(r).transpose(), o);
      }
      times.push_back(1e9 * (now_seconds() - t0));
    }
    filled += window;
    std::int64_t bytes = 0;
    for (const auto& cache : caches) bytes += static_cast<std::int64_t>(cache.bytes());
    rows.push_back({"kv", point, median(times), resident_bytes(), bytes});
    progress.update(filled);
  }
  progress.finish();
}

void write_csv(const std::string& out, const std::vector<Row>& rows) {
  std::string csv = "impl,context,ns_per_token,rss_bytes,state_bytes\n";
  for (const auto& r : rows)
    csv += fmt::format("{},{},{:.1f},{},{}\n", r.impl, r.context, r.ns_per_token, r.rss_bytes,
                       r.state_bytes);
  detail::write_file_atomically(out + ".csv", csv, "recur bench");
}

// Latency and memory against the context, a line per stack (and resident memory dashed).
void write_plot(const std::string& out, const Stack& st, const std::vector<Row>& rows) {
  std::vector<Series> latency, memory;
  for (const char* impl : {"linear", "kv"}) {
    Series lat{impl == std::string("linear") ? "linear attention" : "softmax + KV cache",
               impl == std::string("linear") ? "#1f77b4" : "#d62728", false, {}};
    Series held = lat, rss = lat;
    held.name += ", state/cache bytes";
    rss.name += ", resident memory";
    rss.dashed = true;
    for (const auto& r : rows) {
      if (r.impl != impl) continue;
      lat.points.push_back({double(r.context), r.ns_per_token / 1e3});
      held.points.push_back({double(r.context), double(r.state_bytes) / (1 << 20)});
      rss.points.push_back({double(r.context), double(r.rss_bytes) / (1 << 20)});
    }
    if (lat.points.empty()) continue;
    latency.push_back(lat);
    memory.push_back(held);
    memory.push_back(rss);
  }
  write_svg(out + ".svg",
            fmt::format("{} layers x {} heads x d_head {}, one token at a time", st.layers,
                        st.heads, st.d_head),
            {Panel{"latency per token (us)", latency}, Panel{"memory (MiB)", memory}});

}

// The table of both stacks by context, and what it says: where linear is faster, by how much
// at 64K and at the longest context, and how the memory grew.
void print_summary(const Stack& st, const std::vector<Row>& rows) {
  const int L = st.layers, H = st.heads, d = st.d_head;
  const std::int64_t window = st.window;
  std::map<std::int64_t, const Row*> lin, kv;
  for (const auto& r : rows) (r.impl == "linear" ? lin : kv)[r.context] = &r;
  fmt::print("\n{:>10} {:>14} {:>14} {:>8} {:>12} {:>12}\n", "context", "linear us/tok",
             "kv us/tok", "speedup", "linear MiB", "kv MiB");
  for (const auto& [ctx, l] : lin) {
    const Row* k = kv.count(ctx) ? kv[ctx] : nullptr;
    fmt::print("{:>10} {:>14.2f} {:>14} {:>8} {:>12.2f} {:>12}\n", ctx, l->ns_per_token / 1e3,
               k ? fmt::format("{:.2f}", k->ns_per_token / 1e3) : "-",
               k ? fmt::format("{:.1f}x", k->ns_per_token / l->ns_per_token) : "-",
               double(l->state_bytes) / (1 << 20),
               k ? fmt::format("{:.2f}", double(k->state_bytes) / (1 << 20)) : "-");
  }
  fmt::print("\n");
  if (!kv.empty()) {
    std::int64_t crossover = -1;
    for (auto it = kv.rbegin(); it != kv.rend(); ++it) {
      if (!lin.count(it->first) || lin[it->first]->ns_per_token >= it->second->ns_per_token) break;
      crossover = it->first;
    }
    if (crossover > 0)
      fmt::print("linear is faster per token from context {} on (the smallest measured)\n", crossover);
    else
      fmt::print("linear is not faster per token at the longest context measured\n");
    const auto compare = [&](std::int64_t ctx, const char* what) {
      if (!kv.count(ctx) || !lin.count(ctx)) return;
      // Ratios read as "n times faster / less" only when they are above one.
      const double speed = kv[ctx]->ns_per_token / lin[ctx]->ns_per_token;
      const double held = double(kv[ctx]->state_bytes) / double(lin[ctx]->state_bytes);
      fmt::print("at {} ({}): linear is {:.1f}x {} per token and holds {:.1f}x {} memory "
                 "({} vs {})\n",
                 ctx, what, speed >= 1 ? speed : 1 / speed, speed >= 1 ? "faster" : "slower",
                 held >= 1 ? held : 1 / held, held >= 1 ? "less" : "more",
                 human_bytes(double(lin[ctx]->state_bytes)),
                 human_bytes(double(kv[ctx]->state_bytes)));
    };
    compare(65536, "64K");
    std::int64_t longest = -1;
    for (const auto& [ctx, r] : kv)
      if (lin.count(ctx)) longest = ctx;
    if (longest != 65536) compare(longest, "the longest context both reached");
    const auto& last = *kv.rbegin()->second;
    fmt::print("kv caches hold {:.3f}x of 2 * layers * heads * d_head * 4 bytes per token at "
               "context {}\n",
               double(last.state_bytes) / (2.0 * L * H * d * 4 * double(last.context + window)),
               last.context + window);
  }
  if (!lin.empty()) {
    const Row* first = lin.lower_bound(1024) != lin.end() ? lin.lower_bound(1024)->second
                                                          : lin.begin()->second;
    const Row& last = *lin.rbegin()->second;
    fmt::print("linear: resident memory grew by {} from context {} to {}; latency at {} is "
               "{:.3f}x that at {}\n",
               human_bytes(double(last.rss_bytes - first->rss_bytes)), first->context,
               last.context, last.context, last.ns_per_token / first->ns_per_token,
               first->context);
  }
}

}  // namespace

int run_bench(int argc, char** argv) {
  Args args("bench",
            "Streams tokens through a stack of linear-attention layers and through a stack of\n"
            "softmax layers with KV caches, and measures, at log-spaced contexts, the median\n"
            "latency per token, the resident memory and the bytes held. Writes a CSV (impl,\n"
            "context, ns_per_token, rss_bytes, state_bytes) and an SVG plot, and prints a summary.\n"
            "The KV caches are filled between timed windows by appending keys and values.");
  args.option("tokens", "1M", "tokens to stream (K, M, G: powers of 1024)", 'n')
      .option("layers", "12", "layers in the stack")
      .option("heads", "8", "heads per layer")
      .option("d-head", "64", "size of a head (keys, values; d_feature for the linear run)")
      .option("kv-cap", "4G", "stop the KV run when its caches would exceed this many bytes")
      .option("window", "32", "steps timed at each context (the median is reported)")
      .option("out", "recur-bench", "output prefix: writes PREFIX.csv and PREFIX.svg")
      .flag("skip-kv", "run only the linear stack");
  if (!args.parse(argc, argv, 2)) return 0;
  const std::int64_t n = args.integer("tokens", 128, 1LL << 32);
  const int L = static_cast<int>(args.integer("layers", 1, 1024));
  const int H = static_cast<int>(args.integer("heads", 1, 1024));
  const int d = static_cast<int>(args.integer("d-head", 1, 1024));
  const std::int64_t cap = args.integer("kv-cap", 1 << 20, 1LL << 40);
  const std::int64_t window = args.integer("window", 1, 4096);
  const std::string out = args.str("out");
  if (window >= n) throw ArgumentError(fmt::format("--window {} must be below --tokens {}", window, n));
  // Refuse up front what this machine cannot hold, and outputs that cannot be written.
  const double linear_bytes = 16.0 * L * H * double(d + 16) * double(d + 16);
  check_memory(linear_bytes, fmt::format("{} layers of {} heads x d_head {}", L, H, d));
  if (!args.flag_set("skip-kv")) check_memory(double(cap), fmt::format("--kv-cap {}", human_bytes(double(cap))));
  check_output(out + ".csv", "--out");
  check_output(out + ".svg", "--out");
  const auto points = log_points(n, window);
  const Stack st{L, H, d, n, window};
  const Pool pool(Eigen::Index(H) * d, 1);
  std::vector<Row> rows;
  run_linear(st, pool, points, rows);
  if (!args.flag_set("skip-kv")) run_kv(st, cap, pool, points, rows);
  write_csv(out, rows);
  write_plot(out, st, rows);
  print_summary(st, rows);
  fmt::print("wrote {}.csv and {}.svg\n", printable(out), printable(out));
  flush_stdout();
  return 0;
}

}  // namespace recur::cli
