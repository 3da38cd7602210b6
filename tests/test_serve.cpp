// The serving library without a socket: the conversation store's eviction and owner check, the
// stored format, ids and API keys, and the UTF-8 stream every response's text goes through.
#include <catch2/catch.hpp>

#include <set>
#include <string>

#include "serve/auth.h"
#include "serve/store.h"
#include "support/temp_dir.h"
#include "text/unicode.h"

using recur::serve::ConversationStore;

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
