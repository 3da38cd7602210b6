// Load test of recur serve, loopback only, bounded in count and time. Starts the server on a
// model, then measures:
//  * prefill: the model's prefill tokens/s through the server (one long prompt), the reference
//    that batched decode is read against;
//  * streams: N concurrent clients each streaming one completion, at N = 1, 4, 16, 64:
//    aggregate generated tokens/s, time to first token and time per output token (p50, p99),
//    and the server's resident memory;
//  * follow-ups: a conversation with 1K, 8K and 32K tokens of history continued by 16 new
//    tokens and 16 generated, against the softmax KV cache of the same layers, heads and widths
//    at the same history (its bytes per conversation, and its attention's time for the same
//    follow-up: the part of a softmax model's cost that grows with the history);
//  * invariance: 64 requests at once (greedy and seeded sampling, with logprobs) against the
//    same 64 served one at a time: the tokens and logprobs must be the same bytes;
//  * chaos: rounds of streams where 10% of the clients disconnect mid-stream and 10% send
//    malformed requests; every well-formed request must be answered, the server must live, and
//    its resident memory must stay flat from round to round.
// With --replicas N it starts deploy/start.sh instead of one server: N replicas (--threads
// each) behind nginx sharing Redis, and loads nginx; memory is the replicas' summed.
// Exits 1 if any check fails.
//
//   serve_load RECUR [--model bench|builtin|DIR] [--threads N] [--tokens N]
//              [--concurrency 1,4,16,64] [--history 1K,8K,32K] [--invariance N]
//              [--chaos-rounds N] [--chaos-requests N]
#include <fmt/format.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "recur/softmax_attention.h"
#include "util/json.h"

// Last: it brings <resolv.h>, whose _res macro breaks Eigen's headers when they come after it.
#include <httplib.h>

extern char** environ;

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

bool g_failed = false;
void expect(bool ok, const std::string& what) {
  if (!ok) {
    g_failed = true;
    fmt::print("CHECK FAILED: {}\n", what);
  }
}

struct Options {
  std::string recur, model = "bench";
  int replicas = 0;
  int threads = 2, tokens = 128, chaos_rounds = 3, chaos_requests = 60, invariance = 64;
  std::vector<int> concurrency = {1, 4, 16, 64};
  std::vector<int> history = {1024, 8192, 32768};
};

std::vector<int> parse_list(const std::string& s) {
  std::vector<int> out;
  if (s.empty() || s == "none") return out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) {
    int mult = 1;
    if (!item.empty() && (item.back() == 'K' || item.back() == 'k')) {
      mult = 1024;
      item.pop_back();
    }
    out.push_back(std::stoi(item) * mult);
  }
  return out;
}

// The server as a child process.
struct Server {
  pid_t pid = -1;
  std::string host = "127.0.0.1";
  int port = 0;
  std::string log;

  void start(const std::vector<std::string>& args) {
    int out[2];
    if (pipe(out) != 0) throw std::runtime_error("pipe");
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, out[1], 2);
    posix_spawn_file_actions_addclose(&fa, out[0]);
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    if (posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), environ) != 0)
      throw std::runtime_error("cannot start " + args[0]);
    close(out[1]);
    // Read stderr until the server says where it listens; keep draining it after.
    FILE* f = fdopen(out[0], "r");
    char line[4096];
    while (std::fgets(line, sizeof line, f)) {
      log += line;
      const std::string l = line;
      const auto at = l.find("listening on http://");
      if (at != std::string::npos) {
        const auto colon = l.find(':', at + 20);
        port = std::stoi(l.substr(colon + 1));
        break;
      }
    }
    if (port == 0) throw std::runtime_error("the server did not start:\n" + log);
    std::thread([f] {
      char buf[4096];
      while (std::fgets(buf, sizeof buf, f)) {
      }
      std::fclose(f);
    }).detach();
  }
  // deploy/start.sh's replicas behind nginx, instead of one child.
  std::string deploy_dir;
  std::vector<pid_t> replicas;

  void start_replicas(const std::string& recur, int n, int threads, const std::vector<std::string>& serve_args) {
    deploy_dir = (std::filesystem::temp_directory_path() / fmt::format("recur-serve-load-{}", getpid())).string();
    port = 20000 + int(getpid() % 10000) * 4;
    std::string cmd = fmt::format("bash {}/deploy/start.sh {} --replicas {} --port {} --redis-port {} --threads {} --recur {} --",
                                  RECUR_SOURCE_DIR, deploy_dir, n, port, port + 3 + n, threads, recur);
    for (const auto& a : serve_args) cmd += " " + a;
    cmd += " --max-batch 64 --memory 4G > /dev/null";
    if (std::system(cmd.c_str()) != 0) throw std::runtime_error("deploy/start.sh failed: " + cmd);
    for (int i = 1; i <= n; ++i) {
      std::ifstream in(fmt::format("{}/replica-{}.pid", deploy_dir, i));
      pid_t p = -1;
      in >> p;
      replicas.push_back(p);
    }
  }
  bool alive() const {
    if (!replicas.empty())
      return std::all_of(replicas.begin(), replicas.end(), [](pid_t p) { return kill(p, 0) == 0; });
    return pid > 0 && waitpid(pid, nullptr, WNOHANG) == 0;
  }
  double rss_mib() const {
    if (!replicas.empty()) {
      double sum = 0;
      for (const pid_t p : replicas) sum += rss_of(p);
      return sum;
    }
    return rss_of(pid);
  }
  static double rss_of(pid_t p) {
    std::ifstream in(fmt::format("/proc/{}/status", p));
    std::string key;
    while (in >> key) {
      if (key == "VmRSS:") {
        double kib = 0;
        in >> kib;
        return kib / 1024;
      }
      std::getline(in, key);
    }
    return 0;
  }
  int stop() {
    if (!deploy_dir.empty()) {
      const int code = std::system(fmt::format("bash {}/deploy/stop.sh {}", RECUR_SOURCE_DIR, deploy_dir).c_str());
      std::filesystem::remove_all(deploy_dir);
      return code == 0 ? 0 : 1;
    }
    kill(pid, SIGTERM);
    int status = 0;
    waitpid(pid, &status, 0);
    pid = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
};

std::string ids_json(const std::vector<int>& ids) {
  std::string s = "[";
  for (std::size_t i = 0; i < ids.size(); ++i) s += (i ? "," : "") + std::to_string(ids[i]);
  return s + "]";
}

std::vector<int> some_ids(int n, int vocab, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> pick(0, std::min(vocab, 4096) - 1);
  std::vector<int> ids(static_cast<std::size_t>(n));
  for (auto& x : ids) x = pick(rng);
  return ids;
}

// One streamed completion: when each chunk's tokens arrived.
struct StreamResult {
  int status = 0;
  bool done = false;  // saw data: [DONE]
  std::string finish_reason, id;
  double first = -1, last = -1;  // seconds from the request
  int tokens = 0;
};

StreamResult stream(const Server& s, const std::string& body, int stop_after_chunks = -1) {
  httplib::Client cli(s.host, s.port);
  cli.set_read_timeout(600, 0);
  cli.set_write_timeout(60, 0);
  StreamResult r;
  std::string buffer, error;
  int chunks = 0;
  const auto t0 = Clock::now();
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.body = body;
  req.set_header("Content-Type", "application/json");
  req.content_receiver = [&](const char* data, std::size_t n, std::uint64_t, std::uint64_t) {
    buffer.append(data, n);
    std::size_t end;
    while ((end = buffer.find("\n\n")) != std::string::npos) {
      const std::string event = buffer.substr(0, end);
      buffer.erase(0, end + 2);
      if (event.rfind("data: ", 0) != 0) continue;
      const std::string payload = event.substr(6);
      if (payload == "[DONE]") {
        r.done = true;
        continue;
      }
      const auto v = recur::json::parse(payload, "chunk");
      if (const auto* id = v.find("id")) r.id = id->string();
      const auto* choices = v.find("choices");
      if (!choices || choices->array().empty()) continue;
      const auto& c = choices->array()[0];
      if (const auto* ids = c.find("token_ids"); ids && !ids->array().empty()) {
        const double t = seconds_since(t0);
        if (r.first < 0) r.first = t;
        r.last = t;
        r.tokens += int(ids->array().size());
      }
      if (const auto* f = c.find("finish_reason"); f && f->is_string()) r.finish_reason = f->string();
      ++chunks;
      if (stop_after_chunks >= 0 && chunks >= stop_after_chunks) return false;  // hang up
    }
    return true;
  };
  httplib::Response res;
  httplib::Error err;
  if (!cli.send(req, res, err) && stop_after_chunks < 0)
    fmt::print("stream failed: {}\n", httplib::to_string(err));
  r.status = res.status;
  return r;
}

struct Plain {
  int status = 0;
  std::string body;
  double seconds = 0;
};

Plain post(const Server& s, const std::string& body, const std::string& content_type = "application/json") {
  httplib::Client cli(s.host, s.port);
  cli.set_read_timeout(3600, 0);
  const auto t0 = Clock::now();
  auto res = cli.Post("/v1/completions", body, content_type);
  Plain p;
  p.seconds = seconds_since(t0);
  if (res) {
    p.status = res->status;
    p.body = res->body;
  }
  return p;
}

// A gauge or counter from /metrics.
double metric(const Server& s, const std::string& name) {
  httplib::Client cli(s.host, s.port);
  auto m = cli.Get("/metrics");
  if (!m) throw std::runtime_error("GET /metrics failed");
  const auto at = m->body.find("\n" + name + " ");
  if (at == std::string::npos) throw std::runtime_error("no metric " + name);
  return std::stod(m->body.substr(at + name.size() + 2));
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const auto i = static_cast<std::size_t>(p * double(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

struct ModelShape {
  int vocab = 0, layers = 0, heads = 0, d_head = 0;
};

ModelShape read_shape(const std::string& dir) {
  std::ifstream in(dir + "/config.json");
  std::stringstream ss;
  ss << in.rdbuf();
  const auto v = recur::json::parse(ss.str(), "config.json");
  ModelShape m;
  m.vocab = int(v.find("vocab_size")->integer());
  m.layers = int(v.find("num_hidden_layers")->integer());
  m.heads = int(v.find("num_heads")->integer());
  m.d_head = int(v.find("hidden_size")->integer()) / m.heads;
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::runtime_error(a + " needs a value");
      return argv[++i];
    };
    if (a == "--model") o.model = value();
    else if (a == "--threads") o.threads = std::stoi(value());
    else if (a == "--tokens") o.tokens = std::stoi(value());
    else if (a == "--concurrency") o.concurrency = parse_list(value());
    else if (a == "--history") o.history = parse_list(value());
    else if (a == "--chaos-rounds") o.chaos_rounds = std::stoi(value());
    else if (a == "--chaos-requests") o.chaos_requests = std::stoi(value());
    else if (a == "--invariance") o.invariance = std::stoi(value());
    else if (a == "--replicas") o.replicas = std::stoi(value());
    else if (a == "-h" || a == "--help") {
      std::puts("serve_load RECUR [--model bench|builtin|DIR] [--threads N] [--tokens N]\n"
                "           [--concurrency 1,4,16,64] [--history 1K,8K,32K] [--invariance N]\n"
                "           [--chaos-rounds N] [--chaos-requests N] [--replicas N]\n"
                "Starts `RECUR serve` on loopback and measures streams, follow-ups and chaos (see the\n"
                "top of bench/serve_load.cpp). bench: the model of bench_model (12 layers, hidden 512,\n"
                "8 heads, vocab 32000, random weights); builtin: models/kjv.");
      return 0;
    } else if (o.recur.empty()) o.recur = a;
    else throw std::runtime_error("unknown argument " + a);
  }
  if (o.recur.empty()) throw std::runtime_error("name the recur binary (build/release/tools/recur)");

  std::string dir = o.model;
  std::vector<std::string> model_args;
  if (o.model == "bench") {
    dir = (std::filesystem::temp_directory_path() / "recur-serve-load-bench").string();
    if (!std::filesystem::exists(dir + "/config.json")) {
      const std::string cmd = fmt::format(
          "{} make-model {} --force --vocab 32000 --hidden 512 --layers 12 --heads 8 "
          "--feature-map elementwise_product > /dev/null", o.recur, dir);
      if (std::system(cmd.c_str()) != 0) throw std::runtime_error("make-model failed");
    }
    model_args = {"-m", dir, "--name", "bench"};
  } else if (o.model == "builtin") {
    dir = RECUR_SOURCE_DIR "/models/kjv";
  } else {
    model_args = {"-m", dir};
  }
  const ModelShape shape = read_shape(dir);
  const int max_c = *std::max_element(o.concurrency.begin(), o.concurrency.end());

  Server server;
  if (o.replicas > 0) {
    server.start_replicas(o.recur, o.replicas, o.threads, model_args);
    fmt::print("{} replicas of recur serve behind nginx, sharing Redis, on {} ({} layers, {} heads of {}, "
               "vocab {}), {} threads each, port {}\n", o.replicas, o.model, shape.layers, shape.heads,
               shape.d_head, shape.vocab, o.threads, server.port);
  } else {
    std::vector<std::string> args = {o.recur, "serve", "--port", "0", "--threads", std::to_string(o.threads),
                                     "--max-batch", std::to_string(std::max(max_c, 16)), "--memory", "4G"};
    args.insert(args.end(), model_args.begin(), model_args.end());
    server.start(args);
    fmt::print("recur serve on {} ({} layers, {} heads of {}, vocab {}), {} threads, port {}\n",
               o.model, shape.layers, shape.heads, shape.d_head, shape.vocab, o.threads, server.port);
  }
  const double rss0 = server.rss_mib();

  // Prefill through the server: one long prompt, one token out.
  const int prefill_n = o.model == "bench" ? 2048 : 8192;
  double prefill_tps = 0;
  for (int rep = 0; rep < 2; ++rep) {
    const auto p = post(server, fmt::format(R"({{"prompt":{},"max_tokens":1,"temperature":0}})",
                                            ids_json(some_ids(prefill_n, shape.vocab, 7u + unsigned(rep)))));
    expect(p.status == 200, "the prefill request succeeds");
    prefill_tps = std::max(prefill_tps, prefill_n / p.seconds);
  }
  fmt::print("\nprefill: {} tokens in one request: {:.0f} tokens/s\n", prefill_n, prefill_tps);

  // Streams at each concurrency.
  fmt::print("\n| streams | tokens/s | x one stream | / prefill | TTFT p50 | TTFT p99 | TPOT p50 | TPOT p99 | RSS |\n"
             "|---|---|---|---|---|---|---|---|---|\n");
  double single = 0;
  for (const int c : o.concurrency) {
    std::vector<StreamResult> results(static_cast<std::size_t>(c));
    std::vector<std::thread> clients;
    const auto t0 = Clock::now();
    for (int i = 0; i < c; ++i)
      clients.emplace_back([&, i] {
        results[std::size_t(i)] = stream(server, fmt::format(
            R"({{"prompt":{},"max_tokens":{},"temperature":0,"ignore_eos":true,"stream":true,"return_token_ids":true}})",
            ids_json(some_ids(16, shape.vocab, 100u + unsigned(i))), o.tokens));
      });
    for (auto& t : clients) t.join();
    const double wall = seconds_since(t0);
    std::vector<double> ttft, tpot;
    long total = 0;
    for (const auto& r : results) {
      expect(r.status == 200 && r.done && r.tokens == o.tokens,
             fmt::format("a stream at concurrency {} gets {} tokens and [DONE] (status {}, {} tokens)", c,
                         o.tokens, r.status, r.tokens));
      total += r.tokens;
      ttft.push_back(r.first * 1e3);
      if (r.tokens > 1) tpot.push_back((r.last - r.first) * 1e3 / (r.tokens - 1));
    }
    const double tps = double(total) / wall;
    if (c == 1) single = tps;
    fmt::print("| {} | {:.0f} | {:.2f} | {:.2f} | {:.0f} ms | {:.0f} ms | {:.1f} ms | {:.1f} ms | {:.0f} MiB |\n", c,
               tps, single > 0 ? tps / single : 0.0, tps / prefill_tps, percentile(ttft, 0.5),
               percentile(ttft, 0.99), percentile(tpot, 0.5), percentile(tpot, 0.99), server.rss_mib());
  }

  // Batch invariance at 64: every request's choices (text, ids, logprobs) alone and together.
  if (o.invariance > 0) {
    const int n = o.invariance;
    std::vector<std::string> bodies, alone(static_cast<std::size_t>(n)), together(static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i)
      bodies.push_back(fmt::format(
          R"({{"prompt":{},"max_tokens":{},"temperature":{},"seed":{},"logprobs":5,"return_token_ids":true,"ignore_eos":true}})",
          ids_json(some_ids(4 + i % 29, shape.vocab, 700u + unsigned(i))), 8 + i % 17, i % 2 ? "0.9" : "0", i));
    const auto choices = [](const std::string& body) {
      const auto a = body.find("\"choices\":"), b = body.find(",\"usage\":");
      return a == std::string::npos || b == std::string::npos ? std::string("(no choices) ") + body : body.substr(a, b - a);
    };
    for (int i = 0; i < n; ++i) alone[std::size_t(i)] = choices(post(server, bodies[std::size_t(i)]).body);
    const double rows0 = metric(server, "recur_batch_rows_total"), steps0 = metric(server, "recur_batch_steps_total");
    std::vector<std::thread> clients;
    for (int i = 0; i < n; ++i)
      clients.emplace_back([&, i] { together[std::size_t(i)] = choices(post(server, bodies[std::size_t(i)]).body); });
    for (auto& t : clients) t.join();
    const double rows = metric(server, "recur_batch_rows_total") - rows0;
    const double steps = metric(server, "recur_batch_steps_total") - steps0;
    int same = 0;
    for (int i = 0; i < n; ++i) {
      same += alone[std::size_t(i)] == together[std::size_t(i)];
      expect(alone[std::size_t(i)] == together[std::size_t(i)],
             fmt::format("request {} gets the same bytes alone and among {}:\n  {}\n  {}", i, n,
                         alone[std::size_t(i)].substr(0, 300), together[std::size_t(i)].substr(0, 300)));
    }
    fmt::print("\ninvariance: {} of {} requests (greedy and seeded, logprobs 5) the same bytes alone and "
               "together; together they ran {:.1f} rows per model call on average\n", same, n, rows / steps);
  }

  // Follow-ups after long histories, and the KV cache at the same histories.
  fmt::print("\n| history | recur follow-up (16 in, 16 out) | recur state | KV cache | KV attention alone, same follow-up |\n"
             "|---|---|---|---|---|\n");
  for (const int h : o.history) {
    const auto base = post(server, fmt::format(R"({{"prompt":{},"max_tokens":1,"temperature":0}})",
                                               ids_json(some_ids(h, shape.vocab, 300u + unsigned(h)))));
    expect(base.status == 200, fmt::format("the {}-token history is prefilled", h));
    const auto v = recur::json::parse(base.body, "response");
    const std::string id = v.find("id")->string();
    std::vector<double> times;
    for (int rep = 0; rep < 5; ++rep) {
      const auto f = post(server, fmt::format(
          R"({{"previous_response_id":"{}","prompt":{},"max_tokens":16,"temperature":0,"ignore_eos":true}})",
          id, ids_json(some_ids(16, shape.vocab, 400u + unsigned(rep)))));
      expect(f.status == 200, "the follow-up succeeds");
      times.push_back(f.seconds * 1e3);
    }
    // The state's bytes, as the server holds them (its saved form).
    const auto state_bytes = std::size_t(metric(server, "recur_conversation_bytes") /
                                         std::max(metric(server, "recur_conversations_memory"), 1.0));
    // The softmax stack: every layer's cache at h tokens, then the same follow-up's attention.
    recur::SoftmaxAttention attn({shape.heads, shape.d_head});
    std::vector<recur::KVCache> caches;
    std::mt19937 rng(5);
    std::normal_distribution<float> normal;
    recur::RowMatrix K(1024, shape.heads * shape.d_head), V(1024, shape.heads * shape.d_head);
    for (auto* m : {&K, &V})
      for (Eigen::Index i = 0; i < m->size(); ++i) m->data()[i] = normal(rng);
    std::size_t kv_bytes = 0;
    for (int l = 0; l < shape.layers; ++l) {
      caches.push_back(attn.make_cache());
      for (int t = 0; t < h; t += 1024) {
        const int n = std::min(1024, h - t);
        attn.append(caches.back(), K.topRows(n), V.topRows(n));
      }
      kv_bytes += caches.back().bytes();
    }
    const auto t0 = Clock::now();
    Eigen::VectorXf q = K.row(0).transpose(), out(shape.heads * shape.d_head);
    for (auto& cache : caches) {
      attn.prefill(cache, K.topRows(16), K.topRows(16), V.topRows(16));
      for (int s = 0; s < 16; ++s) attn.step(cache, q, q, q, out);
    }
    const double kv_ms = seconds_since(t0) * 1e3;
    fmt::print("| {} | {:.1f} ms (p50 of 5) | {:.2f} MiB | {:.1f} MiB | {:.1f} ms |\n", h, percentile(times, 0.5),
               double(state_bytes) / (1 << 20), double(kv_bytes) / (1 << 20), kv_ms);
  }

  // Chaos: disconnects and malformed requests among well-formed streams.
  if (o.chaos_rounds > 0) {
    fmt::print("\nchaos: {} rounds of {} requests at concurrency 16 (10% disconnect mid-stream, 10% malformed)\n",
               o.chaos_rounds, o.chaos_requests);
    const std::vector<std::string> malformed = {
        "{not json", R"({"prompt":"x","max_tokens":-1})", R"({"prompt":{"a":1}})",
        R"({"prompt":"x","mystery":true})", R"({"prompt":[1,2,"x"]})", "[1,2,3]",
        R"({"prompt":"x","temperature":"hot"})", std::string("\xff\xfe{\"prompt\":1}"),
        R"({"prompt":"x","previous_response_id":"../../etc/passwd"})", R"({"prompt":"x","n":5})"};
    std::vector<double> rss;
    for (int round = 0; round < o.chaos_rounds; ++round) {
      std::atomic<int> next{0}, answered{0}, expected_answers{0}, dropped{0}, bad{0};
      std::vector<std::thread> clients;
      std::mutex problems_mutex;
      std::vector<std::string> problems;
      for (int c = 0; c < 16; ++c)
        clients.emplace_back([&, c] {
          for (int i; (i = next++) < o.chaos_requests;) {
            const int kind = (i * 7 + round) % 10;  // 0: malformed, 1: disconnect, else normal
            if (kind == 0) {
              const auto p = post(server, malformed[std::size_t(i) % malformed.size()]);
              ++bad;
              if (p.status != 400) {
                std::lock_guard<std::mutex> lock(problems_mutex);
                problems.push_back(fmt::format("malformed request {} got {}", i, p.status));
              }
              continue;
            }
            const std::string body = fmt::format(
                R"({{"prompt":{},"max_tokens":24,"temperature":0.8,"seed":{},"ignore_eos":true,"stream":true,"return_token_ids":true}})",
                ids_json(some_ids(8 + i % 40, shape.vocab, unsigned(i + 1000 * c))), i);
            if (kind == 1) {
              stream(server, body, 2);
              ++dropped;
              continue;
            }
            ++expected_answers;
            const auto r = stream(server, body);
            if (r.status == 200 && r.done && r.tokens == 24) {
              ++answered;
            } else {
              std::lock_guard<std::mutex> lock(problems_mutex);
              problems.push_back(fmt::format("request {}: status {}, {} tokens, done {}", i, r.status, r.tokens, r.done));
            }
          }
        });
      for (auto& t : clients) t.join();
      // Every finished request keeps its conversation's state (by design, up to --memory): what
      // must stay flat is the rest.
      const double held = metric(server, "recur_conversation_bytes") / (1 << 20);
      rss.push_back(server.rss_mib() - held);
      fmt::print("  round {}: {}/{} well-formed answered in full, {} hung up, {} malformed refused; RSS {:.1f} MiB "
                 "= {:.1f} MiB of conversation states + {:.1f} MiB\n",
                 round + 1, answered.load(), expected_answers.load(), dropped.load(), bad.load(), rss.back() + held,
                 held, rss.back());
      for (const auto& p : problems) expect(false, p);
      expect(answered == expected_answers, "every well-formed request is answered");
      expect(server.alive(), "the server is alive");
    }
    if (rss.size() >= 2)
      expect(rss.back() <= rss[1] * 1.05 + 8,
             fmt::format("RSS less the states held is flat after the first round: {:.1f} -> {:.1f} MiB", rss[1], rss.back()));
    expect(metric(server, "recur_requests_running") == 0, "no slot is left held");
  }
  fmt::print("\nserver RSS: {:.0f} MiB at start, {:.0f} MiB at the end\n", rss0, server.rss_mib());
  const int code = server.stop();
  expect(code == 0, fmt::format("SIGTERM: the server exits 0 (got {})", code));
  fmt::print("{}\n", g_failed ? "serve_load: some checks FAILED" : "serve_load: every check passed");
  return g_failed ? 1 : 0;
}
