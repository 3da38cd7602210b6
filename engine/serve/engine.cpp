#include "serve/engine.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cassert>
#include <chrono>
#include <cmath>
#include <optional>

#include "recur/error.h"
#include "text/unicode.h"
#include "util/parallel.h"

namespace recur::serve {

namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// A chat conversation's kept bytes: the state after the reply, and the checkpoints before it
// (each the state at the end of an earlier prompt's last whole message, with the number of
// tokens it covers, shortest first). Stored as "recurkp1", a u32 count, then per checkpoint a
// u64 token count, a u64 size and its bytes, then the final state to the end. Bytes without the
// header are a final state alone (every state kept before checkpoints were, and the
// completions API's).
constexpr std::string_view kKeptMagic = "recurkp1";
using Checkpoint = std::pair<std::int64_t, std::string>;  // (tokens covered, Decoder::save_bytes)

void put_u64(std::string& out, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(char((v >> (8 * i)) & 0xff));
}

std::string pack_kept(std::string final_state, const std::vector<Checkpoint>& checkpoints) {
  if (checkpoints.empty()) return final_state;
  std::size_t size = kKeptMagic.size() + 4 + final_state.size();
  for (const auto& c : checkpoints) size += 16 + c.second.size();
  std::string out;
  out.reserve(size);
  out += kKeptMagic;
  const auto n = static_cast<std::uint32_t>(checkpoints.size());
  for (int i = 0; i < 4; ++i) out.push_back(char((n >> (8 * i)) & 0xff));
  for (const auto& c : checkpoints) {
    put_u64(out, static_cast<std::uint64_t>(c.first));
    put_u64(out, c.second.size());
    out += c.second;
  }
  out += final_state;
  return out;
}

// The final state's bytes (a view into `blob`) and the checkpoints; throws FormatError when the
// container is cut short.
std::string_view unpack_kept(const std::string& blob, std::vector<Checkpoint>* checkpoints) {
  const std::string_view all(blob);
  if (all.substr(0, kKeptMagic.size()) != kKeptMagic) return all;
  std::size_t at = kKeptMagic.size();
  auto need = [&](std::size_t n) {
    if (all.size() - at < n)
      throw FormatError(fmt::format("kept conversation: {} bytes, cut short at byte {} (needs {} more)",
                                    all.size(), at, n));
  };
  auto read = [&](int bytes) {
    need(std::size_t(bytes));
    std::uint64_t v = 0;
    for (int i = 0; i < bytes; ++i) v |= std::uint64_t(static_cast<unsigned char>(all[at + std::size_t(i)])) << (8 * i);
    at += std::size_t(bytes);
    return v;
  };
  const auto n = read(4);
  for (std::uint64_t i = 0; i < n; ++i) {
    const auto tokens = static_cast<std::int64_t>(read(8));
    const auto size = static_cast<std::size_t>(read(8));
    need(size);
    if (checkpoints) checkpoints->emplace_back(tokens, std::string(all.substr(at, size)));
    at += size;
  }
  return all.substr(at);
}

}  // namespace

struct Engine::Slot {
  enum class Phase { kIdle, kPrefill, kDecode, kFinishing };
  Phase phase = Phase::kIdle;
  std::shared_ptr<Job> job;
  Decoder decoder;
  std::vector<int> todo;  // prompt tokens still to prefill
  std::size_t done = 0;
  std::optional<Sampler> sampler;
  int pending = 0;        // the token to feed at the next batched step
  std::int64_t generated = 0;
  std::optional<DecodeStream> stream;  // with a tokenizer
  text::Utf8Stream bytes;              // without one: bytes to UTF-8, U+FFFD for what is not
  StopSequences stop;                  // holds back text that may begin a stop sequence
  std::string failure;                 // set by the parallel sampling or saving, handled after it
  std::vector<int> history;            // whole_prompt: the tokens of the state before this turn's
  std::vector<Checkpoint> checkpoints;  // whole_prompt: kept with the final state, shortest first
  std::size_t checkpoint_at = 0;        // todo's tokens before the new checkpoint (0: none to take)

  Slot(std::shared_ptr<const Model> model, const DecoderOptions& o) : decoder(std::move(model), o) {}
};

Engine::Engine(std::shared_ptr<const Model> model, std::shared_ptr<const Tokenizer> tokenizer,
               ConversationStore& store, const EngineOptions& options)
    : model_(std::move(model)),
      tokenizer_(std::move(tokenizer)),
      mask_(tokenizer_ ? tokenizer_->sample_mask(model_->config().vocab_size) : nullptr),
      store_(store),
      options_(options),
      index_(options.prompt_index),
      batch_(model_, options.threads) {
  for (int i = 0; i < options_.max_batch; ++i)
    slots_.push_back(std::make_unique<Slot>(model_, DecoderOptions{options_.chunk, options_.threads}));
  keeper_ = std::thread([this] { keep_loop(); });
  thread_ = std::thread([this] { loop(); });
}

Engine::~Engine() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  join();
}

bool Engine::submit(const std::shared_ptr<Job>& job) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (draining_ || int(queue_.size()) >= options_.max_queue) return false;
    queue_.push_back(job);
    stats_.waiting = int(queue_.size());
  }
  wake_.notify_all();
  return true;
}

void Engine::drain(double deadline_seconds) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    deadline_ = now() + deadline_seconds;
    draining_ = true;
  }
  wake_.notify_all();
}

void Engine::join() {
  if (thread_.joinable()) thread_.join();
  // Then the states still queued are kept, and the keeper stops.
  {
    std::lock_guard<std::mutex> lock(keep_mutex_);
    keep_stop_ = true;
  }
  keep_wake_.notify_all();
  if (keeper_.joinable()) keeper_.join();
}

EngineStats Engine::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

std::size_t Engine::active_bytes() const {
  std::size_t n = batch_.bytes();
  for (const auto& s : slots_) n += s->decoder.bytes();
  return n;
}

std::string Engine::token_text(int id) const {
  // Past the bytes (a model with a larger vocabulary and no tokenizer): the id itself. A
  // tokenizer's mask keeps ids it cannot decode out of the samples and the logprobs.
  if (tokenizer_ && tokenizer_->has_id(id)) return text::utf8_lossy(tokenizer_->decode({id}));
  if (tokenizer_ || id >= ByteTokenizer::kVocab) return fmt::format("<|{}|>", id);
  const auto b = static_cast<unsigned char>(id);
  if (b < 0x80) return std::string(1, char(b));
  return fmt::format("bytes:\\x{:02x}", b);
}

namespace {
void publish(Job& job, const std::function<void(Job&)>& change) {
  {
    std::lock_guard<std::mutex> lock(job.mutex);
    change(job);
  }
  job.changed.notify_all();
}
}  // namespace

void Engine::fail(Slot& slot, int status, const std::string& type, const std::string& message) {
  publish(*slot.job, [&](Job& j) {
    j.error_status = status;
    j.error_type = type;
    j.error_message = message;
    j.finished = true;
  });
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++stats_.requests_failed;
  }
  release(slot);
}

void Engine::release(Slot& slot) {
  slot.job.reset();
  slot.phase = Slot::Phase::kIdle;
  slot.todo.clear();
  slot.stream.reset();
  slot.sampler.reset();
  slot.stop.reset({});
  slot.bytes.finish();
  slot.history.clear();
  slot.checkpoints.clear();
  slot.checkpoint_at = 0;
}

void Engine::admit(Slot& slot, std::shared_ptr<Job> job) {
  slot.job = std::move(job);
  const Request& r = slot.job->request;
  slot.decoder.reset();
  slot.history.clear();
  slot.checkpoints.clear();
  slot.checkpoint_at = 0;
  std::size_t cached = 0;
  if (!r.previous_id.empty()) {
    SessionData session;
    std::vector<Checkpoint> kept_checkpoints;
    try {
      const std::string_view final_state = unpack_kept(slot.job->previous_state, &kept_checkpoints);
      slot.decoder.load_bytes(final_state, "conversation " + r.previous_id, &session);
    } catch (const std::exception& e) {
      if (!r.found_by_prompt) {
        fail(slot, 409, "invalid_request_error", fmt::format("previous_response_id '{}' cannot be continued: {}", r.previous_id, e.what()));
        return;
      }
      // A state the client did not name: the conversation starts fresh, as without the index.
      spdlog::warn("conversation {} found by its prompt cannot be continued: {}", r.previous_id, e.what());
      slot.decoder.reset();
      kept_checkpoints.clear();
      session.tokens.clear();
    }
    // The decoder holds it now; the job need not.
    std::string().swap(slot.job->previous_state);
    if (r.whole_prompt) {
      // The kept state serves only a prompt that extends it token for token (a state kept by
      // the completions API holds no tokens, and an edited history does not extend it).
      const auto& kept = session.tokens;
      auto begins_prompt = [&](std::size_t n) {
        return n <= kept.size() && n <= r.prompt.size() && std::equal(kept.begin(), kept.begin() + std::ptrdiff_t(n), r.prompt.begin());
      };
      const bool extends = !kept.empty() && std::int64_t(kept.size()) == slot.decoder.n_tokens() && begins_prompt(kept.size());
      if (extends) {
        cached = kept.size();
      } else {
        // Else the longest checkpoint whose tokens (a prefix of the kept ones) begin the prompt:
        // the end of an earlier prompt's last message, before a reply that this render writes
        // differently.
        slot.decoder.reset();
        for (auto c = kept_checkpoints.rbegin(); c != kept_checkpoints.rend(); ++c) {
          if (c->first <= 0 || !begins_prompt(std::size_t(c->first))) continue;
          SessionData at;
          try {
            slot.decoder.load_bytes(c->second, "conversation " + r.previous_id + "'s checkpoint", &at);
          } catch (const std::exception& e) {
            if (!r.found_by_prompt) {
              fail(slot, 409, "invalid_request_error", fmt::format("previous_response_id '{}' cannot be continued: {}", r.previous_id, e.what()));
              return;
            }
            slot.decoder.reset();
            continue;
          }
          if (slot.decoder.n_tokens() != c->first || std::int64_t(at.tokens.size()) != c->first) {
            slot.decoder.reset();
            continue;
          }
          cached = std::size_t(c->first);
          break;
        }
      }
      // The checkpoints within what is reused begin this prompt too: they stay with the
      // conversation.
      for (auto& c : kept_checkpoints)
        if (c.first > 0 && std::size_t(c.first) <= cached) slot.checkpoints.push_back(std::move(c));
    }
  }
  if (r.prompt.empty() && slot.decoder.n_tokens() == 0) {
    fail(slot, 400, "invalid_request_error", "the prompt is empty and no conversation is continued");
    return;
  }
  if (r.whole_prompt) {
    slot.history = r.prompt;
    slot.todo.assign(r.prompt.begin() + std::ptrdiff_t(cached), r.prompt.end());
    if (options_.max_checkpoints > 0 && r.checkpoint > 0 && r.checkpoint < r.prompt.size()) {
      if (r.checkpoint > cached) {
        slot.checkpoint_at = r.checkpoint - cached;  // taken by turn() when the prefill gets there
      } else if (r.checkpoint == cached &&
                 (slot.checkpoints.empty() || slot.checkpoints.back().first != std::int64_t(cached))) {
        add_checkpoint(slot);  // the state it starts from is the end of the last message
      }
    }
  } else {
    slot.todo = r.prompt;
  }
  slot.done = 0;
  slot.generated = 0;
  SamplerOptions sampling = r.sampler;
  sampling.threads = options_.threads;  // a draw alone splits its passes; draws side by side do not
  slot.sampler.emplace(sampling);
  // Ids the tokenizer cannot decode (a head wider than the vocabulary) are never drawn.
  slot.sampler->set_mask(mask_);
  if (r.grammar && r.max_tokens > 0) {
    const int V = model_->config().vocab_size;
    if (!trie_) {
      if (tokenizer_) {
        trie_ = TokenTrie::build(*tokenizer_, V);
      } else {
        std::vector<std::string> bytes(static_cast<std::size_t>(std::min(V, ByteTokenizer::kVocab)));
        for (std::size_t b = 0; b < bytes.size(); ++b) bytes[b] = std::string(1, char(b));
        trie_ = TokenTrie::from_bytes(bytes);
      }
    }
    std::vector<int> ends;
    if (!r.ignore_eos) {
      ends = model_->config().eos_token_ids;
      ends.insert(ends.end(), r.end_ids.begin(), r.end_ids.end());
    }
    try {
      slot.sampler->set_constraint(std::make_shared<JsonConstraint>(r.grammar, trie_, ends, r.max_tokens));
    } catch (const ArgumentError& e) {
      fail(slot, 400, "invalid_request_error", e.what());
      return;
    }
  }
  slot.stop.reset(r.stop);
  if (tokenizer_) {
    slot.stream.emplace(tokenizer_);
    // The context before the new text, so that a decoder that treats the first token specially
    // (a stripped leading space) does not.
    const std::size_t context = std::min<std::size_t>(r.prompt.size(), 8);
    for (std::size_t i = r.prompt.size() - context; i < r.prompt.size(); ++i) slot.stream->put(r.prompt[i]);
  }
  publish(*slot.job, [&](Job& j) {
    j.prompt_tokens = std::int64_t(r.prompt.size());
    j.cached_tokens = std::int64_t(cached);
  });
  slot.phase = Slot::Phase::kPrefill;
  std::lock_guard<std::mutex> lock(mutex_);
  ++stats_.requests_admitted;
  stats_.prompt_tokens += std::int64_t(slot.todo.size());
}

// The slot's state now, at the end of its prompt's last whole message, kept as a checkpoint; the
// oldest go past --max-checkpoints. A copy of the state (megabytes, and a hybrid's KV at this
// length), taken on the engine's thread once per request.
void Engine::add_checkpoint(Slot& slot) {
  const Request& r = slot.job->request;
  const auto n = static_cast<std::size_t>(slot.decoder.n_tokens());
  assert(n <= r.prompt.size());
  SessionData session;
  session.tokens.assign(r.prompt.begin(), r.prompt.begin() + std::ptrdiff_t(n));
  slot.checkpoints.emplace_back(std::int64_t(n), slot.decoder.save_bytes(&session));
  const auto max = static_cast<std::size_t>(options_.max_checkpoints);
  if (slot.checkpoints.size() > max)
    slot.checkpoints.erase(slot.checkpoints.begin(), slot.checkpoints.end() - std::ptrdiff_t(max));
}

// The text a new token releases, and whether it ends the request. Runs on worker threads, one
// slot each: it touches only this slot and its job.
bool Engine::after_token(Slot& slot, int token) {
  Job& job = *slot.job;
  const Request& r = job.request;
  ++slot.generated;
  const auto& eos = model_->config().eos_token_ids;
  if (!r.ignore_eos && (std::find(eos.begin(), eos.end(), token) != eos.end() ||
                        std::find(r.end_ids.begin(), r.end_ids.end(), token) != r.end_ids.end())) {
    // What the text stream still holds (a cut-short character) may complete a stop sequence.
    std::string rest = slot.stop.put(slot.stream ? slot.stream->finish() : slot.bytes.finish());
    rest += slot.stop.finish();
    publish(job, [&](Job& j) {
      j.text += rest;
      j.finish_reason = "stop";
      j.completion_tokens += 1;
      j.token_ids.push_back(token);
    });
    return true;
  }
  Token t;
  t.id = token;
  if (r.logprobs >= 0) {
    // Over the ids that may be drawn alone (the mask's): their probabilities sum to 1, and an
    // id the tokenizer cannot decode is never listed.
    const auto logits = slot.decoder.logits();
    const int V = int(logits.size());
    const TokenMask* mask = mask_.get();
    const double lse = log_normalizer(logits.data(), V, mask);
    t.logprob = double(logits[token]) - lse;
    if (r.logprobs > 0) {
      std::vector<int> order;
      order.reserve(static_cast<std::size_t>(V));
      for (int i = 0; i < V; ++i)
        if (!mask || mask->allows(i)) order.push_back(i);
      const auto n = std::min<std::size_t>(std::size_t(r.logprobs), order.size());
      std::partial_sort(order.begin(), order.begin() + std::ptrdiff_t(n), order.end(), [&](int a, int b) {
        return logits[a] != logits[b] ? logits[a] > logits[b] : a < b;
      });
      for (std::size_t i = 0; i < n; ++i) t.top.emplace_back(order[i], double(logits[order[i]]) - lse);
    }
    t.text = token_text(token);
  }
  // Ids past the bytes (a model with a larger vocabulary and no tokenizer) are written as
  // <|id|> through the same stream, so that they end a sequence they interrupt.
  std::string piece = slot.stream ? slot.stream->put(token)
                      : token < ByteTokenizer::kVocab ? slot.bytes.put(std::string(1, char(token)))
                                                      : slot.bytes.put(fmt::format("<|{}|>", token));
  // A stop sequence ends the text before it; text that may be the start of one waits.
  std::string release_text = slot.stop.put(piece);
  bool finished = slot.stop.stopped();
  std::string reason = finished ? "stop" : "";
  // A structured output whose value is whole and can take no more bytes ends here.
  const bool value_done = slot.sampler->constraint() && slot.sampler->constraint()->finished();
  if (!finished && (value_done || slot.generated >= r.max_tokens)) {
    finished = true;
    release_text += slot.stop.put(slot.stream ? slot.stream->finish() : slot.bytes.finish());
    reason = value_done || slot.stop.stopped() ? "stop" : "length";
    release_text += slot.stop.finish();
  }
  publish(job, [&](Job& j) {
    j.text_offsets.push_back(j.text.size());
    j.text += release_text;
    j.tokens.push_back(std::move(t));
    j.completion_tokens += 1;
    j.token_ids.push_back(token);
    if (finished) j.finish_reason = reason;
  });
  return finished;
}

// The slots whose responses ended this turn. Their states are saved here, one slot at a time
// on each of the engine's threads (a state is megabytes: copied, hashed and new memory, while
// every stream waits for the next turn), and the slots are then free at once. Each state goes to
// the store on the keeper thread (a write to Redis or a file takes milliseconds that the batch
// should not wait for), and the response ends only once the state is kept.
void Engine::finish(const std::vector<Slot*>& slots) {
  const int n = static_cast<int>(slots.size());
  if (n == 0) return;
  std::vector<Keep> keeps(slots.size());
  const int threads = std::max(1, std::min(detail::resolve_threads(options_.threads), n));
  detail::parallel_ranges(n, threads, [&](int begin, int end, int) {
    for (int i = begin; i < end; ++i) {
      Slot& s = *slots[std::size_t(i)];
      try {
        if (s.job->request.whole_prompt) {
          // The tokens go with the state, so that the next turn can tell whether its prompt
          // extends them. The job's ids are written on the engine's thread alone (this one).
          SessionData session;
          session.tokens = s.history;
          session.tokens.insert(session.tokens.end(), s.job->token_ids.begin(), s.job->token_ids.end());
          keeps[std::size_t(i)].bytes = pack_kept(s.decoder.save_bytes(&session), s.checkpoints);
          // Where a resent conversation may continue from: the end of the state after the reply,
          // and each checkpoint's.
          std::vector<std::size_t> lengths{session.tokens.size()};
          for (const auto& c : s.checkpoints) lengths.push_back(std::size_t(c.first));
          keeps[std::size_t(i)].index_keys = index_.keys(s.job->owner, session.tokens, lengths);
        } else {
          keeps[std::size_t(i)].bytes = s.decoder.save_bytes();
        }
      } catch (const std::exception& e) {
        s.failure = e.what();
      }
    }
  });
  bool queued = false;
  for (std::size_t i = 0; i < slots.size(); ++i) {
    Slot& slot = *slots[i];
    if (!slot.failure.empty()) {
      const std::string why = std::move(slot.failure);
      slot.failure.clear();
      fail(slot, 500, "server_error", fmt::format("the conversation could not be kept: {}", why));
      continue;
    }
    Keep& k = keeps[i];
    k.job = slot.job;
    k.generated = slot.generated;
    release(slot);
    {
      std::lock_guard<std::mutex> lock(keep_mutex_);
      keep_queue_.push_back(std::move(k));
    }
    queued = true;
  }
  if (queued) keep_wake_.notify_all();
}

void Engine::keep_loop() {
  std::unique_lock<std::mutex> lock(keep_mutex_);
  for (;;) {
    keep_wake_.wait(lock, [&] { return keep_stop_ || !keep_queue_.empty(); });
    if (keep_queue_.empty()) break;  // stopping, and nothing left to keep
    Keep k = std::move(keep_queue_.front());
    keep_queue_.pop_front();
    lock.unlock();
    bool kept = true;
    try {
      store_.put(k.job->id, std::move(k.bytes), k.job->owner);
    } catch (const std::exception& e) {
      kept = false;
      publish(*k.job, [&](Job& j) {
        j.error_status = 500;
        j.error_type = "server_error";
        j.error_message = fmt::format("the conversation could not be kept: {}", e.what());
        j.finished = true;
      });
    }
    if (kept) {
      // Indexed before the response ends, so that the client's next request finds it.
      if (!k.index_keys.empty()) index_.add(k.job->id, k.job->owner, std::move(k.index_keys));
      publish(*k.job, [](Job& j) { j.finished = true; });
    }
    {
      std::lock_guard<std::mutex> stats_lock(mutex_);
      if (kept) {
        ++stats_.requests_finished;
        stats_.generated_tokens += k.generated;
      } else {
        ++stats_.requests_failed;
      }
    }
    lock.lock();
  }
}

// One pass of the model for every slot that has work: each decoding slot's next token, and up
// to `chunk` prompt tokens shared among the prefilling slots in turn, all in one BatchDecoder
// call, so the weights are read once per turn. Then each slot whose tokens are all in samples
// its next token.
void Engine::turn() {
  std::vector<Slot*> active;
  std::vector<BatchDecoder::Item> items;
  for (auto& s : slots_)
    if (s->phase == Slot::Phase::kDecode || s->phase == Slot::Phase::kFinishing) {
      active.push_back(s.get());
      items.push_back({&s->decoder, &s->pending, 1});
    }
  const std::size_t n_slots = slots_.size();
  int budget = options_.chunk;
  std::size_t last_served = next_prefill_;
  for (std::size_t k = 0; k < n_slots && budget > 0; ++k) {
    const std::size_t at = (next_prefill_ + k) % n_slots;
    Slot& s = *slots_[at];
    if (s.phase != Slot::Phase::kPrefill) continue;
    // A chunk ends at the checkpoint, so that the state there can be kept.
    const std::size_t until = s.checkpoint_at > s.done ? s.checkpoint_at : s.todo.size();
    const int count = int(std::min<std::size_t>(until - s.done, std::size_t(budget)));
    if (count == 0) {  // a continuation with no new tokens: its logits are already there
      active.push_back(&s);
      continue;
    }
    active.push_back(&s);
    items.push_back({&s.decoder, s.todo.data() + s.done, count});
    s.done += std::size_t(count);
    budget -= count;
    last_served = at;
  }
  next_prefill_ = (last_served + 1) % n_slots;
  if (active.empty()) return;
  if (!items.empty()) {
    try {
      batch_.run(items);
    } catch (const std::exception& e) {
      // Arguments the engine built itself: a bug, not the requests' fault; fail them all.
      for (Slot* s : active) fail(*s, 500, "server_error", fmt::format("internal error: {}", e.what()));
      return;
    }
  }
  int rows = 0;
  for (const auto& it : items) rows += it.count;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++stats_.batch_steps;
    stats_.batch_rows += rows;
    stats_.last_batch = rows;
  }
  std::vector<Slot*> sampling, finishing;
  for (Slot* s : active) {
    if (!s->decoder.failure().empty()) {
      fail(*s, 500, "server_error", fmt::format("the model failed on this request: {}", s->decoder.failure()));
    } else if (s->phase == Slot::Phase::kFinishing) {
      finishing.push_back(s);
    } else if (s->phase == Slot::Phase::kPrefill) {
      if (s->checkpoint_at > 0 && s->done == s->checkpoint_at) {
        s->checkpoint_at = 0;
        try {
          add_checkpoint(*s);
        } catch (const std::exception& e) {
          fail(*s, 500, "server_error", fmt::format("the conversation could not be kept: {}", e.what()));
          continue;
        }
      }
      if (s->done < s->todo.size()) continue;  // more of the prompt next turn
      if (s->job->request.max_tokens == 0) {
        publish(*s->job, [](Job& j) { j.finish_reason = "length"; });
        finishing.push_back(s);
        continue;
      }
      s->phase = Slot::Phase::kDecode;
      sampling.push_back(s);
    } else {
      sampling.push_back(s);
    }
  }
  finish(finishing);
  // Each slot samples from its own logits and stream: the split over threads changes nothing.
  const int n = int(sampling.size());
  const int threads = std::min(detail::resolve_threads(options_.threads), n);
  detail::parallel_ranges(n, std::max(threads, 1), [&](int begin, int end, int) {
    for (int i = begin; i < end; ++i) {
      Slot& s = *sampling[std::size_t(i)];
      try {
        const int token = s.sampler->sample(s.decoder.logits(), {});
        s.pending = token;
        if (after_token(s, token)) s.phase = Slot::Phase::kFinishing;
      } catch (const std::exception& e) {
        s.failure = e.what();
      }
    }
  });
  for (Slot* s : sampling)
    if (!s->failure.empty()) {
      const std::string why = std::move(s->failure);
      s->failure.clear();
      fail(*s, 500, "server_error", why);
    }
}

void Engine::loop() {
  for (;;) {
    std::vector<std::shared_ptr<Job>> admitted, refused;
    bool any_active = false;
    for (const auto& s : slots_) any_active |= s->phase != Slot::Phase::kIdle;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      if (!any_active)
        wake_.wait(lock, [&] { return stop_ || draining_ || !queue_.empty(); });
      if (stop_) break;
      if (draining_) {
        refused.assign(queue_.begin(), queue_.end());
        queue_.clear();
      }
      std::size_t free_slots = 0;
      for (const auto& s : slots_) free_slots += s->phase == Slot::Phase::kIdle;
      while (free_slots > 0 && !queue_.empty()) {
        admitted.push_back(std::move(queue_.front()));
        queue_.pop_front();
        --free_slots;
      }
      stats_.waiting = int(queue_.size());
    }
    for (auto& job : refused)
      publish(*job, [](Job& j) {
        j.error_status = 503;
        j.error_type = "server_error";
        j.error_message = "the server is shutting down";
        j.finished = true;
      });
    // Requests whose client has gone free their slot at once.
    for (auto& s : slots_)
      if (s->phase != Slot::Phase::kIdle && s->job->cancelled.load()) {
        publish(*s->job, [](Job& j) { j.finished = true; });
        release(*s);
        std::lock_guard<std::mutex> lock(mutex_);
        ++stats_.requests_cancelled;
      }
    for (auto& job : admitted) {
      if (job->cancelled.load()) {  // gone before it started: nothing to run, nothing to keep
        publish(*job, [](Job& j) { j.finished = true; });
        std::lock_guard<std::mutex> lock(mutex_);
        ++stats_.requests_cancelled;
        continue;
      }
      for (auto& s : slots_)
        if (s->phase == Slot::Phase::kIdle) {
          admit(*s, std::move(job));
          break;
        }
    }
    if (draining_ && now() > deadline_)
      for (auto& s : slots_)
        if (s->phase != Slot::Phase::kIdle)
          fail(*s, 503, "server_error", "the server shut down before the request finished");
    try {
      turn();
    } catch (const std::exception& e) {
      // Out of memory or a bug: the requests running now fail, the server goes on.
      spdlog::error("engine: {}", e.what());
      for (auto& s : slots_)
        if (s->phase != Slot::Phase::kIdle) fail(*s, 500, "server_error", fmt::format("internal error: {}", e.what()));
    }
    int running = 0;
    for (const auto& s : slots_) running += s->phase != Slot::Phase::kIdle;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stats_.running = running;
      if (draining_ && running == 0) break;
    }
  }
}

}  // namespace recur::serve
