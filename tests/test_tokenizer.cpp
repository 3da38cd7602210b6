// The tokenizer: ids and text equal to Hugging Face's tokenizers library on hard texts with
// real tokenizer.json files ("[oracle]": the library's results come from tests/tokenizer/
// oracle.mjs, which ctest runs first), and the refusals that need no reference.
#include <catch2/catch.hpp>

#include <fmt/format.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "recur/error.h"
#include "recur/tokenizer.h"
#include "support/temp_dir.h"
#include "util/file.h"
#include "util/json.h"

using namespace recur;

namespace {

std::vector<int> ids_of(const json::Value& v) {
  std::vector<int> out;
  for (const auto& x : v.array()) out.push_back(static_cast<int>(x.integer()));
  return out;
}

// Where two id lists first differ, for the failure message.
std::string first_difference(const std::vector<int>& got, const std::vector<int>& want) {
  std::size_t i = 0;
  while (i < got.size() && i < want.size() && got[i] == want[i]) ++i;
  const auto show = [&](const std::vector<int>& v) {
    std::string s;
    for (std::size_t k = i; k < std::min(v.size(), i + 8); ++k) s += fmt::format(" {}", v[k]);
    return s;
  };
  return fmt::format("{} ids against {}; first difference at {}: recur{} | library{}", got.size(),
                     want.size(), i, show(got), show(want));
}

std::string excerpt(const std::string& s) {
  std::string out;
  for (const char c : s.substr(0, 60)) out += (c == '\n' ? std::string("\\n") : std::string(1, c));
  return out;
}

std::string streamed(const std::shared_ptr<const Tokenizer>& t, const std::vector<int>& ids,
                     bool skip_special = false) {
  DecodeStream stream(t, skip_special);
  std::string out;
  for (const int id : ids) out += stream.put(id);
  return out + stream.finish();
}

// A small byte-level BPE in the GPT-2 layout, written here so that these tests need no download.
std::string tiny_tokenizer(const std::string& normalizer = "null",
                           const std::string& pre = R"({"type": "ByteLevel", "add_prefix_space": false, "use_regex": true})") {
  // The 256 byte stand-ins, then a few merges.
  std::string vocab;
  int id = 0;
  std::vector<std::string> chars;
  int extra = 0;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    const char32_t c = printable ? char32_t(b) : char32_t(256 + extra++);
    std::string u;
    if (c < 0x80) u += char(c);
    else {
      u += char(0xC0 | (c >> 6));
      u += char(0x80 | (c & 0x3F));
    }
    chars.push_back(u);
  }
  for (const auto& c : chars) vocab += fmt::format("{}{}: {}", vocab.empty() ? "" : ", ", json::quote(c), id++);
  for (const char* t : {"he", "ll", "hell", "hello", "\xC4\xA0w", "or", "\xC4\xA0wor", "ld", "\xC4\xA0world"})
    vocab += fmt::format(", {}: {}", json::quote(t), id++);
  return fmt::format(R"({{
  "version": "1.0",
  "added_tokens": [{{"id": {}, "content": "<|end|>", "special": true, "normalized": false}}],
  "normalizer": {},
  "pre_tokenizer": {},
  "post_processor": {{"type": "TemplateProcessing", "single": [{{"SpecialToken": {{"id": "<|end|>", "type_id": 0}}}}, {{"Sequence": {{"id": "A", "type_id": 0}}}}],
                     "pair": [], "special_tokens": {{"<|end|>": {{"id": "<|end|>", "ids": [{}], "tokens": ["<|end|>"]}}}}}},
  "decoder": {{"type": "ByteLevel"}},
  "model": {{"type": "BPE", "vocab": {{{}}},
            "merges": ["h e", "l l", "he ll", "hell o", "\u0120 w", ["o", "r"], ["\u0120w", "or"], "l d", "\u0120wor ld"]}}
}})", id, normalizer, pre, id, vocab);
}

}  // namespace

TEST_CASE("[oracle] ids and text equal Hugging Face's tokenizers on every file and text", "[oracle]") {
  const char* dir = std::getenv("RECUR_ORACLE");
  if (!dir)
    FAIL("RECUR_ORACLE is not set: ctest runs tests/tokenizer/oracle.mjs first and sets it "
         "(needs `npm ci` in tests/tokenizer, which tools/build.sh test does)");
  const auto text = detail::read_file(std::string(dir) + "/expected.json");
  REQUIRE(text);
  const json::Value root = json::parse(*text, "expected.json");
  int tokenizers = 0;
  for (const auto& entry : root.find("tokenizers")->array()) {
    const std::string name = entry.find("name")->string();
    INFO("tokenizer " << name);
    const auto tok = Tokenizer::load(entry.find("file")->string());
    ++tokenizers;
    int checked = 0, failed = 0;
    for (const auto& c : entry.find("cases")->array()) {
      const std::string& input = c.find("text")->string();
      const std::string cname = c.find("name")->string();
      const auto fail = [&](const std::string& what) {
        ++failed;
        if (failed <= 6) UNSCOPED_INFO(fmt::format("{} / {} ('{}'): {}", name, cname, excerpt(input), what));
      };
      const std::vector<int> with = ids_of(*c.find("with")), without = ids_of(*c.find("without"));
      const auto got_with = tok->encode(input, true);
      const auto got_without = tok->encode(input, false);
      if (got_with != with) fail("with special tokens: " + first_difference(got_with, with));
      if (got_without != without) fail("without special tokens: " + first_difference(got_without, without));
      if (tok->decode(with) != c.find("decoded")->string()) fail("decode differs");
      if (tok->decode(with, true) != c.find("decoded_skip")->string()) fail("decode skipping special tokens differs");
      if (tok->decode(ids_of(*c.find("broken"))) != c.find("broken_decoded")->string())
        fail("decode of ids that cut characters apart differs");
      if (streamed(tok, with) != c.find("decoded")->string()) fail("streamed decode differs");
      ++checked;
    }
    // Ids that no text encodes to (random ones, runs of byte tokens that are not UTF-8), decoded
    // at once and streamed, with and without special tokens.
    int decodes = 0;
    if (const json::Value* list = entry.find("decodes")) {
      for (const auto& d : list->array()) {
        const std::string dname = d.find("name")->string();
        const std::vector<int> ids = ids_of(*d.find("ids"));
        const auto fail = [&](const std::string& what) {
          ++failed;
          if (failed <= 6) UNSCOPED_INFO(fmt::format("{} / decode {}: {}", name, dname, what));
        };
        const std::string& want = d.find("decoded")->string();
        const std::string& want_skip = d.find("decoded_skip")->string();
        if (const std::string got = tok->decode(ids); got != want)
          fail(fmt::format("'{}' against the library's '{}'", excerpt(got), excerpt(want)));
        if (const std::string got = tok->decode(ids, true); got != want_skip)
          fail(fmt::format("skipping special tokens: '{}' against the library's '{}'", excerpt(got), excerpt(want_skip)));
        if (streamed(tok, ids) != want) fail("streamed decode differs");
        if (streamed(tok, ids, true) != want_skip) fail("streamed decode skipping special tokens differs");
        ++decodes;
      }
    }
    CHECK(failed == 0);
    CHECK(checked > 20);
    CHECK(decodes >= 4);
  }
  CHECK(tokenizers >= 18);
}

TEST_CASE("text that is not UTF-8 is refused, naming the byte") {
  const auto tok = Tokenizer::from_json(tiny_tokenizer(), "tiny");
  const std::vector<std::string> bad = {"abc\xFF", "\xC3(", "ok \xE2\x82", "\xED\xA0\x80 surrogate",
                                        "\xF4\x90\x80\x80 too big", "\xC0\xAF overlong"};
  for (const auto& s : bad) {
    INFO(s.size());
    try {
      tok->encode(s);
      FAIL("accepted");
    } catch (const ArgumentError& e) {
      CHECK_THAT(e.what(), Catch::Contains("[Tokenizer::encode]") && Catch::Contains("not UTF-8 at byte"));
    }
  }
  CHECK(tok->encode("h\xC3\xA9llo \xF0\x9F\x99\x82").size() > 3);
}

TEST_CASE("the tiny byte-level tokenizer merges, adds its BOS and decodes back") {
  const auto tok = Tokenizer::from_json(tiny_tokenizer(), "tiny");
  const int hello = *tok->token_to_id("hello"), world = *tok->token_to_id("\xC4\xA0world");
  const int end = *tok->token_to_id("<|end|>");
  CHECK(tok->encode("hello world", false) == std::vector<int>{hello, world});
  CHECK(tok->encode("hello world") == std::vector<int>{end, hello, world});
  CHECK(tok->encode("<|end|>hello", false) == std::vector<int>{end, hello});
  CHECK(tok->encode("", false).empty());
  CHECK(tok->decode({end, hello, world}) == "<|end|>hello world");
  CHECK(tok->decode({end, hello, world}, true) == "hello world");
  CHECK(tok->is_special(end));
  CHECK_FALSE(tok->is_special(hello));
  // A lone continuation byte (0x80, whose stand-in is U+0122) decodes to U+FFFD, as the
  // library's lossy decoding does.
  const auto byte_80 = tok->token_to_id("\xC4\xA2");
  REQUIRE(byte_80);
  CHECK(tok->decode({*byte_80}) == "\xEF\xBF\xBD");
}

TEST_CASE("streamed decoding holds back only an incomplete character") {
  const auto tok = Tokenizer::from_json(tiny_tokenizer(), "tiny");
  // U+1F642 is four bytes, each its own token here.
  const std::vector<int> ids = tok->encode("hi \xF0\x9F\x99\x82!", false);
  REQUIRE(ids.size() == 8);  // h, i, the space, the emoji's four bytes, !
  DecodeStream stream(tok);
  std::vector<std::string> pieces;
  for (const int id : ids) pieces.push_back(stream.put(id));
  pieces.push_back(stream.finish());
  std::string all;
  for (const auto& p : pieces) all += p;
  CHECK(all == "hi \xF0\x9F\x99\x82!");
  // The emoji comes out whole, in one piece, when its last byte arrives.
  CHECK(std::find(pieces.begin(), pieces.end(), "\xF0\x9F\x99\x82") != pieces.end());
}

TEST_CASE("ids outside the vocabulary are refused") {
  const auto tok = Tokenizer::from_json(tiny_tokenizer(), "tiny");
  CHECK_THROWS_MATCHES(tok->decode({1, tok->vocab_size()}), ArgumentError,
                       Catch::Matchers::Message(fmt::format(
                           "[Tokenizer::decode] id {} is not in the vocabulary of tiny ({} ids)",
                           tok->vocab_size(), tok->vocab_size())));
  CHECK_THROWS_AS(tok->decode({-1}), ArgumentError);
  CHECK_THROWS_AS(tok->id_to_token(1 << 30), ArgumentError);
  DecodeStream stream(tok);
  CHECK_THROWS_AS(stream.put(-5), ArgumentError);
}

TEST_CASE("a component recur does not implement is refused at load, by name") {
  const auto refused = [](const std::string& json, const std::string& expected) {
    try {
      Tokenizer::from_json(json, "t.json");
      FAIL("loaded");
    } catch (const FormatError& e) {
      CHECK_THAT(e.what(), Catch::Contains(expected));
    }
  };
  refused(tiny_tokenizer(R"({"type": "Lowercase"})"), "normalizer: the normalizer 'Lowercase' is not supported");
  refused(tiny_tokenizer("null", R"({"type": "Sequence", "pretokenizers": [{"type": "Whitespace"}]})"),
          "pre_tokenizer.pretokenizers[0]: the pre-tokenizer 'Whitespace' is not supported");
  std::string unigram = tiny_tokenizer();
  unigram.replace(unigram.find("\"type\": \"BPE\""), 13, "\"type\": \"Unigram\"");
  refused(unigram, "model: the model 'Unigram' is not supported");
  std::string dropout = tiny_tokenizer();
  dropout.replace(dropout.find("\"type\": \"BPE\""), 13, "\"type\": \"BPE\", \"dropout\": 0.1");
  refused(dropout, "model.dropout");
  std::string bad_merge = tiny_tokenizer();
  bad_merge.replace(bad_merge.find("\"h e\""), 5, "\"h zz\"");
  refused(bad_merge, "merge 0 ('h' + 'zz') uses a token that is not in the vocabulary");
  refused(tiny_tokenizer("null", R"({"type": "Split", "pattern": {"Regex": "(unclosed"}, "behavior": "Isolated"})"),
          "does not compile");
  refused("[1, 2]", "not a JSON object");
  refused("{\"model\": ", "t.json");
}

TEST_CASE("load() takes a directory or the file, and says what is missing") {
  recur::testing::TempDir dir;
  {
    std::ofstream f(dir.file("tokenizer.json"));
    f << tiny_tokenizer();
  }
  CHECK(Tokenizer::present(dir.str()));
  CHECK(Tokenizer::load(dir.str())->vocab_size() == Tokenizer::load(dir.file("tokenizer.json"))->vocab_size());
  CHECK_THROWS_WITH(Tokenizer::load(dir.file("nothing")), Catch::Contains("cannot read the file"));
  CHECK_FALSE(Tokenizer::present(dir.file("nothing")));
}

namespace {

// A small SentencePiece-style file (the layout of Llama-2, Mistral and the fla hub models):
// "▁" for spaces, <0xHH> byte tokens, <unk> <s> </s>.
std::string tiny_spm(const std::string& pre = "null", const std::string& merges = R"(["▁ a", "a b"])",
                     const std::string& decoder = "") {
  std::string vocab = R"("<unk>": 0, "<s>": 1, "</s>": 2)";
  for (int b = 0; b < 256; ++b) vocab += fmt::format(R"(, "<0x{:02X}>": {})", b, 3 + b);
  vocab += R"(, "▁": 259, "a": 260, "b": 261, "▁a": 262, "ab": 263, "▁▁": 264)";
  const std::string dec = decoder.empty() ? R"({"type": "Sequence", "decoders": [
      {"type": "Replace", "pattern": {"String": "▁"}, "content": " "}, {"type": "ByteFallback"},
      {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]})" : decoder;
  return fmt::format(R"({{
  "added_tokens": [{{"id": 0, "content": "<unk>", "special": true, "normalized": false}},
                   {{"id": 1, "content": "<s>", "special": true, "normalized": false}},
                   {{"id": 2, "content": "</s>", "special": true, "normalized": false}}],
  "normalizer": {},
  "pre_tokenizer": {},
  "post_processor": {{"type": "TemplateProcessing", "single": [{{"SpecialToken": {{"id": "<s>", "type_id": 0}}}}, {{"Sequence": {{"id": "A", "type_id": 0}}}}],
                     "special_tokens": {{"<s>": {{"id": "<s>", "ids": [1], "tokens": ["<s>"]}}}}}},
  "decoder": {},
  "model": {{"type": "BPE", "unk_token": "<unk>", "fuse_unk": true, "byte_fallback": true, "vocab": {{{}}}, "merges": {}}}
}})", pre == "null" ? R"({"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "▁"}, {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]})" : "null",
                     pre, dec, vocab, merges);
}

}  // namespace

TEST_CASE("SentencePiece-style BPE: byte fallback both ways, and the BOS") {
  const auto tok = Tokenizer::from_json(tiny_spm(), "spm");
  const int e_c3 = 3 + 0xC3, e_a9 = 3 + 0xA9;
  // "ab é": the normalizer makes it "▁ab▁é"; é is not in the vocabulary, so its two bytes.
  CHECK(tok->encode("ab \xC3\xA9") == std::vector<int>{1, 262, 261, 259, e_c3, e_a9});
  CHECK(tok->decode({1, 262, 261, 259, e_c3, e_a9}, true) == "ab \xC3\xA9");
  // A run of byte tokens that is not UTF-8 is one U+FFFD per token, as the library decodes it.
  CHECK(tok->decode({e_c3, e_c3, 260}) == "\xEF\xBF\xBD\xEF\xBF\xBD" "a");
  // A skipped special token inside a character joins the two halves of its run.
  CHECK(tok->decode({3 + 0xE2, 1, 3 + 0x82, 3 + 0xAC}, true) == "\xE2\x82\xAC");
  CHECK(tok->decode({3 + 0xE2, 1, 3 + 0x82, 3 + 0xAC}) == "\xEF\xBF\xBD<s>\xEF\xBF\xBD\xEF\xBF\xBD");
}

TEST_CASE("SentencePiece-style files are read as the library reads them") {
  // Merges: a "#version" line is skipped, a pair listed twice takes its last rank.
  CHECK(Tokenizer::from_json(tiny_spm("null", R"(["#version: 0.2", "▁ a", "a b"])"), "spm")->encode("ab", false) ==
        std::vector<int>{262, 261});
  const auto last = Tokenizer::from_json(tiny_spm("null", R"(["▁ a", "a b", "▁ a"])"), "spm");
  CHECK(last->encode("ab", false) == std::vector<int>{259, 263});  // "a b" now ranks first
  const auto refused = [](const std::string& json, const std::string& expected) {
    try {
      Tokenizer::from_json(json, "t.json");
      FAIL("loaded");
    } catch (const FormatError& e) {
      CHECK_THAT(e.what(), Catch::Contains(expected));
    }
  };
  refused(tiny_spm("null", R"(["▁ a b"])"), "model.merges[0]");
  refused(tiny_spm("null", R"([" ▁a"])"), "merge 0 ('' + '▁a') uses a token that is not in the vocabulary");
  refused(tiny_spm(R"({"type": "Metaspace", "prepend_scheme": "first"})"),
          "pre_tokenizer: 'replacement' is missing");
  refused(tiny_spm(R"({"type": "Metaspace", "replacement": "▁", "add_prefix_space": false})"),
          "pre_tokenizer.add_prefix_space: false does not match the prepend_scheme");
  refused(tiny_spm(R"({"type": "Metaspace", "replacement": "▁", "prepend_scheme": "sometimes"})"),
          "'sometimes' is not always, first or never");
  CHECK_NOTHROW(Tokenizer::from_json(
      tiny_spm(R"({"type": "Metaspace", "replacement": "▁", "add_prefix_space": false, "prepend_scheme": "never"})"), "t.json"));
}

TEST_CASE("Metaspace's decoder drops every replacement character of the first token") {
  const std::string decoder = R"({"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always"})";
  const auto tok = Tokenizer::from_json(tiny_spm(R"({"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": false})",
                                                 R"(["▁ a", "a b"])", decoder), "spm");
  // The first token "▁▁" comes out empty (not as one space); later ones' become spaces.
  CHECK(tok->decode({264, 262}) == " a");
  CHECK(tok->decode({262, 264, 259}) == "a   ");
}
