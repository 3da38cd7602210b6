// recur chat: a conversation in the terminal (or through a pipe) with a model's own chat
// template. The decoder's state is kept between turns, so a turn prefills only what the
// template adds after the tokens already run: the reply's end of turn and the new message.
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include <unistd.h>

#include "chat_format.h"
#include "cli.h"
#include "commands.h"
#include "text_model.h"
#include "util/file.h"
#include "util/json.h"
#include "recur/chat_reply.h"
#include "recur/chat_template.h"
#include "recur/json_constraint.h"
#include "recur/error.h"
#include "recur/model.h"
#include "recur/sampling.h"
#include "recur/tokenizer.h"
#include "text/world_chat.h"

namespace recur::cli {
namespace {

// Ctrl-C during a reply stops the reply, not the program.
std::atomic<bool> g_interrupted{false};
extern "C" void on_interrupt(int) { g_interrupted.store(true); }

struct Message {
  std::string role, content;
};

std::string messages_json(const std::vector<Message>& messages) {
  std::string out = "[";
  for (std::size_t i = 0; i < messages.size(); ++i)
    out += fmt::format("{}{{\"role\": {}, \"content\": {}}}", i ? ", " : "",
                       json::quote(messages[i].role), json::quote(messages[i].content));
  return out + "]";
}

// The conversation, the ids its state holds and what the last turns cost.
class Chat {
 public:
  // `format.chat_template` null: RWKV's world format (text/world_chat.h).
  Chat(const TextModel& tm, const ChatFormat& format, const DecoderOptions& options,
       const SamplerOptions& so, std::int64_t max_tokens, std::string system, std::string extra, bool think,
       std::string tools, const std::string& tool_choice)
      : tm_(tm), template_(format.chat_template), stop_(format.stop), decoder_(tm.model, options),
        sampler_(tm.sampler(so)), max_tokens_(max_tokens), system_(std::move(system)),
        extra_(std::move(extra)), think_(think) {
    reply_options_.tools_json = std::move(tools);
    if (template_) reply_format_ = ReplyFormat::detect(*template_);
    // --tool-choice: "none" reads no call; "required" or a tool's name holds every reply to one
    // call while sampling (the grammar serve uses for the same tool_choice).
    reply_options_.parse_tool_calls = tool_choice != "none";
    if (tool_choice != "auto" && tool_choice != "none") {
      call_grammar_ = tool_call_grammar(reply_format_, reply_options_,
                                        tool_choice == "required" ? std::string_view() : std::string_view(tool_choice));
      if (call_grammar_->min_bytes() > std::size_t(max_tokens))
        throw ArgumentError(fmt::format("--tokens is {} but the shortest tool call takes {} bytes (one byte a token "
                                        "at worst): raise --tokens", max_tokens, call_grammar_->min_bytes()));
      trie_ = TokenTrie::build(*tm.tokenizer, tm.model->config().vocab_size);
    }
    dim_ = ::isatty(STDOUT_FILENO) != 0;
    eos_ = tm.model->config().eos_token_ids;
    // The template's end of turn (eos_token in tokenizer_config.json, e.g. <|im_end|>) ends a
    // reply as the config's eos ids do.
    if (template_) {
      const auto& special = template_->special_tokens();
      if (const auto it = special.find("eos_token"); it != special.end())
        if (const auto id = tm.tokenizer->token_to_id(it->second)) eos_.push_back(*id);
    }
    reset();
  }

  void reset() {
    decoder_.reset();
    messages_.clear();
    ids_.clear();
    if (!system_.empty()) messages_.push_back({"system", system_});
  }

  // One turn: the user's text in, the reply streamed to stdout.
  void turn(const std::string& text) {
    messages_.push_back({"user", text});
    const std::string conversation = messages_json(messages_);
    const std::string prompt = template_ ? template_->render(conversation, reply_options_.tools_json, true,
                                                             ChatContent::kAuto, extra_)
                                         : text::world_chat_prompt(conversation, true, think_);
    reply_options_.in_thought = reply_format_.opens_thought(prompt);
    reply_options_.in_thought_tag = reply_format_.opens_thought_tag(prompt);
    const std::vector<int> want = tm_.tokenizer->encode(prompt, false);
    // Only what extends the ids already run is prefilled; a prompt that does not extend them
    // (the template rewrote an earlier turn) starts the state again from its first id.
    const bool extends = want.size() > ids_.size() && std::equal(ids_.begin(), ids_.end(), want.begin());
    if (!extends) {
      decoder_.reset();
      ids_.clear();
      ++restarts_;
    }
    const std::vector<int> fresh(want.begin() + std::ptrdiff_t(ids_.size()), want.end());
    double t0 = now_seconds();
    decoder_.prefill(fresh);
    last_prefill_ = {std::int64_t(fresh.size()), now_seconds() - t0};
    last_reused_ = std::int64_t(ids_.size());
    ids_ = want;

    TextSink out(false);
    DecodeStream stream(tm_.tokenizer, true);
    std::string reply, held;  // held: the reply's tail that may begin a stop string, not yet shown
    // What is shown is the reply read as a message: the thought dimmed (on a terminal), then the
    // content, then each tool call as a JSON line, each part as it grows.
    ReplyMessage shown;
    const auto show = [&](bool whole) {
      const ReplyMessage m = parse_reply(reply, reply_format_, reply_options_, !whole);
      if (m.reasoning.size() > shown.reasoning.size()) {
        if (dim_) std::fputs("\033[2m", stdout);
        out.put(m.reasoning.substr(shown.reasoning.size()));
        if (dim_) std::fputs("\033[0m", stdout);
      }
      if (m.content.size() > shown.content.size()) {
        if (shown.content.empty() && m.has_reasoning) out.put("\n\n");
        out.put(m.content.substr(shown.content.size()));
      }
      for (std::size_t i = shown.tool_calls.size(); i < m.tool_calls.size(); ++i)
        out.put(fmt::format("\n{{\"tool_call\": {{\"name\": {}, \"arguments\": {}}}}}", json::quote(m.tool_calls[i].name),
                            m.tool_calls[i].arguments));
      shown = m;
    };
    // Adds a piece; shows what can no longer begin a stop. Returns whether a stop was reached
    // (the reply ends before it, and the stop is not shown).
    const auto put = [&](const std::string& piece) {
      held += piece;
      std::size_t cut = std::string::npos;
      for (const auto& s : stop_) cut = std::min(cut, held.find(s));
      std::size_t keep = 0;
      if (cut == std::string::npos) {
        for (const auto& s : stop_)
          for (std::size_t k = std::min(s.size() - 1, held.size()); k > keep; --k)
            if (held.compare(held.size() - k, k, s, 0, k) == 0) {
              keep = k;
              break;
            }
        cut = held.size() - keep;
      }
      reply += held.substr(0, cut);
      show(false);
      const bool stopped_here = cut + keep < held.size();
      held.erase(0, stopped_here ? std::string::npos : cut);
      return stopped_here;
    };
    g_interrupted.store(false);
    auto* previous = std::signal(SIGINT, on_interrupt);
    std::int64_t n = 0;
    bool stopped = false, at_stop = false;
    std::shared_ptr<JsonConstraint> call;
    if (call_grammar_) {
      call = std::make_shared<JsonConstraint>(call_grammar_, trie_, eos_, max_tokens_);
      sampler_.set_constraint(call);
    }
    t0 = now_seconds();
    for (; n < max_tokens_; ++n) {
      if (g_interrupted.load()) {
        stopped = true;
        break;
      }
      const int token = sampler_.sample(decoder_.logits(), ids_);
      ids_.push_back(token);
      decoder_.step(token);  // the end of turn too: the next prompt's ids continue from it
      if (std::find(eos_.begin(), eos_.end(), token) != eos_.end()) break;
      // A stop string (the world format's blank line, the built-in model's end of line) ends it.
      if (put(stream.put(token))) {
        at_stop = true;
        break;
      }
      if (call && call->finished()) break;  // the call is whole: nothing may follow it
    }
    sampler_.set_constraint(nullptr);
    if (!at_stop && !put(stream.finish())) reply += held;
    show(true);
    out.finish();
    std::signal(SIGINT, previous);
    std::fputc('\n', stdout);
    if (stopped) std::fputs("[stopped]\n", stdout);
    flush_stdout();
    last_decode_ = {n, now_seconds() - t0};
    messages_.push_back({"assistant", reply});
  }

  void stats() const {
    const auto rate = [](const std::pair<std::int64_t, double>& p) {
      return double(p.first) / std::max(p.second, 1e-9);
    };
    fmt::print(stdout,
               "state: {} tokens run, {} bytes ({}){}\n"
               "last turn: {} tokens prefilled ({} kept from earlier turns) at {:.0f} tokens/s, "
               "{} generated at {:.1f} tokens/s\n"
               "conversation: {} messages; the state started again {} times (a prompt that did not "
               "extend the ids already run)\n",
               decoder_.n_tokens(), decoder_.state_bytes(), human_bytes(double(decoder_.state_bytes())),
               decoder_.state_grows() ? ", growing with the conversation (full-attention layers' "
                                        "KV cache)"
                                      : " at any length",
               last_prefill_.first, last_reused_, rate(last_prefill_), last_decode_.first,
               rate(last_decode_), messages_.size(), restarts_);
    flush_stdout();
  }

  // The state with the tokens run, and beside it (FILE.messages.json) the conversation.
  void save(const std::string& path) const {
    SessionData session;
    session.tokens = ids_;
    decoder_.save(path, &session);
    detail::write_file_atomically(path + ".messages.json", messages_json(messages_), "recur chat");
    fmt::print(stdout, "saved {} tokens to {}\n", ids_.size(), path);
    flush_stdout();
  }

  void load(const std::string& path) {
    const auto text = detail::read_file(path + ".messages.json");
    if (!text) throw ArgumentError(fmt::format("/load: {}.messages.json cannot be read", path));
    const json::Value v = json::parse(*text, "recur chat] " + path + ".messages.json: [json");
    std::vector<Message> messages;
    if (!v.is_array()) throw ArgumentError(fmt::format("/load: {}.messages.json is not a list", path));
    for (const auto& m : v.array()) {
      const json::Value* role = m.find("role");
      const json::Value* content = m.find("content");
      if (!role || !role->is_string() || !content || !content->is_string())
        throw ArgumentError(fmt::format("/load: {}.messages.json holds a message without a "
                                        "string role and content", path));
      messages.push_back({role->string(), content->string()});
    }
    SessionData session;
    decoder_.load(path, &session);  // unchanged on any error
    ids_ = std::move(session.tokens);
    messages_ = std::move(messages);
    fmt::print(stdout, "loaded {} tokens and {} messages from {}\n", ids_.size(), messages_.size(), path);
    flush_stdout();
  }

 private:
  const TextModel& tm_;
  std::shared_ptr<const ChatTemplate> template_;
  std::vector<std::string> stop_;
  Decoder decoder_;
  Sampler sampler_;
  std::shared_ptr<const JsonGrammar> call_grammar_;  // --tool-choice required or a name (else null)
  std::shared_ptr<const TokenTrie> trie_;            // the vocabulary's bytes, for call_grammar_
  std::int64_t max_tokens_;
  std::string system_;
  std::string extra_;  // the template's extra variables ({"enable_thinking": false}), or ""
  bool think_;  // --think: in RWKV's world format the prompt opens RWKV7-G1's thought ("Assistant: <think")
  ReplyFormat reply_format_;
  ReplyOptions reply_options_;
  bool dim_ = false;  // stdout is a terminal: the thought is shown dimmed
  std::vector<int> eos_;
  std::vector<Message> messages_;
  std::vector<int> ids_;  // every id the state has run, prompt and replies
  std::pair<std::int64_t, double> last_prefill_{0, 0}, last_decode_{0, 0};
  std::int64_t last_reused_ = 0;
  int restarts_ = 0;
};

}  // namespace

int run_chat(int argc, char** argv) {
  Args args("chat",
            "A conversation with a model through its own chat template (tokenizer_config.json's\n"
            "chat_template, or chat_template.jinja). Each line you type is a message; the reply\n"
            "streams as it is generated. The model's state is kept between turns, so a turn costs\n"
            "only its new tokens. Reads a terminal or a pipe.");
  args.option("model", "", "model directory with a chat template; default: the built-in model", 'm')
      .option("tokenizer", "", "tokenizer.json, or a directory that holds one (default: the model's)");
  declare_chat_template_option(args);
  args
      .option("system", "", "a system message to begin the conversation with")
      .option("tokens", "512", "the most tokens of one reply", 'n')
      .option("temperature", "0.8", "sampling temperature")
      .flag("greedy", "always the most likely token (temperature 0)")
      .option("top-k", "40", "sample among the k most likely tokens (0: all)")
      .option("top-p", "0.95", "sample within this probability mass")
      .option("repetition-penalty", "1", "divide the logits of tokens already seen")
      .option("seed", "0", "the sampler's seed")
      .option("chunk", "64", "tokens per prefill chunk (no effect on the result)")
      .option("threads", "0", "worker threads, 0: every core (no effect on the result)")
      .flag("think", "ask the template for a thought (enable_thinking=true; in RWKV's world format, RWKV7-G1's think mode)")
      .flag("no-think", "ask the template for no thought (enable_thinking=false: Qwen3.5 writes an empty one)")
      .option("tools", "", "JSON file with tools ([{\"type\": \"function\", \"function\": {...}}]) given to the "
                           "template; the model's calls to them are shown as JSON")
      .option("tool-choice", "auto", "auto: the model may call a tool; none: calls stay text; required: every reply "
                                     "is one call (held to the tools' schemas while sampling); NAME: one call to that tool")
      .excludes("greedy", "temperature")
      .excludes("think", "no-think")
      .footer("Commands, typed as a line of their own:\n"
              "  /save FILE   the state, its tokens and (FILE.messages.json) the conversation\n"
              "  /load FILE   continue a saved conversation exactly\n"
              "  /reset       start again (the system message stays)\n"
              "  /stats       tokens run, the state's bytes, what the last turn cost\n"
              "  /quit        end (so does the end of input)\n"
              "Ctrl-C during a reply stops the reply and keeps the conversation.");
  if (!args.parse(argc, argv, 2)) return 0;
  const SamplerOptions so = sampler_options(args);
  const std::int64_t max_tokens = args.integer("tokens", 1, 1 << 24);
  const DecoderOptions options = decoder_options(args);

  const TextModel tm = open_model(args);
  describe_model(tm);
  if (!tm.tokenizer)
    throw ArgumentError("recur chat needs the model's tokenizer (tokenizer.json) and chat template: "
                        "use recur generate for ids or bytes");
  const ChatFormat format =
      chat_format(args, tm, "give one with --chat-template FILE, or use recur generate for plain text");
  if (!format.none.empty()) throw ArgumentError(format.none);
  fmt::print(stderr, "chat format: {}\n", format.describe());
  const std::string extra = args.flag_set("think")      ? R"({"enable_thinking": true})"
                            : args.flag_set("no-think") ? R"({"enable_thinking": false})"
                                                        : "";
  if (args.given("tools") && !format.chat_template)
    throw ArgumentError("--tools needs a chat template (RWKV's world format has no tools)");
  const std::string tools = args.given("tools") ? read_input(args.str("tools"), "--tools", std::uint64_t(64) << 20) : "";
  const std::string tool_choice = args.str("tool-choice");
  if (tool_choice != "auto" && tool_choice != "none" && tools.empty())
    throw ArgumentError(fmt::format("--tool-choice {} needs --tools", tool_choice));
  Chat chat(tm, format, options, so, max_tokens, args.str("system"), extra, args.flag_set("think"), tools,
            tool_choice);
  const bool terminal = ::isatty(STDIN_FILENO) != 0;
  if (terminal) fmt::print(stderr, "Type a message; /quit ends, /stats, /save FILE, /load FILE, /reset.\n");
  std::string line;
  while (true) {
    if (terminal) {
      std::fputs("> ", stderr);
      std::fflush(stderr);
    }
    if (!std::getline(std::cin, line)) break;
    if (line.empty()) continue;
    try {
      if (line == "/quit") break;
      if (line == "/reset") {
        chat.reset();
        std::puts("conversation reset");
      } else if (line == "/stats") {
        chat.stats();
      } else if (line.rfind("/save ", 0) == 0) {
        chat.save(line.substr(6));
      } else if (line.rfind("/load ", 0) == 0) {
        chat.load(line.substr(6));
      } else if (line[0] == '/') {
        fmt::print(stdout, "unknown command {}: /save FILE, /load FILE, /reset, /stats, /quit\n",
                   printable(line));
      } else {
        chat.turn(line);
      }
    } catch (const Error& e) {
      // A refused command or template error leaves the conversation as it was.
      fmt::print(stdout, "error: {}\n", e.what());
    }
    flush_stdout();
  }
  return 0;
}

}  // namespace recur::cli
