// The serving library's engine (recur serve's HTTP front end, in tools/, is above it): one
// thread that runs every admitted request through the model with continuous batching. Each turn of its loop admits waiting requests into free slots, then runs
// one BatchDecoder call that holds every decoding sequence's next token and up to one chunk of
// prompt tokens shared among the prefilling ones (so that a long prompt never stalls the streams
// already running, and new requests start within a turn or two), and samples each sequence's
// next token. A request's tokens and logprobs are the same bytes whatever else runs with
// it: prefill is exact in any chunking, the batched step gives each row the bytes of a step
// alone, and each request samples from its own seeded stream.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "recur/json_constraint.h"
#include "recur/json_schema.h"
#include "recur/model.h"
#include "recur/sampling.h"
#include "recur/tokenizer.h"
#include "serve/prompt_index.h"
#include "serve/stop.h"
#include "serve/store.h"

namespace recur::serve {

/// A completion request, checked and tokenized.
struct Request {
  std::vector<int> prompt;
  std::string previous_id;  ///< continue this conversation ("": a new one)
  std::int64_t max_tokens = 16;
  SamplerOptions sampler;
  std::vector<std::string> stop;
  int logprobs = -1;  ///< alternatives to list per token; -1: no logprobs
  bool ignore_eos = false;
  bool return_token_ids = false;  ///< the response lists the prompt's and the completion's ids
  /// More ids that end the response as an end-of-sequence id does (a chat template's end of
  /// turn, <|im_end|>); ignore_eos ignores them too.
  std::vector<int> end_ids;
  /// The chat API's mode: `prompt` is the whole conversation, and the kept state's tokens (saved
  /// with it, see SessionData) are reused only when they begin `prompt`: then only the rest is
  /// prefilled; otherwise the conversation starts fresh from `prompt`. The state kept at the
  /// end holds its tokens too.
  bool whole_prompt = false;
  /// whole_prompt: how many of `prompt`'s tokens end its last whole message (the conversation
  /// rendered without the generation prompt; 0: none). The state there is kept with the reply's
  /// as a checkpoint, since a later render may lay out what follows differently (a thinking
  /// template drops the reply's reasoning once another turn comes).
  std::size_t checkpoint = 0;
  /// Structured output (null: none): only tokens that keep the text a prefix of a value of it
  /// are drawn, the end ids only once the value is whole, and the response ends ("stop") when
  /// nothing may follow. Within max_tokens the value closes (see JsonConstraint).
  std::shared_ptr<const JsonGrammar> grammar;
  /// `previous_id` was not named by the client but found by its prompt's ids (PromptIndex): a
  /// state that cannot be read then starts the conversation fresh instead of failing it.
  bool found_by_prompt = false;
};

/// One generated token as the response reports it.
struct Token {
  int id = 0;
  std::string text;     ///< this token's own text (for logprobs)
  double logprob = 0;   ///< log softmax of the logits over the ids that may be drawn, in float64
  std::vector<std::pair<int, double>> top;  ///< the most likely ids and their logprobs
};

/// What a request produced so far; the engine appends and the front end reads under `mutex`.
struct Job {
  Request request;
  std::string id;  ///< the response id, under which its final state is kept
  std::string owner;  ///< the owner tag its state is kept with ("" none; see recur/serve/auth.h)
  /// The state of the conversation `request.previous_id` names, read from the store before the
  /// job is submitted: the engine's thread never waits for the store.
  std::string previous_state;
  std::int64_t created = 0;

  std::mutex mutex;
  std::condition_variable changed;
  std::string text;           ///< text released so far (held back while it may begin a stop)
  std::vector<Token> tokens;  ///< every generated token (with logprobs when asked)
  std::vector<std::size_t> text_offsets;  ///< where each token's text starts in `text`
  bool finished = false;
  std::string finish_reason;  ///< "stop" or "length"
  int error_status = 0;       ///< non-zero: failed, with the HTTP status a front end answers
  std::string error_type, error_message;
  std::int64_t prompt_tokens = 0;
  std::int64_t cached_tokens = 0;      ///< prompt tokens taken from the kept state (whole_prompt)
  std::int64_t completion_tokens = 0;  ///< tokens sampled, an end-of-sequence one included
  std::vector<int> token_ids;          ///< every token sampled, an end-of-sequence one included

  std::atomic<bool> cancelled{false};  ///< set by the client side: free the slot, keep nothing
};

struct EngineOptions {
  int max_batch = 64;        ///< sequences decoding at once
  int max_queue = 256;       ///< requests waiting for a slot before 429
  int chunk = 64;            ///< prefill tokens per turn of the loop
  int threads = 0;
  /// Checkpoints kept per conversation beside the state after the reply (the states at the end
  /// of earlier prompts' last messages; the oldest dropped first). 0: none.
  int max_checkpoints = 1;
  /// Chat responses whose kept states a resent conversation (no previous_response_id) is looked
  /// up among, by its prompt's ids (PromptIndex; the oldest forgotten first). 0: none.
  std::size_t prompt_index = 4096;
};

/// Counters for /metrics.
struct EngineStats {
  std::int64_t requests_admitted = 0, requests_finished = 0, requests_cancelled = 0,
               requests_failed = 0, prompt_tokens = 0, generated_tokens = 0, batch_steps = 0,
               batch_rows = 0;
  int running = 0, waiting = 0, last_batch = 0;
};

class Engine {
 public:
  Engine(std::shared_ptr<const Model> model, std::shared_ptr<const Tokenizer> tokenizer,
         ConversationStore& store, const EngineOptions& options);
  ~Engine();

  /// Queues a job. Returns false when the queue is full or the engine is draining.
  bool submit(const std::shared_ptr<Job>& job);
  /// Stops admitting; requests running get until `deadline_seconds` from now to finish and are
  /// cancelled after it; waiting ones are refused (503). Returns at once; join() waits for the
  /// loop to stop.
  void drain(double deadline_seconds);
  void join();
  bool draining() const { return draining_.load(); }

  EngineStats stats() const;
  std::size_t active_bytes() const;  ///< the slots' decoders and the batch's workspace
  const Model& model() const { return *model_; }
  const EngineOptions& options() const { return options_; }
  /// The text of one token for logprobs (a lone byte of a UTF-8 sequence as "bytes:\xNN").
  std::string token_text(int id) const;
  /// Where a chat request without previous_response_id finds a kept state by its prompt's ids.
  PromptIndex& prompt_index() { return index_; }

 private:
  struct Slot;
  void loop();
  void admit(Slot& slot, std::shared_ptr<Job> job);
  void turn();
  bool after_token(Slot& slot, int token);  // returns whether the request is finished
  void finish(const std::vector<Slot*>& slots);
  void fail(Slot& slot, int status, const std::string& type, const std::string& message);
  void release(Slot& slot);
  void add_checkpoint(Slot& slot);
  void keep_loop();

  std::shared_ptr<const Model> model_;
  std::shared_ptr<const Tokenizer> tokenizer_;
  std::shared_ptr<const TokenMask> mask_;  // the ids tokenizer_ decodes (null: every id)
  std::shared_ptr<const TokenTrie> trie_;  // the vocabulary's bytes, made for the first schema
  ConversationStore& store_;
  EngineOptions options_;
  PromptIndex index_;
  BatchDecoder batch_;
  std::vector<std::unique_ptr<Slot>> slots_;
  std::size_t next_prefill_ = 0;

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::shared_ptr<Job>> queue_;
  std::atomic<bool> draining_{false}, stop_{false};
  double deadline_ = 0;
  EngineStats stats_;

  // Finished requests' states on their way to the store.
  struct Keep {
    std::shared_ptr<Job> job;
    std::string bytes;
    std::int64_t generated = 0;
    std::vector<std::pair<std::size_t, std::uint64_t>> index_keys;  // chat: its boundaries' hashes
  };
  std::mutex keep_mutex_;
  std::condition_variable keep_wake_;
  std::deque<Keep> keep_queue_;
  bool keep_stop_ = false;
  std::thread keeper_;
  std::thread thread_;
};

}  // namespace recur::serve
