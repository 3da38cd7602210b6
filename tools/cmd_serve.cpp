// recur serve: an OpenAI-compatible HTTP server (cpp-httplib) over the batching engine.
#include <fmt/format.h>
#include <pthread.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "chat_format.h"
#include "cli.h"
#include "commands.h"
#include "recur/chat_reply.h"
#include "recur/chat_template.h"
#include "recur/error.h"
#include "serve/api.h"
#include "serve/auth.h"
#include "serve/engine.h"
#include "serve/store.h"
#include "text_model.h"
#include "util/json.h"

// Last (it includes httplib.h, whose <resolv.h> breaks Eigen's headers when they come after it).
#include "serve/routes.h"

namespace recur::cli {
namespace {

// The ids that end an assistant's turn besides the config's eos: the tokenizer's eos_token, and
// the first special token the template writes after an assistant's reply (<|im_end|>,
// <|eot_id|>, <end_of_turn>), found by rendering a short conversation.
std::vector<int> turn_end_ids(const ChatTemplate& chat, const Tokenizer& tokenizer) {
  std::vector<int> ids;
  const auto add = [&](int id) {
    if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
  };
  if (const auto eos = chat.special_tokens().find("eos_token"); eos != chat.special_tokens().end())
    if (const auto id = tokenizer.token_to_id(eos->second)) add(*id);
  constexpr std::string_view kReply = "recur-reply-marker";
  try {
    const std::string text = chat.render(
        R"([{"role":"user","content":"Hi"},{"role":"assistant","content":"recur-reply-marker"}])", {}, false);
    const std::size_t at = text.rfind(kReply);
    if (at != std::string::npos)
      for (const int id : tokenizer.encode(text.substr(at + kReply.size()), false))
        if (tokenizer.is_special(id)) {
          add(id);
          break;
        }
  } catch (const Error&) {
    // A template that refuses this conversation (one that needs a system turn, say): the
    // eos ids alone end a turn.
  }
  return ids;
}

// What POST /v1/chat/completions renders with: the chat format recur chat uses too (the model's
// template or --chat-template, else RWKV's world format), else nothing: the endpoint then
// answers 400 saying why, and the chat page shows that at load (GET /v1/models).
void setup_chat(serve::ServedModel& served, const Args& args, const TextModel& tm) {
  const ChatFormat format = chat_format(
      args, tm, "start recur serve with --chat-template FILE, or send text to /v1/completions");
  served.chat_template = format.chat_template;
  served.world_chat = format.world;
  if (served.chat_template) served.reply_format = ReplyFormat::detect(*served.chat_template);
  served.chat_stop = format.stop;
  if (!format.none.empty()) {
    served.no_chat = "/v1/chat/completions cannot lay out the messages: " + format.none;
    fmt::print(stderr, "chat: none ({})\n", format.none);
    return;
  }
  std::string names;
  if (served.chat_template && tm.tokenizer) {
    served.chat_end_ids = turn_end_ids(*served.chat_template, *tm.tokenizer);
    for (const int id : served.chat_end_ids)
      names += fmt::format("{}{} ({})", names.empty() ? "" : ", ", printable(tm.tokenizer->id_to_token(id)), id);
  }
  fmt::print(stderr, "chat: {}; tool calls read as {}; a turn ends at {}\n", format.describe(),
             tool_call_format_name(served.reply_format.tool_calls),
             names.empty() ? std::string("the model's eos") : names + " or the model's eos");
}

// "90", "90s", "15m", "2h", "7d" as seconds.
long parse_duration(const std::string& text, const std::string& option) {
  std::size_t used = 0;
  long value = -1;
  try {
    value = std::stol(text, &used);
  } catch (const std::exception&) {
  }
  const std::string unit = text.substr(used);
  const long scale = unit.empty() || unit == "s" ? 1 : unit == "m" ? 60 : unit == "h" ? 3600 : unit == "d" ? 86400 : 0;
  if (value < 0 || scale == 0 || value > 100L * 365 * 86400 / scale)
    throw ArgumentError(fmt::format("{} '{}': expected a number of seconds, or with s, m, h or d (up to 100 years)",
                                    option, printable(text)));
  return value * scale;
}

// SIGTERM and SIGINT are blocked in every thread and taken by one that waits for them: the
// handler may then do anything (log, stop the server), which a signal handler may not.
sigset_t shutdown_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  return set;
}

// serve's options; what each does is in its help line.
void declare_serve_options(Args& args) {
  declare_chat_template_option(args);
  args.option("model", "", "model directory (config.json, safetensors or pytorch_model.bin, "
                           "tokenizer.json), or an RWKV-7 .pth; default: the built-in model", 'm')
      .option("tokenizer", "", "tokenizer.json or rwkv_vocab_v20230424.txt, or a directory that "
                               "holds one, for a model directory without its own (Based's "
                               "checkpoints use GPT-2's)")
      .option("host", "127.0.0.1", "address to listen on (0.0.0.0: every interface)")
      .option("port", "8080", "port to listen on (0: any free port, printed at start)")
      .option("name", "", "the model's name in the API (default: the directory's name, or "
                          "recur-kjv / recur-random)")
      .option("threads", "0", "worker threads for the model, 0: all cores (changes speed, never results)")
      .option("chunk", "64", "prefill tokens per turn between decode steps (changes speed, never results)")
      .option("max-batch", "64", "requests decoded at once; more wait in the queue")
      .option("queue", "256", "requests that may wait for a slot; past it 429 with Retry-After")
      .option("max-body", "8M", "largest request body in bytes (413 past it)")
      .option("max-tokens-limit", "1M", "largest max_tokens a request may ask for")
      .option("read-timeout", "30", "seconds a client may take to send the next part of its request")
      .option("write-timeout", "30", "seconds a client may take to accept the next part of a response")
      .option("keep-alive", "5", "seconds an idle connection is kept open for the client's next request "
                                 "(shutdown waits for idle connections up to this long)")
      .option("max-checkpoints", "1", "states kept per chat conversation beside the one after the reply: "
                                      "each at the end of a prompt's last message, so that a turn whose "
                                      "template rewrites the reply (a thinking model's) still reuses the "
                                      "history; the oldest dropped first, 0: none (see docs/chat.md)")
      .option("prompt-index", "4096", "chat responses a client that resends the whole messages (no "
                                      "previous_response_id) can continue from, found by its prompt's "
                                      "ids; per process, the oldest forgotten first, 0: none (see "
                                      "docs/chat.md)")
      .option("memory", "1G", "bytes of conversation states kept in memory; past it the least "
                              "recently used go to --state-dir (or are dropped without one)")
      .option("state-dir", "", "directory for conversation states: what memory cannot hold, and "
                               "everything at shutdown; a restarted server continues from it")
      .option("store", "", "keep conversations in Redis, shared with other replicas: "
                           "redis://[:password@]host[:port][/db]; memory is then a cache in front of it")
      .option("ttl", "7d", "with --store: how long Redis keeps a conversation after its last response "
                           "(a number of seconds, or with s, m, h or d; 0: for ever)")
      .option("instance", "", "this replica's name, sent in every response's X-Recur-Instance header "
                              "(default: host:port)")
      .option("grace", "30", "seconds running requests get to finish after SIGTERM before they are "
                             "cancelled")
      .repeatable("api-key", "require this key (Authorization: Bearer KEY) on /v1/ and /metrics; may be "
                             "given more than once; conversations belong to the key that made them")
      .option("api-key-file", "", "read API keys from this file, one per line ('#' starts a comment)")
      .flag("random-model", "the random-weight test model (byte-level, seed 1) instead of the built-in one")
      .flag("verbose", "log every request", 'v')
      .excludes("random-model", "model")
      .excludes("store", "state-dir")
      .footer(
          "Extensions to the OpenAI request: \"previous_response_id\" (continue the conversation a\n"
          "response ended; its prompt is appended after that response's tokens), \"top_k\",\n"
          "\"ignore_eos\" and \"return_token_ids\". A chat request naming a previous reply reuses its kept state\n"
          "when the rendered prompt extends it (usage.prompt_tokens_details.cached_tokens), and\n"
          "starts fresh otherwise. A conversation's state includes every token the model produced, an\n"
          "end-of-sequence one and one that completed a stop sequence included, though the text\n"
          "returned ends before them.\n\n"
          "API keys: --api-key, --api-key-file and the RECUR_API_KEY environment variable add up.\n"
          "With any key set, /v1/ and /metrics answer 401 without one of them; /health stays open.\n"
          "A conversation continues only with the key that made it.\n\n"
          "SIGTERM or SIGINT: stop accepting, let running requests finish (up to --grace seconds),\n"
          "write the conversations to --state-dir, exit 0.");
}

// --api-key, --api-key-file and RECUR_API_KEY, which add up.
serve::ApiKeys read_api_keys(const Args& args) {
  serve::ApiKeys keys;
  for (const auto& k : args.all("api-key")) keys.add(k, "--api-key");
  if (args.given("api-key-file"))
    keys.add_lines(read_input(args.str("api-key-file"), "--api-key-file", 1 << 20), "--api-key-file " + args.str("api-key-file"));
  if (const char* k = std::getenv("RECUR_API_KEY"); k && *k) keys.add(k, "RECUR_API_KEY");
  return keys;
}

// The conversation store (Redis, a directory or memory alone), said on stderr; a Redis that
// cannot be reached is an Error that says what to do.
std::unique_ptr<serve::ConversationStore> open_store(const Args& args, std::size_t memory) {
  serve::StoreOptions so;
  so.memory_budget = memory;
  so.dir = args.str("state-dir");
  so.redis_url = args.str("store");
  so.ttl_seconds = parse_duration(args.str("ttl"), "--ttl");
  std::unique_ptr<serve::ConversationStore> store;
  try {
    store = std::make_unique<serve::ConversationStore>(so);
  } catch (const serve::StoreUnavailable& e) {
    throw Error(fmt::format("{}: start redis-server there, or give --store another address", e.what()));
  }
  const auto st = store->stats();
  if (store->redis())
    fmt::print(stderr, "conversations: in {} (expiry {}), up to {} cached in memory\n", store->describe(),
               so.ttl_seconds ? fmt::format("{} s", so.ttl_seconds) : std::string("none"),
               human_bytes(double(memory)));
  else if (!store->dir().empty())
    fmt::print(stderr, "conversations: up to {} in memory, then {} ({} there now)\n",
               human_bytes(double(memory)), printable(store->dir()), st.disk_count);
  else
    fmt::print(stderr, "conversations: up to {} in memory, none kept past it or past a restart "
                       "(--state-dir or --store keeps them)\n", human_bytes(double(memory)));
  return store;
}

// The model's name in the API: --name, else recur-random, recur-kjv or the directory's name.
std::string served_name(const Args& args, const TextModel& tm) {
  std::string name = args.given("name") ? args.str("name")
                     : tm.random        ? "recur-random"
                     : !args.given("model")
                         ? "recur-kjv"
                         : std::filesystem::path(args.str("model")).lexically_normal().filename().string();
  if (name.empty()) name = "recur";
  return name;
}

// The HTTP server's limits, read with the other options so that a bad one stops the server
// before anything loads.
HttpLimits http_limits(const Args& args) {
  return {static_cast<std::size_t>(args.integer("max-body", 1024, std::int64_t(1) << 32)),
          args.integer("read-timeout", 1, 3600), args.integer("write-timeout", 1, 3600),
          args.integer("keep-alive", 1, 3600)};
}

// Serves until listen() ends or SIGTERM / SIGINT arrives; after a signal, running requests get
// `grace` seconds and their handlers finish writing before the server stops. Whether listen()
// succeeded.
bool serve_until_stopped(HttpServer& http, Server& s, serve::Engine& engine,
                         const sigset_t& signals, double grace) {
  std::atomic<bool> stopping{false};
  std::thread watcher([&] {
    int sig = 0;
    sigwait(&signals, &sig);
    if (stopping.exchange(true)) return;  // woken because listen() ended on its own
    spdlog::info("{}: no new requests; {} running get up to {} s to finish", sig == SIGINT ? "SIGINT" : "SIGTERM",
                 engine.stats().running, grace);
    engine.drain(grace);
    // The HTTP server cuts open streams when it stops: first let the engine finish, then let the
    // handlers write their last chunks.
    engine.join();
    for (int i = 0; i < 500 && s.responding.load() > 0; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    http.stop();
  });
  const bool listened = http.listen_after_bind();
  if (!stopping.exchange(true)) {
    // listen() ended on its own (not through a signal): stop the engine, wake the watcher.
    engine.drain(0);
    pthread_kill(watcher.native_handle(), SIGTERM);
  }
  watcher.join();
  engine.join();
  return listened;
}

// Writes the conversations kept in memory to the directory or Redis, and says how many.
void persist_conversations(serve::ConversationStore& store) {
  const auto saved = store.persist();
  const auto st = store.stats();
  if (store.redis())
    spdlog::info("stopped: {} waiting conversations written to {}, {} could not be", saved,
                 store.describe(), st.pending);
  else
    spdlog::info("stopped: {} conversations written to {} ({} there in all)", saved,
                 store.dir().empty() ? std::string("nowhere (no --state-dir)") : printable(store.dir()),
                 st.disk_count);
}

}  // namespace

int run_serve(int argc, char** argv) {
  Args args("serve",
            "Serves a model over HTTP with the OpenAI completions API: POST /v1/completions (text\n"
            "or token ids, max_tokens, temperature, top_p, seed, stop, logprobs, stream), POST\n"
            "/v1/chat/completions (messages laid out by the model's chat template, or RWKV's world\n"
            "format), GET /v1/models, GET /health and GET /metrics (Prometheus). Requests are decoded together\n"
            "in one batch that they join and leave between steps; a request's tokens and logprobs\n"
            "are the same bytes whether it runs alone or among 64 others. Each response's final\n"
            "state is kept under its id: a request naming it in \"previous_response_id\" continues\n"
            "the conversation and pays only for its new tokens. Without -m it serves the built-in\n"
            "model.");
  declare_serve_options(args);
  if (!args.parse(argc, argv, 2)) return 0;
  const auto port = static_cast<int>(args.integer("port", 0, 65535));
  serve::EngineOptions eo;
  eo.threads = threads_option(args);
  eo.chunk = static_cast<int>(args.integer("chunk", 1, 1 << 16));
  eo.max_batch = static_cast<int>(args.integer("max-batch", 1, 4096));
  eo.max_queue = static_cast<int>(args.integer("queue", 0, 1 << 16));
  eo.max_checkpoints = static_cast<int>(args.integer("max-checkpoints", 0, 1024));
  eo.prompt_index = static_cast<std::size_t>(args.integer("prompt-index", 0, 1 << 24));
  const HttpLimits limits = http_limits(args);
  const auto memory = static_cast<std::size_t>(args.integer("memory", 0, std::int64_t(1) << 50));
  const double grace = args.real("grace", 0, 86400);
  serve::ApiKeys keys = read_api_keys(args);

  // Blocked before any thread starts, so that every thread inherits the mask.
  const sigset_t signals = shutdown_signals();
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  // The store first: a Redis that cannot be reached stops the server before the model loads.
  const std::unique_ptr<serve::ConversationStore> store = open_store(args, memory);
  const TextModel tm = open_model(args);
  tm.require_text();
  describe_model(tm);
  Server s;
  s.store = store.get();
  s.keys = std::move(keys);
  s.served.model = tm.model;
  {
    const Decoder probe(tm.model, DecoderOptions{1, 1});
    s.state_bytes = probe.state_bytes();
    s.state_grows = probe.state_grows();
  }
  s.served.tokenizer = tm.tokenizer;
  s.served.max_tokens_limit = args.integer("max-tokens-limit", 1, std::int64_t(1) << 40);
  s.served.name = served_name(args, tm);
  setup_chat(s.served, args, tm);
  s.started = unix_seconds();
  if (!tm.tokenizer && tm.model->config().vocab_size < ByteTokenizer::kVocab)
    fmt::print(stderr, "warning: the model has {} ids and no tokenizer.json: send prompts as token ids\n",
               tm.model->config().vocab_size);

  serve::Engine engine(tm.model, tm.tokenizer, *store, eo);
  s.engine = &engine;

  HttpServer http;
  configure_http(http, s, limits, args.flag_set("verbose"), eo);
  route(http, s);
  const std::string host = args.str("host");
  const int bound = port == 0 ? http.bind_to_any_port(host) : (http.bind_to_port(host, port) ? port : -1);
  if (bound < 0)
    throw Error(fmt::format("cannot listen on {}:{} (in use, or not an address of this machine)",
                            printable(host), port));
  http.widen_backlog(1024);
  const std::string instance = args.given("instance") ? args.str("instance") : fmt::format("{}:{}", host, bound);
  http.set_default_headers({{"X-Recur-Instance", instance}});
  fmt::print(stderr, "listening on http://{}:{} as model '{}' (kernels {}, up to {} at once, {} waiting; {})\n",
             host, bound, s.served.name, kernels_line(false), eo.max_batch, eo.max_queue,
             s.keys.enabled() ? fmt::format("{} API key{}", s.keys.size(), s.keys.size() == 1 ? "" : "s")
                              : std::string("no API key: anyone who can reach the port may use it"));

  const bool listened = serve_until_stopped(http, s, engine, signals, grace);
  persist_conversations(*store);
  return listened ? 0 : 1;
}

}  // namespace recur::cli
