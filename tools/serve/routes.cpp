#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <memory>
#include <mutex>
#include <optional>

#include "cli.h"
#include "serve/page.h"
#include "util/json.h"

// Last (it includes httplib.h).
#include "serve/routes.h"

namespace recur::cli {

std::int64_t unix_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch()).count();
}

namespace {

using serve::ApiError;
using serve::Job;
using recur::ReplyOptions;

void send_error(httplib::Response& res, int status, const std::string& message,
                const std::string& type, const std::string& param = "", const std::string& code = "") {
  res.status = status;
  res.set_content(serve::error_json(message, type, param, code), "application/json");
}

std::string metrics(const Server& s) {
  const auto e = s.engine->stats();
  const auto st = s.store->stats();
  std::string out;
  const auto metric = [&](const char* name, const char* type, const char* help, double value) {
    out += fmt::format("# HELP {0} {1}\n# TYPE {0} {2}\n{0} {3}\n", name, help, type, value);
  };
  metric("recur_http_requests_total", "counter", "HTTP requests received", double(s.http_requests));
  metric("recur_requests_admitted_total", "counter", "completions that started running", double(e.requests_admitted));
  metric("recur_requests_finished_total", "counter", "completions that finished", double(e.requests_finished));
  metric("recur_requests_cancelled_total", "counter", "completions whose client went away", double(e.requests_cancelled));
  metric("recur_requests_failed_total", "counter", "completions that ended in an error", double(e.requests_failed));
  metric("recur_requests_rejected_full_total", "counter", "requests refused with 429 (queue full)", double(s.rejected_full));
  metric("recur_requests_rejected_invalid_total", "counter", "requests refused as malformed (4xx)", double(s.rejected_bad));
  metric("recur_requests_unauthorized_total", "counter", "requests refused with 401 (no key, or a wrong one)", double(s.unauthorized));
  metric("recur_prompt_tokens_total", "counter", "prompt tokens prefilled", double(e.prompt_tokens));
  metric("recur_generated_tokens_total", "counter", "tokens generated", double(e.generated_tokens));
  metric("recur_batch_steps_total", "counter", "batched decode steps", double(e.batch_steps));
  metric("recur_batch_rows_total", "counter", "sequences stepped, summed over the batched steps", double(e.batch_rows));
  metric("recur_batch_size", "gauge", "sequences in the last batched step", double(e.last_batch));
  metric("recur_requests_running", "gauge", "completions holding a slot", double(e.running));
  metric("recur_queue_length", "gauge", "completions waiting for a slot", double(e.waiting));
  metric("recur_conversations_memory", "gauge", "conversation states held in memory", double(st.memory_count));
  metric("recur_conversations_disk", "gauge", "conversation states in the state directory", double(st.disk_count));
  metric("recur_conversations_dropped_total", "counter", "states pushed out of memory with no directory to go to", double(st.dropped));
  metric("recur_conversation_bytes", "gauge", "bytes of conversation states held in memory", double(st.memory_bytes));
  metric("recur_store_reads_total", "counter", "states read from the directory or Redis", double(st.reads));
  metric("recur_store_writes_total", "counter", "states written to the directory or Redis", double(st.writes));
  metric("recur_store_errors_total", "counter", "calls to the directory or Redis that failed", double(st.errors));
  metric("recur_store_pending", "gauge", "states waiting in memory for Redis to come back", double(st.pending));
  metric("recur_store_up", "gauge", "1 while the conversation store answers", st.up ? 1.0 : 0.0);
  metric("recur_slot_bytes", "gauge", "bytes held by the running slots' decoders and the batch", double(s.engine->active_bytes()));
  metric("recur_resident_bytes", "gauge", "resident set size of the process", double(resident_bytes()));
  return out;
}

// Streams a job as server-sent events: a chunk whenever text or tokens arrive, a comment every
// few seconds while nothing does (so that a client that left is noticed), then the finish.
// The chat API's chunks (`chat`) carry a delta: the role in the first, then the content, and
// the finish reason in a last chunk of its own.
void stream(Server& s, const std::shared_ptr<Job>& job, bool include_usage, bool chat,
            const ReplyOptions& reply, httplib::Response& res) {
  struct Progress {
    std::size_t text = 0, tokens = 0, ids = 0;
    bool ended = false, started = false;
    serve::ChatStreamed message;  // what the chat deltas sent of the reply's message
  };
  auto sent = std::make_shared<Progress>();
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [&s, job, include_usage, chat, reply, sent](std::size_t, httplib::DataSink& sink) {
        std::string out;
        {
          std::unique_lock<std::mutex> lock(job->mutex);
          job->changed.wait_for(lock, std::chrono::seconds(5), [&] {
            return job->finished || job->text.size() > sent->text || job->tokens.size() > sent->tokens ||
                   job->token_ids.size() > sent->ids;
          });
          const bool news = job->text.size() > sent->text || job->tokens.size() > sent->tokens ||
                            job->token_ids.size() > sent->ids;
          if (job->error_status) {
            out = "data: " + serve::error_json(job->error_message, job->error_type) + "\n\n";
            sent->ended = true;
          } else if (chat && (news || job->finished)) {
            if (!sent->started)
              out = "data: " + serve::chat_chunk_json(*job, s.served, *s.engine, reply, sent->message, true, 0, "") + "\n\n";
            sent->started = true;
            if (news)
              out += "data: " + serve::chat_chunk_json(*job, s.served, *s.engine, reply, sent->message, false,
                                                        sent->tokens, "") + "\n\n";
            if (job->finished) {
              out += "data: " + serve::chat_chunk_json(*job, s.served, *s.engine, reply, sent->message, false,
                                                        job->tokens.size(), job->finish_reason) + "\n\n";
              if (include_usage) out += "data: " + serve::chat_usage_chunk_json(*job, s.served) + "\n\n";
              sent->ended = true;
            }
            sent->text = job->text.size();
            sent->tokens = job->tokens.size();
            sent->ids = job->token_ids.size();
          } else if (news || job->finished) {
            out = "data: " + serve::chunk_json(*job, s.served, *s.engine, sent->text, sent->tokens,
                                                sent->ids, job->finished ? job->finish_reason : "") + "\n\n";
            sent->text = job->text.size();
            sent->tokens = job->tokens.size();
            sent->ids = job->token_ids.size();
            if (job->finished) {
              if (include_usage) out += "data: " + serve::usage_chunk_json(*job, s.served) + "\n\n";
              sent->ended = true;
            }
          } else {
            out = ": waiting\n\n";
          }
        }
        if (sent->ended) out += "data: [DONE]\n\n";
        if (!sink.write(out.data(), out.size())) {
          job->cancelled = true;
          ++s.disconnects;
          return false;
        }
        if (sent->ended) sink.done();
        return true;
      },
      [&s, job](bool success) {
        if (!success) job->cancelled = true;
        --s.responding;
      });
}

// A chat request that names no previous response (a client resending the whole `messages`): the
// kept state of this owner's response whose ids begin the prompt the longest way, found by the
// prompt index and read from the store as previous_response_id's is. The index's hash only
// proposes; the engine compares the ids before it reuses anything. "" (and the request starts
// fresh) when nothing is found or the store cannot say now.
std::string find_by_prompt(Server& s, serve::Request& r, const std::string& owner) {
  // A few candidates at most: each may cost the store a read (a file, a Redis round trip).
  constexpr std::size_t kCandidates = 4;
  auto& index = s.engine->prompt_index();
  for (const auto& [id, length] : index.find(owner, r.prompt, kCandidates)) {
    std::optional<std::string> state;
    try {
      state = s.store->get(id, owner);
    } catch (const serve::StoreUnavailable&) {
      return {};  // the request runs whole, as it would without the index
    }
    if (!state) {
      index.forget(id);  // dropped from the store since
      continue;
    }
    r.previous_id = id;
    r.found_by_prompt = true;
    return std::move(*state);
  }
  return {};
}

// POST /v1/completions, and /v1/chat/completions with `chat`.
void completions(Server& s, const httplib::Request& req, httplib::Response& res, bool chat) {
  serve::Completion c;
  // Authorized by the pre-routing handler; the tag again, for the conversation's owner.
  const std::string owner = s.keys.authorize(req.get_header_value("Authorization")).value_or("");
  std::string previous_state;
  try {
    c = chat ? serve::parse_chat_completion(req.body, s.served) : serve::parse_completion(req.body, s.served);
    // Read now, on this HTTP thread: the engine's thread never waits for the store. Another
    // key's conversation is "no such conversation", as an unknown id is.
    if (!c.request.previous_id.empty()) {
      auto state = s.store->get(c.request.previous_id, owner);
      if (!state)
        throw ApiError(404, "not_found_error", "previous_response_id",
                       fmt::format("previous_response_id '{}': no such conversation is kept here",
                                   c.request.previous_id));
      previous_state = std::move(*state);
    } else if (c.request.whole_prompt) {
      previous_state = find_by_prompt(s, c.request, owner);
    }
  } catch (const serve::StoreUnavailable& e) {
    send_error(res, 503, fmt::format("previous_response_id '{}' cannot be continued now: {} (new "
                                     "conversations still run)", c.request.previous_id, e.what()),
               "server_error", "previous_response_id");
    return;
  } catch (const ApiError& e) {
    ++s.rejected_bad;
    send_error(res, e.status, e.what(), e.type, e.param);
    return;
  }
  auto job = std::make_shared<Job>();
  job->request = std::move(c.request);
  job->id = serve::new_response_id();
  // Call ids are the response id's and the call's index: the same reply gives the same bytes.
  c.reply.id_base = job->id.substr(job->id.find('-') + 1);
  job->owner = owner;
  job->previous_state = std::move(previous_state);
  job->created = unix_seconds();
  if (!s.engine->submit(job)) {
    if (s.engine->draining()) {
      send_error(res, 503, "the server is shutting down", "server_error");
    } else {
      ++s.rejected_full;
      res.set_header("Retry-After", "1");
      send_error(res, 429, fmt::format("the queue is full ({} requests wait); retry later",
                                       s.engine->options().max_queue), "rate_limit_error");
    }
    return;
  }
  if (c.stream) {
    ++s.responding;  // until the stream's releaser runs
    stream(s, job, c.include_usage, chat, c.reply, res);
    return;
  }
  std::unique_lock<std::mutex> lock(job->mutex);
  job->changed.wait(lock, [&] { return job->finished; });
  if (job->error_status) {
    send_error(res, job->error_status, job->error_message, job->error_type);
    return;
  }
  res.set_content(chat ? serve::chat_completion_json(*job, s.served, *s.engine, c.reply)
                       : serve::completion_json(*job, s.served, *s.engine),
                  "application/json");
}

// OpenAI's model object, and recur's own member: a new conversation's state, and whether the
// chat API can lay out messages for this model (with why not), which the chat page shows at load.
std::string model_json(const Server& s) {
  const bool chat = s.served.chat_template || s.served.world_chat;
  return fmt::format(R"({{"id":{},"object":"model","created":{},"owned_by":"recur",)"
                     R"("recur":{{"state_bytes":{},"state_grows":{},"chat":{}{}}}}})",
                     json::quote(s.served.name), s.started, s.state_bytes,
                     s.state_grows ? "true" : "false", chat ? "true" : "false",
                     chat ? std::string() : ",\"no_chat\":" + json::quote(s.served.no_chat));
}

}  // namespace

// The HTTP server's limits, its log line per request, and the JSON bodies of its own errors.
void configure_http(HttpServer& http, Server& s, const HttpLimits& limits, bool verbose,
                    const serve::EngineOptions& eo) {
  // One HTTP thread per connection: every running and waiting request, and a few more for
  // /health and /metrics while the queue is full.
  const auto http_threads = static_cast<std::size_t>(eo.max_batch + eo.max_queue + 8);
  http.new_task_queue = [http_threads] { return new httplib::ThreadPool(http_threads); };
  http.set_payload_max_length(limits.max_body);
  http.set_read_timeout(static_cast<time_t>(limits.read_timeout), 0);
  http.set_write_timeout(static_cast<time_t>(limits.write_timeout), 0);
  http.set_keep_alive_timeout(static_cast<time_t>(limits.keep_alive));
  http.set_tcp_nodelay(true);
  http.set_logger([&s, verbose](const httplib::Request& req, const httplib::Response& res) {
    ++s.http_requests;
    if (verbose || res.status >= 500) spdlog::info("{} {} {}", req.method, req.path, res.status);
  });
  http.set_error_handler([](const httplib::Request&, httplib::Response& res) {
    if (!res.body.empty()) return;
    const int status = res.status;
    const std::string message = status == 413   ? "the request body is larger than --max-body"
                                : status == 404 ? "no such endpoint (POST /v1/completions, /v1/chat/completions, GET /v1/models, /health, /metrics)"
                                : status == 405 ? "method not allowed on this endpoint"
                                : status == 400 ? "the request could not be read: malformed HTTP, or not "
                                                  "sent in full within --read-timeout"
                                                : fmt::format("HTTP error {}", status);
    send_error(res, status, message, status == 404 ? "not_found_error" : "invalid_request_error");
  });
  http.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "unknown error";
    try {
      if (ep) std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    spdlog::error("request failed: {}", what);
    send_error(res, 500, what, "server_error");
  });
}

// The API key check and the endpoints.
void route(HttpServer& http, Server& s) {
  // Keys guard everything but /health (load balancers probe it without one).
  http.set_pre_routing_handler([&s](const httplib::Request& req, httplib::Response& res) {
    if (!s.keys.enabled() || (req.path.rfind("/v1/", 0) != 0 && req.path != "/metrics"))
      return httplib::Server::HandlerResponse::Unhandled;
    if (s.keys.authorize(req.get_header_value("Authorization"))) return httplib::Server::HandlerResponse::Unhandled;
    ++s.unauthorized;
    res.set_header("WWW-Authenticate", "Bearer");
    const bool sent = req.has_header("Authorization");
    send_error(res, 401,
               sent ? "Incorrect API key provided. The server expects Authorization: Bearer KEY with "
                      "one of its keys."
                    : "You didn't provide an API key. Send it as Authorization: Bearer KEY.",
               "invalid_request_error", "", "invalid_api_key");
    return httplib::Server::HandlerResponse::Handled;
  });
  http.Post("/v1/completions", [&s](const httplib::Request& req, httplib::Response& res) {
    completions(s, req, res, false);
  });
  http.Post("/v1/chat/completions", [&s](const httplib::Request& req, httplib::Response& res) {
    completions(s, req, res, true);
  });
  http.Get("/v1/models", [&s](const httplib::Request&, httplib::Response& res) {
    res.set_content(fmt::format(R"({{"object":"list","data":[{}]}})", model_json(s)), "application/json");
  });
  http.Get(R"(/v1/models/(.+))", [&s](const httplib::Request& req, httplib::Response& res) {
    if (req.matches[1] != s.served.name)
      return send_error(res, 404, fmt::format("the model '{}' does not exist here", std::string(req.matches[1])),
                        "not_found_error", "model");
    res.set_content(model_json(s), "application/json");
  });
  // The chat page, outside /v1/: it asks for the API key itself and sends it with each request.
  http.Get("/", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(serve::kChatPage, "text/html; charset=utf-8");
  });
  http.Get("/health", [&s](const httplib::Request&, httplib::Response& res) {
    if (s.engine->draining()) return send_error(res, 503, "shutting down", "server_error");
    res.set_content(R"({"status":"ok"})", "application/json");
  });
  http.Get("/metrics", [&s](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics(s), "text/plain; version=0.0.4");
  });

}

}  // namespace recur::cli
