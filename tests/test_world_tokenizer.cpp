// RWKV's world tokenizer: ids and text equal to a reference trie tokenizer on the committed
// vocabulary ("[oracle]": tests/world/oracle.py writes what recur must give, ctest runs it
// first), Python's literal syntax read without an evaluator, every refusal of a malformed
// vocabulary with its message, and streaming decode equal to decode.
#include <catch2/catch.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>

#include "recur/error.h"
#include "recur/tokenizer.h"
#include "support/temp_dir.h"
#include "text/unicode.h"
#include "text/world_vocab.h"
#include "util/file.h"

using namespace recur;

namespace {

const std::string kVocabDir = RECUR_WORLD_DIR;
const std::string kVocabFile = kVocabDir + "/rwkv_vocab_v20230424.txt";

std::shared_ptr<const Tokenizer> committed() {
  static const auto tok = Tokenizer::load(kVocabFile);
  return tok;
}

std::string unhex(const std::string& h) {
  std::string out;
  for (std::size_t i = 0; i + 1 < h.size(); i += 2)
    out += static_cast<char>(std::stoi(h.substr(i, 2), nullptr, 16));
  return out;
}

std::vector<int> ids_of(const std::string& s) {
  std::vector<int> out;
  for (std::size_t at = 0; at < s.size();) {
    std::size_t comma = s.find(',', at);
    if (comma == std::string::npos) comma = s.size();
    out.push_back(std::stoi(s.substr(at, comma - at)));
    at = comma + 1;
  }
  return out;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out(1);
  for (const char c : s) {
    if (c == sep) out.emplace_back();
    else out.back() += c;
  }
  return out;
}

std::string shown(const std::string& s) {
  std::string out;
  for (const char c : s.substr(0, 80)) {
    const auto u = static_cast<unsigned char>(c);
    out += u >= 0x20 && u < 0x7F && c != '\\' ? std::string(1, c) : fmt::format("\\x{:02x}", u);
  }
  return out;
}

std::string streamed(const std::shared_ptr<const Tokenizer>& t, const std::vector<int>& ids,
                     bool skip_special = false) {
  DecodeStream stream(t, skip_special);
  std::string out;
  for (const int id : ids) out += stream.put(id);
  return out + stream.finish();
}

// The 256 single bytes as the published file writes them (ids 1 to 256), then `extra` lines.
std::string byte_lines() {
  std::string out;
  for (int b = 0; b < 256; ++b) out += fmt::format("{} b'\\x{:02x}' 1\n", b + 1, b);
  return out;
}

std::string refusal(const std::string& text) {
  try {
    text::WorldVocab v(text, "v.txt");
  } catch (const FormatError& e) {
    return e.what();
  }
  return "(accepted)";
}

}  // namespace

TEST_CASE("The world tokenizer gives the reference trie tokenizer's ids and text", "[world][oracle]") {
  const char* path = std::getenv("RECUR_WORLD_ORACLE");
  REQUIRE(path != nullptr);  // ctest sets it, after tests/world/oracle.py wrote the file
  const auto file = detail::read_file(path);
  REQUIRE(file);
  const auto tok = committed();
  const text::WorldVocab vocab(*detail::read_file(kVocabFile), "committed");
  int n_ids = 0, n_texts = 0, n_bytes = 0, n_decodes = 0;
  for (const std::string& line : split(*file, '\n')) {
    if (line.empty()) continue;
    const auto f = split(line, '\t');
    if (f[0] == "V") {  // every id's bytes, as Python's own literal parser reads them
      const int id = std::stoi(f[1]);
      INFO("id " << id);
      CHECK(shown(tok->id_to_token(id)) == shown(unhex(f[2])));
      ++n_ids;
    } else if (f[0] == "T") {
      const std::string text = unhex(f[1]), decoded = unhex(f[3]);
      const std::vector<int> want = ids_of(f[2]);
      INFO("text \"" << shown(text) << "\"");
      CHECK(tok->encode(text) == want);
      CHECK(tok->encode(text, false) == want);
      CHECK(tok->decode(want) == decoded);
      CHECK(decoded == text);
      CHECK(streamed(tok, want) == decoded);
      ++n_texts;
    } else if (f[0] == "B") {  // not UTF-8: the trie itself, and decoding with U+FFFD
      const std::string bytes = unhex(f[1]), decoded = unhex(f[3]);
      const std::vector<int> want = ids_of(f[2]);
      INFO("bytes \"" << shown(bytes) << "\"");
      std::vector<int> got;
      vocab.encode(bytes, got);
      CHECK(got == want);
      CHECK(shown(tok->decode(want)) == shown(decoded));
      CHECK(shown(streamed(tok, want)) == shown(decoded));
      CHECK(text::invalid_utf8_at(bytes) != std::string::npos);  // the oracle made sure
      CHECK_THROWS_AS(tok->encode(bytes), ArgumentError);        // Tokenizer::encode takes UTF-8
      ++n_bytes;
    } else if (f[0] == "D") {
      const std::vector<int> ids = ids_of(f[1]);
      const std::string decoded = unhex(f[2]);
      INFO("ids " << f[1]);
      CHECK(shown(tok->decode(ids)) == shown(decoded));
      CHECK(shown(streamed(tok, ids)) == shown(decoded));
      ++n_decodes;
    } else {
      FAIL("unknown line in the oracle's file: " << line.substr(0, 40));
    }
  }
  CHECK(n_ids == tok->vocab_size() - 1);
  CHECK(n_texts >= 300);
  CHECK(n_bytes >= 50);
  CHECK(n_decodes >= 50);
  WARN(fmt::format("{} ids, {} texts, {} byte strings, {} id sequences equal to the reference",
                   n_ids, n_texts, n_bytes, n_decodes));
}

TEST_CASE("Python literals are read with every escape Python gives them", "[world][literal]") {
  struct Case {
    std::string literal, bytes;
  };
  const std::vector<Case> cases = {
      {"'a'", "a"}, {"\"a\"", "a"}, {"b'a'", "a"}, {"B\"a\"", "a"}, {"''", ""},
      {R"('\\')", "\\"}, {R"('\'')", "'"}, {R"("\"")", "\""}, {R"('\"')", "\""}, {R"("'")", "'"},
      {R"('\a\b\f\n\r\t\v')", "\a\b\f\n\r\t\v"}, {R"(b'\a\b\f\n\r\t\v')", "\a\b\f\n\r\t\v"},
      {R"('\0')", std::string(1, '\0')}, {R"('\7')", "\x07"}, {R"('\07')", "\x07"},
      {R"('\101')", "A"}, {R"('\1012')", "A2"}, {R"('\08')", std::string(1, '\0') + "8"},
      {R"('\377')", "\xC3\xBF"}, {R"(b'\377')", "\xFF"}, {R"('\777')", "\xC7\xBF"},
      {R"('\x41')", "A"}, {R"('\xe9')", "\xC3\xA9"}, {R"(b'\xe9')", "\xE9"}, {R"(b'\xE9\x00')", std::string("\xE9\0", 2)},
      {R"('\u00e9')", "\xC3\xA9"}, {R"('\u4E2D')", "\xE4\xB8\xAD"}, {R"('\U0001F600')", "\xF0\x9F\x98\x80"},
      {R"('\U0010ffff')", "\xF4\x8F\xBF\xBF"},
      // Escapes Python does not have keep the backslash.
      {R"('\q')", "\\q"}, {R"('\8')", "\\8"}, {R"('\ ')", "\\ "}, {R"('\é')", "\\\xC3\xA9"},
      {R"(b'\u00e9')", "\\u00e9"}, {R"(b'\U0001F600')", "\\U0001F600"}, {R"(b'\N{DIGIT ONE}')", "\\N{DIGIT ONE}"},
      {"'\xE4\xB8\xAD\xF0\x9F\x98\x80'", "\xE4\xB8\xAD\xF0\x9F\x98\x80"}, {"'\t\x01'", "\t\x01"},
  };
  for (const Case& c : cases) {
    INFO(c.literal);
    const text::PyLiteral lit = text::parse_py_literal(c.literal + " 1", 0);
    REQUIRE(lit.ok());
    CHECK(shown(lit.bytes) == shown(c.bytes));
    CHECK(lit.end == c.literal.size());
    CHECK(lit.is_bytes == (c.literal[0] == 'b' || c.literal[0] == 'B'));
  }
}

TEST_CASE("Python literals recur does not read are refused with the column and the reason", "[world][literal]") {
  struct Case {
    std::string literal;
    std::size_t column;
    std::string reason;
  };
  const std::vector<Case> cases = {
      {"x", 0, "expected a Python str or bytes literal"}, {"", 0, "expected a Python str"},
      {"r'a'", 0, "the prefix 'r' is not read"}, {"u'a'", 0, "the prefix 'u' is not read"},
      {"f'a'", 0, "the prefix 'f' is not read"}, {"rb'a'", 0, "the prefix 'r'"},
      {"br'a'", 1, "the prefix 'r' is not read"}, {"'''a'''", 0, "triple-quoted"},
      {"'abc", 0, "no closing quote"}, {"'abc\\'", 0, "no closing quote"}, {"b\"a", 1, "no closing quote"},
      {R"('\x4')", 1, "\\x needs 2 hexadecimal digits"}, {R"('\xg0')", 1, "\\x needs 2"},
      {R"(b'\x')", 2, "\\x needs 2"}, {R"('\u12')", 1, "\\u needs 4"}, {R"('\U0001F60')", 1, "\\U needs 8"},
      {R"('\U00110000')", 1, "past U+10FFFF"}, {R"('\ud800')", 1, "surrogate"}, {R"('\uDFFF')", 1, "surrogate"},
      {R"('\N{DIGIT ONE}')", 1, "named escape"}, {R"(b'\400')", 2, "past \\377"},
      {"b'\xC3\xA9'", 2, "non-ASCII character in a bytes literal"}, {"'a\xFF" "b'", 2, "does not start a UTF-8"},
      {"'a\xE4\xB8'", 2, "does not start a UTF-8"}, {std::string("'a\0'", 4), 2, "NUL"},
      {"'a\rb'", 2, "line break"},
  };
  for (const Case& c : cases) {
    INFO(shown(c.literal));
    const text::PyLiteral lit = text::parse_py_literal(c.literal, 0);
    REQUIRE_FALSE(lit.ok());
    CHECK(lit.error_at == c.column);
    CHECK_THAT(lit.error, Catch::Contains(c.reason));
    CHECK(lit.bytes.empty());
  }
}

TEST_CASE("A malformed vocabulary line is refused naming the file, the line and the column", "[world][refusal]") {
  const std::string ok = byte_lines();  // 256 lines
  struct Case {
    std::string text, message;
  };
  const std::vector<Case> cases = {
      {"", "v.txt: the file holds no tokens"},
      {"\n", "v.txt:1:1: an empty line"},
      {ok + "\n257 'ab' 2\n", "v.txt:257:1: an empty line"},
      {ok + "257 'ab' 3\n", "v.txt:257:10: the line says 3 bytes, the literal holds 2"},
      {ok + "257 '\xE4\xB8\xAD' 1\n", "v.txt:257:11: the line says 1 bytes, the literal holds 3"},
      {ok + "256 'ab' 2\n", "v.txt:257:1: id 256 again (line 256 has it)"},
      {ok + "259 'ab' 2\n", "v.txt:257:1: id 259 leaves a gap: id 257 to 258 are missing"},
      {ok + "258 'ab' 2\n", "v.txt:257:1: id 258 leaves a gap: id 257 is missing"},
      {"0 'a' 1\n", "v.txt:1:1: id 0 is not in the file"},
      {ok + "x 'ab' 2\n", "v.txt:257:1: expected the id (a decimal number)"},
      {ok + " 257 'ab' 2\n", "v.txt:257:1: expected the id"},
      {ok + "257\t'ab' 2\n", "v.txt:257:4: expected one space after the id, found byte 0x09"},
      {ok + "257  'ab' 2\n", "v.txt:257:5: expected a Python str or bytes literal"},
      {ok + "257 'ab'  2\n", "v.txt:257:10: expected the token's length in bytes"},
      {ok + "257 'ab' 2 \n", "v.txt:257:11: expected the token's length in bytes"},
      {ok + "257 'ab'2\n", "v.txt:257:9: expected one space after the literal, found '2'"},
      {ok + "257 'ab'\n", "v.txt:257:9: expected one space after the literal, found the end"},
      {ok + "257 'ab' \n", "v.txt:257:10: expected the token's length"},
      {ok + "257 'ab' 2x\n", "v.txt:257:11: expected the token's length"},
      {ok + "257 '' 0\n", "v.txt:257:6: an empty token"},
      {ok + "257 'a\\x4' 2\n", "v.txt:257:7: \\x needs 2 hexadecimal digits"},
      {ok + "257 r'ab' 2\n", "v.txt:257:5: the prefix 'r' is not read"},
      {ok + "257 'ab 2\n", "v.txt:257:5: the literal has no closing quote"},
      {ok + "257 'a\xFF' 2\n", "v.txt:257:7: byte 0xff is not UTF-8"},
      {ok + "257 'a\rb' 3\n", "v.txt:257:7: a carriage return inside the line"},
      {ok + "257 'ab' 99999999999999999999\n", "v.txt:257:10: the line says 1099511627776 bytes"},
      {byte_lines().substr(0, byte_lines().find("66 ")), "v.txt: byte 0x41 is no token of its own"},
      {"1 'ab' 2\n", "v.txt: byte 0x00 is no token of its own"},
      {"\xEF\xBB\xBF" + ok, "v.txt:1:1: a byte-order mark before the first id"},
  };
  for (const Case& c : cases) {
    INFO(shown(c.text.size() > 60 ? c.text.substr(c.text.size() - 40) : c.text));
    CHECK_THAT(refusal(c.text), Catch::StartsWith("[Tokenizer] ") && Catch::Contains(c.message));
  }
  // Lines that are fine: a CRLF file, a last line without its newline, the same bytes twice.
  CHECK(refusal(ok + "257 'ab' 2\r\n258 'abc' 3") == "(accepted)");
  const text::WorldVocab twice(ok + "257 'ab' 2\n258 b'ab' 2\n", "twice");
  CHECK(twice.find("ab") == 258);  // the later id, as the reference's map keeps it
  std::vector<int> ids;
  twice.encode("abab", ids);
  CHECK(ids == std::vector<int>{258, 258});
}

TEST_CASE("A model directory with rwkv_vocab_v20230424.txt loads it", "[world]") {
  CHECK(Tokenizer::present(kVocabDir));
  const auto from_dir = Tokenizer::load(kVocabDir);
  CHECK(from_dir->source() == kVocabFile);
  CHECK(from_dir->vocab_size() == committed()->vocab_size());
  CHECK(from_dir->vocab_size() == 3002);
  CHECK_THAT(from_dir->describe(), Catch::StartsWith("RWKV world vocabulary, 3002 ids"));
  // tokenizer.json beside it wins, as before.
  testing::TempDir dir;
  std::filesystem::copy_file(kVocabFile, dir.file("rwkv_vocab_v20230424.txt"));
  CHECK(Tokenizer::load(dir.str())->source() == dir.file("rwkv_vocab_v20230424.txt"));
  { std::ofstream(dir.file("tokenizer.json")) << "{}"; }
  CHECK_THROWS_WITH(Tokenizer::load(dir.str()), Catch::Contains("tokenizer.json"));
  testing::TempDir empty;
  CHECK_FALSE(Tokenizer::present(empty.str()));
  CHECK_THROWS_WITH(Tokenizer::load(empty.str()), Catch::Contains("cannot read the file"));
  { std::ofstream(dir.file("bom.txt")) << "\xEF\xBB\xBF" << byte_lines(); }
  CHECK_THROWS_WITH(Tokenizer::load(dir.file("bom.txt")), Catch::Contains("bom.txt:1:1: a byte-order mark"));
  CHECK_THROWS_WITH(Tokenizer::from_rwkv_vocab("1 'a' 2\n", "mine.txt"),
                    Catch::Contains("[Tokenizer] mine.txt:1:7: the line says 2 bytes, the literal holds 1"));
}

TEST_CASE("Id 0 ends a text: special, no text, never produced by encoding", "[world]") {
  const auto tok = committed();
  CHECK(tok->is_special(0));
  CHECK_FALSE(tok->is_special(1));
  CHECK(tok->id_to_token(0) == "<|endoftext|>");
  CHECK(tok->token_to_id("<|endoftext|>") == 0);
  const std::vector<int> hello = tok->encode("Hello");
  std::vector<int> with_end = hello;
  with_end.push_back(0);
  with_end.insert(with_end.end(), hello.begin(), hello.end());
  CHECK(tok->decode(with_end) == "HelloHello");
  CHECK(tok->decode(with_end, true) == "HelloHello");
  CHECK(streamed(tok, with_end) == "HelloHello");
  const std::vector<int> ids = tok->encode("<|endoftext|>");
  CHECK(std::find(ids.begin(), ids.end(), 0) == ids.end());
  CHECK(tok->decode(ids) == "<|endoftext|>");
}

TEST_CASE("The world tokenizer's lookups and its refusals of bad ids and text", "[world]") {
  const auto tok = committed();
  CHECK(tok->token_to_id("\xE4\xB8") == std::nullopt);  // a piece no token is
  for (int id = 1; id < tok->vocab_size(); id += 37) {
    const std::string& bytes = tok->id_to_token(id);
    INFO("id " << id << " \"" << shown(bytes) << "\"");
    REQUIRE(tok->token_to_id(bytes).has_value());
    CHECK(tok->id_to_token(*tok->token_to_id(bytes)) == bytes);
    if (text::invalid_utf8_at(bytes) == std::string::npos)  // as text, it is its own one token
      CHECK(tok->encode(bytes) == std::vector<int>{*tok->token_to_id(bytes)});
  }
  CHECK(tok->token_to_id(" the") == tok->vocab_size() - 1);  // given twice: the later id
  CHECK_THROWS_WITH(tok->decode({5, tok->vocab_size()}), Catch::Contains("[Tokenizer::decode] id 3002 is not in the vocabulary"));
  CHECK_THROWS_AS(tok->decode({-1}), ArgumentError);
  CHECK_THROWS_AS(tok->id_to_token(tok->vocab_size()), ArgumentError);
  CHECK_THROWS_WITH(tok->encode("ab\xFF"), Catch::Contains("not UTF-8 at byte 2 of 3"));
  DecodeStream stream(tok);
  CHECK_THROWS_AS(stream.put(9999), ArgumentError);
}

TEST_CASE("Random bytes and texts go through the world tokenizer and come back whole", "[world]") {
  const auto tok = committed();
  const text::WorldVocab vocab(*detail::read_file(kVocabFile), "committed");
  std::mt19937 rng(7);
  for (int round = 0; round < 300; ++round) {
    std::string bytes(static_cast<std::size_t>(rng() % 64), '\0');
    for (char& c : bytes) c = static_cast<char>(rng() % 256);
    std::vector<int> ids;
    vocab.encode(bytes, ids);
    std::string back;
    for (const int id : ids) back += vocab.tokens()[static_cast<std::size_t>(id)];
    REQUIRE(shown(back) == shown(bytes));
    // Greedy: no token could have been longer at the start of each one.
    std::size_t at = 0;
    for (const int id : ids) {
      const std::size_t len = vocab.tokens()[static_cast<std::size_t>(id)].size();
      for (std::size_t longer = len + 1; at + longer <= bytes.size() && longer <= vocab.max_token_bytes(); ++longer)
        CHECK_FALSE(vocab.find(bytes.substr(at, longer)).has_value());
      at += len;
    }
  }
}

TEST_CASE("DecodeStream gives what decode gives for random ids of the world vocabulary", "[world]") {
  const auto tok = committed();
  std::mt19937 rng(11);
  for (int round = 0; round < 300; ++round) {
    std::vector<int> ids(rng() % 40);
    for (int& id : ids) id = static_cast<int>(rng() % static_cast<unsigned>(tok->vocab_size()));
    INFO("round " << round);
    const std::string whole = tok->decode(ids);
    CHECK(shown(streamed(tok, ids)) == shown(whole));
    CHECK(shown(streamed(tok, ids, true)) == shown(tok->decode(ids, true)));
    // What has been written is never taken back: at every step it begins the whole text.
    DecodeStream stream(tok);
    std::string so_far;
    for (const int id : ids) {
      so_far += stream.put(id);
      REQUIRE(shown(whole.substr(0, so_far.size())) == shown(so_far));
    }
  }
}
