// The serving library (engine/serve, include/recur/serve) without a socket: the scheduler's
// admission and cancellation, the stop sequences' hold-back, the conversation store's eviction
// and owner check, the stored format, ids and API keys, and the UTF-8 stream every response's
// text goes through.
#include <catch2/catch.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "model/random_weights.h"
#include "recur/model.h"
#include "recur/sampling.h"
#include "recur/tokenizer.h"
#include "serve/auth.h"
#include "serve/engine.h"
#include "serve/prompt_index.h"
#include "serve/stop.h"
#include "serve/store.h"
#include "support/temp_dir.h"
#include "text/unicode.h"

using recur::serve::ConversationStore;
using recur::serve::Engine;
using recur::serve::Job;
using recur::serve::StopSequences;

namespace {
const std::string kOwnerA = recur::serve::owner_tag("key-a"), kOwnerB = recur::serve::owner_tag("key-b");
}  // namespace

TEST_CASE("the UTF-8 stream gives utf8_lossy of the whole input however it is split", "[serve][utf8]") {
  const std::string inputs[] = {"a\xE0\x8A\xA7z", "\xF4\xAF\x80\x80", "\xED\xA0\x80", "\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80",
                                "\xE2\x82", "\xF0\x9F\x98", "x\xC3", "\xFF\xFE\x80", "\xE0\xA0\x80\xC2"};
  for (const auto& s : inputs)
    for (std::size_t step = 1; step <= 4; ++step) {
      recur::text::Utf8Stream stream;
      std::string out;
      for (std::size_t i = 0; i < s.size(); i += step) {
        const std::string piece = stream.put(s.substr(i, step));
        CHECK(recur::text::invalid_utf8_at(piece) == std::string::npos);
        out += piece;
      }
      out += stream.finish();
      CHECK(out == recur::text::utf8_lossy(s));
    }
}

TEST_CASE("the UTF-8 stream holds back a split sequence until its last byte", "[serve][utf8]") {
  recur::text::Utf8Stream stream;
  CHECK(stream.put("\xE2") == "");
  CHECK(stream.put("\x82") == "");
  CHECK(stream.pending() == 2);
  CHECK(stream.put("\xAC!") == "\xE2\x82\xAC!");
  recur::text::Utf8Stream escaped(recur::text::Utf8Stream::Invalid::kEscape);
  CHECK(escaped.put("a\xE0\x8A") == "a\\xe0\\x8a");
}

TEST_CASE("response ids are cmpl- and 128 random bits, never repeated", "[serve][auth]") {
  std::set<std::string> ids;
  for (int i = 0; i < 2000; ++i) {
    const std::string id = recur::serve::new_response_id();
    REQUIRE(id.size() == 5 + 32);
    CHECK(id.compare(0, 5, "cmpl-") == 0);
    CHECK(ConversationStore::valid_id(id));
    ids.insert(id);
  }
  CHECK(ids.size() == 2000);
}

TEST_CASE("API keys: the right key gives its owner tag, anything else nothing", "[serve][auth]") {
  recur::serve::ApiKeys none;
  CHECK(none.authorize("") == std::string());
  recur::serve::ApiKeys keys;
  keys.add("key-a", "test");
  keys.add_lines("# comment\nkey-b\r\n\n", "file");
  CHECK(keys.size() == 2);
  CHECK(keys.authorize("Bearer key-a") == kOwnerA);
  CHECK(keys.authorize("bearer key-b") == kOwnerB);
  CHECK_FALSE(keys.authorize(""));
  CHECK_FALSE(keys.authorize("Bearer "));
  CHECK_FALSE(keys.authorize("Bearer key-"));
  CHECK_FALSE(keys.authorize("Basic key-a"));
  CHECK_THROWS_AS(keys.add("a key", "test"), recur::ArgumentError);
}

TEST_CASE("the prompt index proposes the longest indexed prefix of a prompt, for its owner only", "[serve][index]") {
  recur::serve::PromptIndex index(2);
  const std::vector<int> a{1, 2, 3, 4, 5, 6, 7, 8};
  index.add("a", "alice", index.keys("alice", a, {3, 8}));
  // A prompt that begins with all of a: the end of a first; one that leaves a at 5: 3.
  std::vector<int> longer = a;
  longer.push_back(9);
  auto found = index.find("alice", longer, 4);
  REQUIRE(found.size() == 1);
  CHECK(found[0] == std::make_pair(std::string("a"), std::size_t(8)));
  found = index.find("alice", {1, 2, 3, 4, 5, 0, 7, 8}, 4);
  REQUIRE(found.size() == 1);
  CHECK(found[0].second == 3);
  CHECK(index.find("alice", {1, 2}, 4).empty());
  CHECK(index.find("alice", {9, 2, 3, 4}, 4).empty());
  // The same ids under another owner: nothing.
  CHECK(index.find("bob", longer, 4).empty());
  // A second response at a shorter length comes after, the newest first at one length.
  index.add("b", "alice", index.keys("alice", a, {3}));
  found = index.find("alice", longer, 4);
  REQUIRE(found.size() == 2);
  CHECK(found[0].first == "a");
  CHECK(found[1] == std::make_pair(std::string("b"), std::size_t(3)));
  CHECK(index.find("alice", longer, 1).size() == 1);
  // Past the bound the oldest goes; forget() drops one.
  index.add("c", "alice", index.keys("alice", {7, 7}, {2}));
  CHECK(index.size() == 2);
  found = index.find("alice", longer, 4);
  REQUIRE(found.size() == 1);
  CHECK(found[0].first == "b");
  index.forget("b");
  CHECK(index.find("alice", longer, 4).empty());
  CHECK(index.find("alice", {7, 7, 7}, 4).size() == 1);
  // Off: nothing kept.
  recur::serve::PromptIndex off(0);
  off.add("a", "alice", off.keys("alice", a, {8}));
  CHECK(off.find("alice", a, 4).empty());
}

TEST_CASE("a stored conversation keeps its owner; bytes without the header have none", "[serve][store]") {
  const auto c = recur::serve::decode_conversation(recur::serve::encode_conversation(kOwnerA, "state bytes"));
  CHECK(c.owner == kOwnerA);
  CHECK(c.state == "state bytes");
  const auto old = recur::serve::decode_conversation("RECURSTATE...");
  CHECK(old.owner.empty());
  CHECK(old.state == "RECURSTATE...");
  CHECK_THROWS_AS(recur::serve::decode_conversation("recurcv1\x20short"), recur::FormatError);
}

TEST_CASE("a conversation continues only for its owner: another gets what an unknown id gets", "[serve][store]") {
  ConversationStore store(nullptr, 1 << 20);
  store.put("cmpl-a", "state a", kOwnerA);
  store.put("cmpl-open", "state open");
  CHECK(store.get("cmpl-a", kOwnerA) == std::string("state a"));
  CHECK_FALSE(store.get("cmpl-a", kOwnerB));
  CHECK_FALSE(store.get("cmpl-a"));
  CHECK_FALSE(store.get("cmpl-open", kOwnerA));
  CHECK(store.get("cmpl-open") == std::string("state open"));
  CHECK_FALSE(store.get("../cmpl-a", kOwnerA));
}

TEST_CASE("past the memory budget the least recently used go to the directory, owners and all", "[serve][store]") {
  recur::testing::TempDir dir;
  const std::string state(1000, 's');
  {
    ConversationStore store(recur::serve::directory_backend(dir.str()), 2500);
    store.put("cmpl-1", state, kOwnerA);
    store.put("cmpl-2", state, kOwnerA);
    CHECK(store.get("cmpl-1", kOwnerA));  // now the most recently used
    store.put("cmpl-3", state, kOwnerB);  // pushes cmpl-2 out
    const auto st = store.stats();
    CHECK(st.memory_count == 2);
    CHECK(st.disk_count == 1);
    CHECK(store.get("cmpl-2", kOwnerA) == state);  // read back from the file
    CHECK_FALSE(store.get("cmpl-3", kOwnerA));
    store.persist();
  }
  ConversationStore again(recur::serve::directory_backend(dir.str()), 2500);
  CHECK(again.stats().disk_count == 3);
  CHECK(again.get("cmpl-3", kOwnerB) == state);
  CHECK_FALSE(again.get("cmpl-3", kOwnerA));
  CHECK_FALSE(again.get("cmpl-1", kOwnerB));
  CHECK(again.get("cmpl-1", kOwnerA) == state);
}

TEST_CASE("without a backend, what the budget pushes out is dropped and counted", "[serve][store]") {
  ConversationStore store(nullptr, 1500);
  store.put("cmpl-1", std::string(1000, 'a'));
  store.put("cmpl-2", std::string(1000, 'b'));
  CHECK_FALSE(store.get("cmpl-1"));
  CHECK(store.get("cmpl-2"));
  CHECK(store.stats().dropped == 1);
}

// ---- stop sequences ----

namespace {
// The pieces through the hold-back, each released piece checked; returns all that was released.
std::string through(StopSequences& stop, const std::vector<std::string>& pieces) {
  std::string out;
  for (const auto& p : pieces) {
    const std::string released = stop.put(p);
    CHECK(recur::text::invalid_utf8_at(released) == std::string::npos);
    out += released;
  }
  return out;
}
}  // namespace

TEST_CASE("a stop sequence's start is held back while it may still be one", "[serve][stop]") {
  StopSequences stop({"STOP"});
  CHECK(stop.put("abc S") == "abc ");
  CHECK(stop.held() == 1);
  CHECK(stop.put("T") == "");
  CHECK(stop.put("O") == "");
  CHECK(stop.held() == 3);
  // "STOx" cannot begin STOP any more: all of it goes, and the S of "xS" waits again.
  CHECK(stop.put("xS") == "STOx");
  CHECK(stop.held() == 1);
  CHECK_FALSE(stop.stopped());
  CHECK(stop.finish() == "S");  // the end of the text releases the start of a stop
  CHECK(stop.held() == 0);
}

TEST_CASE("the text ends before a stop sequence, split across pieces or inside one", "[serve][stop]") {
  StopSequences stop({"\n\n", "END"});
  CHECK(through(stop, {"one\n", "\ntwo"}) == "one");
  CHECK(stop.stopped());
  CHECK(stop.put("more") == "");
  CHECK(stop.finish() == "");

  stop.reset({"END", "ND!"});
  CHECK(stop.put("aEN") == "a");
  CHECK(stop.put("D! then") == "");  // the earlier of two overlapping stops cuts
  CHECK(stop.stopped());

  stop.reset({"xyz"});
  CHECK(stop.put("1 xyz 2") == "1 ");
  stop.reset({});
  CHECK(stop.put("anything xyz") == "anything xyz");
  CHECK(stop.held() == 0);
}

TEST_CASE("a stop sequence's longest possible start is held, over every sequence", "[serve][stop]") {
  StopSequences stop({"abcd", "cx", "bcz"});
  CHECK(stop.put("..abc") == "..");  // "abc" may begin abcd; "bc" bcz, "c" cx
  CHECK(stop.put("z") == "a");       // bcz
  CHECK(stop.stopped());
}

TEST_CASE("stop sequences and multi-byte characters split across pieces", "[serve][stop][utf8]") {
  // "é" (C3 A9) and "€" (E2 82 AC) arrive a byte at a time through the UTF-8 stream, as a
  // byte-level model's tokens do; the hold-back sees whole characters only.
  const std::string text = "caf\xC3\xA9 au lait \xE2\x82\xAC" "5, fin";
  for (const std::string& s : {std::string("\xE2\x82\xAC"), std::string("\xC3\xA9 a"), std::string(" fin")}) {
    recur::text::Utf8Stream bytes;
    StopSequences stop({s, "\xC3\xA8"});  // è shares é's first byte
    std::string out;
    for (const char c : text) {
      const std::string released = stop.put(bytes.put(std::string(1, c)));
      CHECK(recur::text::invalid_utf8_at(released) == std::string::npos);
      out += released;
      if (stop.stopped()) break;
    }
    CHECK(stop.stopped());
    CHECK(out == text.substr(0, text.find(s)));
  }
  // A stop sequence that begins with a character whose other bytes differ is not one.
  StopSequences stop({"\xC3\xA8!"});
  CHECK(through(stop, {"\xC3\xA9", "!"}) == "\xC3\xA9!");
  CHECK(through(stop, {"x\xC3\xA8"}) == "x");
  CHECK(stop.finish() == "\xC3\xA8");
}

// ---- the scheduler ----

namespace {

constexpr double kWaitSeconds = 60;

// Waits until `ready` holds (the engine runs on its own thread); false after kWaitSeconds.
bool wait_until(const std::function<bool()>& ready) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(kWaitSeconds);
  while (!ready()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

bool finished(Job& job) {
  std::lock_guard<std::mutex> lock(job.mutex);
  return job.finished;
}

std::int64_t generated(Job& job) {
  std::lock_guard<std::mutex> lock(job.mutex);
  return job.completion_tokens;
}

// A request for the byte-level test model; `max_tokens` large enough keeps it running until it
// is cancelled.
std::shared_ptr<Job> request(const std::string& id, std::int64_t max_tokens) {
  auto job = std::make_shared<Job>();
  job->id = id;
  job->request.prompt = {'T', 'h', 'e', ' '};
  job->request.max_tokens = max_tokens;
  job->request.ignore_eos = true;
  job->request.sampler.seed = 7;
  return job;
}

recur::serve::EngineOptions small_engine(int max_batch, int max_queue) {
  recur::serve::EngineOptions o;
  o.max_batch = max_batch;
  o.max_queue = max_queue;
  o.chunk = 8;
  o.threads = 1;
  return o;
}

}  // namespace

TEST_CASE("a full batch queues, a freed slot admits the next, a full queue refuses", "[serve][engine]") {
  ConversationStore store(nullptr, 1 << 24);
  Engine engine(recur::Model::builtin(3), nullptr, store, small_engine(1, 1));
  auto running = request("cmpl-running", std::int64_t(1) << 40);
  REQUIRE(engine.submit(running));
  REQUIRE(wait_until([&] { return generated(*running) > 0; }));

  auto waiting = request("cmpl-waiting", 3);
  REQUIRE(engine.submit(waiting));
  CHECK(engine.stats().waiting == 1);
  // The one slot stays taken: the waiting request gets no token while the first runs on.
  const std::int64_t steps = engine.stats().batch_steps;
  REQUIRE(wait_until([&] { return engine.stats().batch_steps >= steps + 5; }));
  CHECK(generated(*waiting) == 0);
  CHECK(engine.stats().waiting == 1);
  CHECK(engine.stats().running == 1);
  CHECK_FALSE(engine.submit(request("cmpl-refused", 3)));  // max_queue 1

  running->cancelled = true;
  REQUIRE(wait_until([&] { return finished(*waiting); }));
  CHECK(finished(*running));
  {
    std::lock_guard<std::mutex> lock(waiting->mutex);
    CHECK(waiting->error_status == 0);
    CHECK(waiting->finish_reason == "length");
    CHECK(waiting->completion_tokens == 3);
    CHECK(waiting->prompt_tokens == 4);
  }
  CHECK(store.get("cmpl-waiting"));
  // The counters follow the job's end (they are the engine's, not the job's).
  CHECK(wait_until([&] { return engine.stats().requests_finished == 1; }));
  const auto st = engine.stats();
  CHECK(st.requests_admitted == 2);
  CHECK(st.requests_finished == 1);
  CHECK(st.requests_cancelled == 1);
  CHECK(st.waiting == 0);
}

TEST_CASE("a cancelled request frees its slot at the next turn and nothing of it is kept", "[serve][engine]") {
  ConversationStore store(nullptr, 1 << 24);
  Engine engine(recur::Model::builtin(3), nullptr, store, small_engine(2, 4));
  auto a = request("cmpl-a", std::int64_t(1) << 40), b = request("cmpl-b", std::int64_t(1) << 40);
  REQUIRE(engine.submit(a));
  REQUIRE(engine.submit(b));
  REQUIRE(wait_until([&] { return generated(*a) > 0 && generated(*b) > 0; }));

  std::int64_t at_cancel = 0;
  {
    std::lock_guard<std::mutex> lock(a->mutex);
    at_cancel = a->completion_tokens;
    a->cancelled = true;
  }
  REQUIRE(wait_until([&] { return finished(*a); }));
  CHECK(generated(*a) <= at_cancel + 1);  // at most the turn that was running
  {
    std::lock_guard<std::mutex> lock(a->mutex);
    CHECK(a->error_status == 0);
    CHECK(a->finish_reason.empty());
  }
  CHECK(wait_until([&] { return engine.stats().running == 1; }));

  // The freed slot takes the next request while b goes on.
  auto c = request("cmpl-c", 2);
  REQUIRE(engine.submit(c));
  REQUIRE(wait_until([&] { return finished(*c); }));
  CHECK_FALSE(finished(*b));
  CHECK(store.get("cmpl-c"));

  // A request cancelled while it waits never runs.
  auto d = request("cmpl-d", 2);
  d->cancelled = true;
  REQUIRE(engine.submit(d));
  REQUIRE(wait_until([&] { return finished(*d); }));
  CHECK(generated(*d) == 0);

  b->cancelled = true;
  REQUIRE(wait_until([&] { return finished(*b); }));
  CHECK_FALSE(store.get("cmpl-a"));
  CHECK_FALSE(store.get("cmpl-b"));
  CHECK_FALSE(store.get("cmpl-d"));
  CHECK(wait_until([&] { return engine.stats().requests_cancelled == 3; }));
  CHECK(engine.stats().requests_finished == 1);
  CHECK(store.stats().memory_count == 1);
}

TEST_CASE("a kept conversation continues with the state the engine saved", "[serve][engine]") {
  ConversationStore store(nullptr, 1 << 24);
  Engine engine(recur::Model::builtin(3), nullptr, store, small_engine(2, 4));
  auto whole = request("cmpl-whole", 6), first = request("cmpl-first", 3);
  REQUIRE(engine.submit(whole));
  REQUIRE(engine.submit(first));
  REQUIRE(wait_until([&] { return finished(*whole) && finished(*first); }));
  // The continuation samples its own stream: only the state carries over, so the check is that
  // the state loads and the turn runs, not that the text matches.
  auto next = request("cmpl-next", 3);
  next->request.prompt = {'!'};
  next->request.previous_id = "cmpl-first";
  const auto state = store.get("cmpl-first");
  REQUIRE(state);
  next->previous_state = *state;
  REQUIRE(engine.submit(next));
  REQUIRE(wait_until([&] { return finished(*next); }));
  std::lock_guard<std::mutex> lock(next->mutex);
  CHECK(next->error_status == 0);
  CHECK(next->completion_tokens == 3);

  auto broken = request("cmpl-broken", 3);
  broken->request.previous_id = "cmpl-first";
  broken->previous_state = "not a state";
  REQUIRE(engine.submit(broken));
  REQUIRE(wait_until([&] { return finished(*broken); }));
  CHECK(broken->error_status == 409);
}

namespace {
// A chat-mode request (Request::whole_prompt): greedy, so that its ids depend on the prompt alone.
std::shared_ptr<Job> chat_request(const std::string& id, std::vector<int> prompt) {
  auto job = request(id, 4);
  job->request.prompt = std::move(prompt);
  job->request.sampler.temperature = 0;
  job->request.whole_prompt = true;
  return job;
}
std::vector<int> ids_of(Job& job) {
  std::lock_guard<std::mutex> lock(job.mutex);
  return job.token_ids;
}
}  // namespace

TEST_CASE("a chat turn whose prompt extends the kept tokens prefills only the rest, with the bytes of the whole", "[serve][engine][chat]") {
  ConversationStore store(nullptr, 1 << 24);
  Engine engine(recur::Model::builtin(3), nullptr, store, small_engine(2, 8));
  auto first = chat_request("cmpl-chat1", {'T', 'h', 'e', ' '});
  REQUIRE(engine.submit(first));
  REQUIRE(wait_until([&] { return finished(*first); }));
  REQUIRE(first->error_status == 0);
  CHECK(first->cached_tokens == 0);

  // The kept state carries its ids: the prompt and every token generated.
  const auto state = store.get("cmpl-chat1");
  REQUIRE(state);
  std::vector<int> kept = first->request.prompt;
  kept.insert(kept.end(), first->token_ids.begin(), first->token_ids.end());
  {
    recur::Decoder d(recur::Model::builtin(3));
    recur::SessionData session;
    d.load_bytes(*state, "kept", &session);
    CHECK(session.tokens == kept);
    CHECK(d.n_tokens() == std::int64_t(kept.size()));
  }

  std::vector<int> next = kept;
  next.push_back('!');
  next.push_back(' ');
  auto continued = chat_request("cmpl-chat2", next);
  continued->request.previous_id = "cmpl-chat1";
  continued->previous_state = *state;
  const auto prefilled_before = engine.stats().prompt_tokens;
  REQUIRE(engine.submit(continued));
  REQUIRE(wait_until([&] { return finished(*continued); }));
  CHECK(continued->error_status == 0);
  CHECK(continued->cached_tokens == std::int64_t(kept.size()));
  CHECK(continued->prompt_tokens == std::int64_t(next.size()));
  CHECK(engine.stats().prompt_tokens - prefilled_before == 2);

  auto whole = chat_request("cmpl-chat3", next);
  REQUIRE(engine.submit(whole));
  REQUIRE(wait_until([&] { return finished(*whole); }));
  CHECK(whole->cached_tokens == 0);
  CHECK(ids_of(*continued) == ids_of(*whole));
  CHECK(ids_of(*continued).size() == 4);

  // A prompt that does not extend the kept ids starts fresh, with the bytes of the whole.
  std::vector<int> edited = next;
  edited[4] = edited[4] == 'x' ? 'y' : 'x';
  auto fresh = chat_request("cmpl-chat4", edited);
  fresh->request.previous_id = "cmpl-chat1";
  fresh->previous_state = *state;
  auto fresh_whole = chat_request("cmpl-chat5", edited);
  REQUIRE(engine.submit(fresh));
  REQUIRE(engine.submit(fresh_whole));
  REQUIRE(wait_until([&] { return finished(*fresh) && finished(*fresh_whole); }));
  CHECK(fresh->cached_tokens == 0);
  CHECK(ids_of(*fresh) == ids_of(*fresh_whole));
}

TEST_CASE("a chat turn ends at its end ids as at eos, and ignore_eos ignores both", "[serve][engine][chat]") {
  ConversationStore store(nullptr, 1 << 24);
  Engine engine(recur::Model::builtin(3), nullptr, store, small_engine(1, 4));
  // The greedy first token of this prompt, made an end id: the reply ends at once with it.
  auto probe = chat_request("cmpl-probe", {'T', 'h', 'e', ' '});
  REQUIRE(engine.submit(probe));
  REQUIRE(wait_until([&] { return finished(*probe); }));
  const int first_token = ids_of(*probe).at(0);
  auto ended = chat_request("cmpl-ended", {'T', 'h', 'e', ' '});
  ended->request.ignore_eos = false;
  ended->request.end_ids = {first_token};
  auto ignored = chat_request("cmpl-ignored", {'T', 'h', 'e', ' '});
  ignored->request.end_ids = {first_token};  // request() sets ignore_eos
  REQUIRE(engine.submit(ended));
  REQUIRE(engine.submit(ignored));
  REQUIRE(wait_until([&] { return finished(*ended) && finished(*ignored); }));
  std::lock_guard<std::mutex> lock(ended->mutex);
  CHECK(ended->finish_reason == "stop");
  CHECK(ended->token_ids == std::vector<int>{first_token});
  CHECK(ended->text.empty());
  CHECK(ids_of(*ignored).size() == 4);
}

namespace {
// RandomWeights with the head's padding rows (ids from `real` on) scaled up, so that without the
// mask their logits are the highest: the control that the mask is what keeps them out.
class PaddingFirst final : public recur::WeightSource {
 public:
  PaddingFirst(const recur::ModelConfig& c, int real) : random_(c, 3), real_(real), d_(c.hidden_size) {}
  bool has(const std::string& n) const override { return random_.has(n); }
  std::vector<std::int64_t> shape(const std::string& n) const override { return random_.shape(n); }
  std::vector<float> read(const std::string& n) const override {
    std::vector<float> v = random_.read(n);
    if (n == "lm_head.weight")
      for (std::size_t i = std::size_t(real_) * std::size_t(d_); i < v.size(); ++i) v[i] *= 50.0f;
    return v;
  }
  std::vector<std::string> names() const override { return random_.names(); }
  std::string describe() const override { return "random, padding rows first"; }

 private:
  recur::RandomWeights random_;
  int real_, d_;
};
}  // namespace

TEST_CASE("a head wider than the tokenizer never samples an id it cannot decode, and logprobs are over the real ids", "[serve][engine]") {
  // RWKV's world models: 65,536 rows in the head, 65,530 ids in the vocabulary. Here the head of
  // 65,536 rows with the world vocabulary of tests/world (3,002 ids), and with a tokenizer of 16
  // ids, whose every logprob fits in top_logprobs.
  const recur::ModelConfig c = recur::ModelConfig::from_json(
      R"({"model_type": "rwkv7", "vocab_size": 65536, "hidden_size": 64, "head_dim": 32,
          "num_hidden_layers": 1, "intermediate_size": 128, "decay_low_rank_dim": 8,
          "a_low_rank_dim": 8, "v_low_rank_dim": 4, "gate_low_rank_dim": 16,
          "tie_word_embeddings": false})",
      "rwkv7 config");
  std::string letters;
  for (int i = 0; i < 16; ++i) letters += fmt::format("{}\"{}\": {}", i ? ", " : "", char('a' + i), i);
  const auto world = recur::Tokenizer::load(RECUR_WORLD_DIR "/rwkv_vocab_v20230424.txt");
  const auto small = recur::Tokenizer::from_json(
      R"({"model": {"type": "BPE", "vocab": {)" + letters + R"(}, "merges": []}})", "16 letters");
  REQUIRE(world->vocab_size() == 3002);
  REQUIRE(small->vocab_size() == 16);
  for (const auto& tokenizer : {world, small}) {
    const int real = tokenizer->vocab_size();
    INFO("a tokenizer of " << real << " ids");
    const auto model = recur::Model::from_weights(c, PaddingFirst(c, real));
    {  // The control: unmasked, the greedy choice is a padding row.
      recur::Decoder d(model, recur::DecoderOptions{8, 1});
      d.prefill({1, 2, 3, 4});
      const auto l = d.logits();
      REQUIRE(l.size() == 65536);
      CHECK(recur::Sampler(recur::SamplerOptions{0, 0, 1, 1, 0, nullptr}).sample(l, {}) >= real);
    }
    ConversationStore store(nullptr, 1 << 24);
    Engine engine(model, tokenizer, store, small_engine(2, 4));
    auto sampled = request("cmpl-sampled", 12);
    sampled->request.prompt = {1, 2, 3, 4};
    sampled->request.sampler.temperature = 1.0f;
    sampled->request.sampler.top_k = 0;
    sampled->request.sampler.top_p = 1.0f;
    sampled->request.logprobs = 20;
    auto greedy = request("cmpl-greedy", 12);
    greedy->request.prompt = {1, 2, 3, 4};
    greedy->request.sampler.temperature = 0;
    greedy->request.logprobs = 0;
    REQUIRE(engine.submit(sampled));
    REQUIRE(engine.submit(greedy));
    REQUIRE(wait_until([&] { return finished(*sampled) && finished(*greedy); }));
    for (Job* job : {sampled.get(), greedy.get()}) {
      std::lock_guard<std::mutex> lock(job->mutex);
      INFO(job->id << ": " << job->error_message);
      REQUIRE(job->error_status == 0);
      CHECK(job->completion_tokens == 12);
      for (const int id : job->token_ids) CHECK(id < real);
      for (const auto& t : job->tokens) {
        CHECK(t.logprob <= 0.0);
        CHECK(t.text.find("<|") == std::string::npos);  // every id has its own text
        std::size_t n = 0;
        double mass = 0;
        for (const auto& [id, logprob] : t.top) {
          CHECK(id < real);
          mass += std::exp(logprob);
          if (id == t.id) CHECK(logprob == t.logprob);
          ++n;
        }
        if (job == sampled.get()) {
          CHECK(n == std::size_t(std::min(real, 20)));
          // The 16 ids' probabilities, normalised over them alone, sum to 1.
          if (real <= 20) CHECK(std::abs(mass - 1.0) < 1e-12);
        }
      }
    }
  }
}
