// recur serve's HTTP side: the state its handlers share, the server's limits and error bodies,
// and the routes (the API key check, completions and their streams, models, health, metrics).
// cmd_serve.cpp starts and stops it.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "serve/api.h"
#include "serve/auth.h"
#include "serve/engine.h"
#include "serve/store.h"

// Last: it brings <resolv.h>, whose _res macro breaks Eigen's headers when they come after it.
#include <httplib.h>

namespace recur::cli {

// Everything the handlers share.
struct Server {
  serve::ServedModel served;
  serve::ConversationStore* store = nullptr;
  serve::Engine* engine = nullptr;
  serve::ApiKeys keys;
  std::int64_t started = 0;
  std::size_t state_bytes = 0;  // a new conversation's state
  bool state_grows = false;     // a full-attention layer's cache grows with each token
  std::atomic<std::int64_t> http_requests{0}, rejected_full{0}, rejected_bad{0}, disconnects{0},
      unauthorized{0};
  std::atomic<int> responding{0};  // completions whose response is not fully written yet
};

// cpp-httplib 0.11 listens with a backlog of 5 connections: a burst of clients beyond that has
// its connections dropped and retried a second later. Linux lets listen() be called again on a
// listening socket to widen its queue.
class HttpServer : public httplib::Server {
 public:
  void widen_backlog(int connections) { ::listen(svr_sock_, connections); }
};

// The HTTP server's limits.
struct HttpLimits {
  std::size_t max_body;
  std::int64_t read_timeout, write_timeout, keep_alive;  // seconds
};

/// The limits, its log line per request, and the JSON bodies of its own errors.
void configure_http(HttpServer& http, Server& s, const HttpLimits& limits, bool verbose,
                    const serve::EngineOptions& eo);
/// The API key check and the endpoints.
void route(HttpServer& http, Server& s);
/// Seconds since the epoch, as the API's `created`.
std::int64_t unix_seconds();

}  // namespace recur::cli
