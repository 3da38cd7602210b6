// recur generate, recur score, recur make-model, recur convert: the model-level commands.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "cli.h"
#include "commands.h"
#include "text/unicode.h"
#include "text_model.h"
#include "recur/error.h"
#include "recur/isa.h"
#include "recur/model.h"
#include "recur/quantize.h"
#include "recur/sampling.h"
#include "recur/tokenizer.h"
#include "util/file.h"
#include "util/json.h"

namespace recur::cli {



// Where the built-in model lives: RECUR_MODEL, else RECUR_BUILTIN_MODEL_RELPATH from the
// directory of the running binary (<prefix>/bin/recur finds <prefix>/share/recur/models/kjv; the
// build tree holds a link at the same place), so that an installed or moved tree finds its own.
std::string builtin_dir() {
  const char* env = std::getenv("RECUR_MODEL");
  if (env && *env) return env;
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return RECUR_BUILTIN_MODEL_RELPATH;  // no /proc: relative to the working directory
  return (exe.parent_path() / RECUR_BUILTIN_MODEL_RELPATH).lexically_normal().string();
}

TextModel open_model(const Args& args) {
  TextModel m;
  if (args.flag_set("random-model")) {
    m.model = Model::builtin(kBuiltinSeed);
    m.label = "random";
    m.random = true;
    return m;
  }
  const bool builtin = !args.given("model");
  const std::string dir = builtin ? builtin_dir() : args.str("model");
  if (builtin && !std::filesystem::is_directory(dir))
    throw ArgumentError(fmt::format(
        "the built-in model is not at {} (the binary looks for it at " RECUR_BUILTIN_MODEL_RELPATH
        " from its own directory, where `cmake --install` puts it; RECUR_MODEL may point "
        "elsewhere): pass -m DIR, or --random-model for random weights",
        printable(dir)));
  m.model = Model::load(dir);
  m.label = builtin ? "built-in (King James Bible)" : m.model->source();
  const bool own_tokenizer = args.declared("tokenizer") && args.given("tokenizer");
  if (own_tokenizer || Tokenizer::present(dir)) {
    m.tokenizer = Tokenizer::load(own_tokenizer ? args.str("tokenizer") : dir);
    if (m.tokenizer->vocab_size() > m.model->config().vocab_size)
      fmt::print(stderr, "warning: the tokenizer has {} ids and the model {}: ids past the "
                         "model's vocabulary will be refused\n",
                 m.tokenizer->vocab_size(), m.model->config().vocab_size);
  } else if (m.model->config().architecture == Architecture::kBased) {
    // Based's checkpoints ship no tokenizer: they were trained on GPT-2's ids, not bytes.
    m.no_text = fmt::format(
        "{} holds no tokenizer.json, and this Based model was trained on GPT-2's tokenizer: pass "
        "--tokenizer FILE|DIR (GPT-2's tokenizer.json), or give and take token ids "
        "(--prompt-ids and --ids, --token-ids)", printable(dir));
  } else {
    for (const char* name : {"tokenizer.model", "vocab.json"}) {
      if (std::filesystem::exists(std::filesystem::path(dir) / name)) {
        fmt::print(stderr, "warning: the model ships {} but no tokenizer.json, the only tokenizer "
                           "format recur reads: text is fed as bytes, not the ids the model was "
                           "trained on. Tokenize elsewhere and pass ids.\n", name);
        break;
      }
    }
  }
  return m;
}

void TextModel::require_text() const {
  if (!no_text.empty()) throw ArgumentError(no_text);
}

// The kernels' instruction set, for the progress lines; the whole choice with --verbose.
std::string kernels_line(bool verbose) {
  if (!verbose) return recur::isa();
  return fmt::format("kernels: {} (this CPU runs {}; this build has {}; RECUR_ISA forces one)",
                     recur::isa(), fmt::join(recur::available_isas(), ", "),
                     fmt::join(recur::compiled_isas(), ", "));
}

void describe_model(const TextModel& tm) {
  const Model& m = *tm.model;
  const ModelConfig& c = m.config();
  if (c.architecture == Architecture::kBased) {
    const auto count = [&](MixerKind k) {
      return std::count(c.mixers.begin(), c.mixers.end(), k);
    };
    const Decoder probe(tm.model, DecoderOptions{1, 1});
    const auto mib = [&](MixerKind k) { return double(probe.state_bytes(k)) / double(1 << 20); };
    fmt::print(stderr, "model: {}: based, {} layers ({} BaseConv, {} Taylor linear attention, {} "
                       "sliding window of {} tokens), hidden {}, vocab {}, {:.2f}M parameters\n",
               tm.label, c.num_hidden_layers, count(MixerKind::kShortConv),
               count(MixerKind::kLinearAttention), count(MixerKind::kWindowAttention),
               c.window_size / 2 + 1, c.hidden_size, c.vocab_size, double(m.parameters()) / 1e6);
    fmt::print(stderr, "state: {:.2f} MiB in the convolutions, {:.2f} MiB in linear attention, "
                       "{:.2f} MiB in the windows: {:.2f} MiB at any length\n",
               mib(MixerKind::kShortConv), mib(MixerKind::kLinearAttention),
               mib(MixerKind::kWindowAttention), double(probe.state_bytes()) / double(1 << 20));
  } else {
  fmt::print(stderr, "model: {}: {}, {} layers, hidden {}, {} heads{}, feature map {}, {} form, "
                     "vocab {}, {:.2f}M parameters\n",
             tm.label,
             c.architecture == Architecture::kLinearAttn ? "linear_attn"
             : c.architecture == Architecture::kBased    ? "based"
                                                          : "transformers_are_rnns",
             c.num_hidden_layers, c.hidden_size, c.num_heads,
             c.num_kv_heads != c.num_heads ? fmt::format(" ({} kv)", c.num_kv_heads) : "",
             ModelConfig::feature_map_name(c.feature_map),
             c.norm_feature_map ? "normalized" : "unnormalized", c.vocab_size,
             double(m.parameters()) / 1e6);
  }
  fmt::print(stderr, "weights: {}, {} read per decoded token\n", m.weight_format(),
             human_bytes(double(m.weight_bytes_per_token())));
  if (tm.tokenizer)
    fmt::print(stderr, "tokenizer: {}\n", tm.tokenizer->describe());
  else
    fmt::print(stderr, "tokenizer: none; {}\n", tm.no_text.empty() ? "text is bytes (ids 0-255)"
                                                                    : "token ids only");
  if (tm.random)
    fmt::print(stderr, "model: random weights (seed {}), so its text is noise\n", kBuiltinSeed);
}

namespace {

DecoderOptions decoder_options(const Args& args) {
  DecoderOptions o;
  o.chunk = static_cast<int>(args.integer("chunk", 1, 1 << 16));
  o.threads = threads_option(args);
  return o;
}


// Writes generated bytes to stdout as they come. Unless raw, bytes that would upset a terminal
// (control characters, broken UTF-8) are shown as \xNN; complete UTF-8 sequences pass through.
class TextSink {
 public:
  explicit TextSink(bool raw) : raw_(raw), utf8_(text::Utf8Stream::Invalid::kEscape) {}

  void put(const std::string& bytes) {
    if (raw_)
      std::fwrite(bytes.data(), 1, bytes.size(), stdout);
    else
      write(utf8_.put(bytes));
    flush_stdout();
  }
  void finish() {
    if (!raw_) write(utf8_.finish());
    flush_stdout();
  }

 private:
  // Well-formed UTF-8 from the stream (engine/text's, the server's too: ill-formed bytes already
  // shown as \xNN), with control characters but newline and tab shown the same way.
  static void write(const std::string& text) {
    for (const char ch : text) {
      const auto b = static_cast<unsigned char>(ch);
      if (b == '\n' || b == '\t' || (b >= 0x20 && b != 0x7F))
        std::fputc(b, stdout);
      else
        std::fprintf(stdout, "\\x%02x", b);
    }
  }
  bool raw_;
  text::Utf8Stream utf8_;
};

}  // namespace

int run_generate(int argc, char** argv) {
  Args args("generate",
            "Prefills the prompt in chunks, then streams generated text to stdout token by token.\n"
            "Progress and figures go to stderr: prefill and decode tokens/s and the state's size,\n"
            "which stays the same however long the text. Without -m it runs the built-in model,\n"
            "trained on the King James Bible (models/kjv).");
  args.option("model", "", "model directory (config.json, safetensors or pytorch_model.bin, "
                           "tokenizer.json); default: the built-in model", 'm')
      .option("tokenizer", "", "tokenizer.json, or a directory that holds one, for a model "
                               "directory without its own (Based's checkpoints use GPT-2's)")
      .option("prompt", "", "prompt text (default: \"And it came to pass\" for the built-in model, "
                            "\"The quick brown fox\" otherwise; nothing after --load-state)", 'p')
      .option("prompt-file", "", "read the prompt from this file ('-': standard input)", 'f')
      .option("prompt-ids", "", "read the prompt as token ids, one per line ('-': standard input)")
      .option("tokens", "200", "how many tokens to generate (a count, as everywhere in recur)", 'n')
      .option("chunk", "64", "prefill chunk size (changes speed, never the result)")
      .option("threads", "0", "worker threads, 0: all cores (changes speed, never the result)")
      .option("temperature", "0.8", "sampling temperature; 0 is greedy")
      .option("top-k", "40", "sample among the k most likely tokens; 0: all")
      .option("top-p", "0.95", "sample among the most likely tokens holding this much probability")
      .option("repetition-penalty", "1.0", "> 1 discourages tokens already in the context")
      .option("seed", "0", "sampling seed (after --load-state: the saved random state continues "
                           "unless --seed is given)")
      .option("load-state", "", "continue from a state saved by --save-state")
      .option("save-state", "", "save the state at the end, to continue or branch later")
      .flag("greedy", "always take the most likely token (same as --temperature 0)")
      .flag("raw", "write generated bytes as they are, control characters included")
      .flag("ids", "write generated token ids, one per line, instead of text")
      .flag("no-special", "encode the prompt without what the tokenizer's post-processor adds (a BOS)")
      .flag("ignore-eos", "keep generating past the model's end-of-sequence id (eos_token_id)")
      .flag("random-model", "the random-weight test model (byte-level, seed 1) instead of the built-in one")
      .flag("verbose", "also say which instruction set the kernels run on, and which others there are", 'v')
      .excludes("greedy", "temperature")
      .excludes("prompt", "prompt-file")
      .excludes("prompt", "prompt-ids")
      .excludes("prompt-file", "prompt-ids")
      .excludes("raw", "ids")
      .excludes("random-model", "model")
      .footer(
          "Text goes through the model's tokenizer.json (the Hugging Face format; `recur tokenize`\n"
          "shows the ids). A model without one reads text as bytes (ids 0-255), and an id above\n"
          "255 is written as <|id|>. --prompt-ids and --ids take and give ids directly.\n\n"
          "A saved state holds the model's state, the tokens so far and the sampler's random\n"
          "state: `--load-state F` with the same options continues exactly as the run that was\n"
          "never interrupted (the prompt, if any, is then encoded without a BOS). --save-state\n"
          "writes beside the file and renames it over, so a failed save leaves the old file; it\n"
          "replaces only a regular file and follows a symbolic link to its target.");
  if (!args.parse(argc, argv, 2)) return 0;
  SamplerOptions so;
  so.temperature = args.flag_set("greedy") ? 0.0f : static_cast<float>(args.real("temperature", 0, 1e6));
  so.top_k = static_cast<int>(args.integer("top-k", 0, 1 << 24));
  so.top_p = static_cast<float>(args.real("top-p", 1e-9, 1.0));
  so.repetition_penalty = static_cast<float>(args.real("repetition-penalty", 1e-6, 1e6));
  so.seed = static_cast<std::uint64_t>(args.integer("seed", 0, INT64_MAX));
  const auto n_new = args.integer("tokens", 0, 1LL << 40);
  const DecoderOptions options = decoder_options(args);
  const bool loading = args.given("load-state");
  if (args.given("save-state")) check_output(args.str("save-state"), "--save-state");
  Sampler sampler(so);

  const TextModel tm = open_model(args);
  const auto& model = tm.model;
  describe_model(tm);
  if (args.flag_set("verbose")) fmt::print(stderr, "{}\n", kernels_line(true));
  const auto& tokenizer = tm.tokenizer;
  const bool ids_in = args.given("prompt-ids"), ids_out = args.flag_set("ids");
  if (!tokenizer && model->config().vocab_size < ByteTokenizer::kVocab && !ids_in)
    throw ArgumentError(fmt::format("the model's vocabulary has {} ids, fewer than the 256 the "
                                    "byte-level tokenizer needs: use --prompt-ids",
                                    model->config().vocab_size));
  const std::string fallback_prompt = args.given("model") || tm.random ? "The quick brown fox"
                                                                       : "And it came to pass";
  const std::string prompt = args.given("prompt-file") ? read_input(args.str("prompt-file"), "--prompt-file")
                             : args.given("prompt")    ? args.str("prompt")
                             : ids_in || loading       ? std::string()
                                                       : fallback_prompt;
  if ((!ids_in && !prompt.empty()) || !ids_out) tm.require_text();
  // A continuation gets no second BOS.
  const bool add_special = !loading && !args.flag_set("no-special");
  const std::vector<int> prompt_ids =
      ids_in      ? read_token_ids(args.str("prompt-ids"), "--prompt-ids")
      : tokenizer ? tokenizer->encode(prompt, add_special)
                  : ByteTokenizer().encode(prompt);

  Decoder decoder(model, options);
  std::vector<int> history;  // every token so far: the repetition penalty's context
  if (loading) {
    SessionData session;
    decoder.load(args.str("load-state"), &session);
    history = std::move(session.tokens);
    if (session.has_sampler_state && !args.given("seed")) sampler.set_state(session.sampler_state);
    fmt::print(stderr, "state: loaded {} ({} tokens seen)\n", printable(args.str("load-state")),
               decoder.n_tokens());
  }
  if (prompt_ids.empty() && decoder.n_tokens() == 0)
    throw ArgumentError("the prompt is empty and no state was loaded: nothing to continue from");
  history.insert(history.end(), prompt_ids.begin(), prompt_ids.end());

  TextSink out(args.flag_set("raw"));
  // Generated text is decoded as a stream whose context is the last tokens before it, so that
  // a decoder that treats the first token specially (a stripped leading space) does not.
  std::optional<DecodeStream> stream;
  if (tokenizer && !ids_out) {
    stream.emplace(tokenizer);
    const std::size_t context = std::min<std::size_t>(history.size(), 8);
    for (std::size_t i = history.size() - context; i < history.size(); ++i) stream->put(history[i]);
  }
  if (!ids_out) out.put(ids_in && tokenizer ? tokenizer->decode(prompt_ids) : prompt);
  const auto n_prompt = static_cast<std::int64_t>(prompt_ids.size());
  Progress progress("prefill", n_prompt);
  double t0 = now_seconds();
  if (!prompt_ids.empty()) {
    if (n_prompt > options.chunk)
      decoder.prefill(prompt_ids, [&](std::int64_t done, std::int64_t) { progress.update(done); });
    else
      decoder.prefill(prompt_ids);
  }
  if (n_prompt > options.chunk) progress.finish();
  const double prefill_s = now_seconds() - t0;

  const auto& eos = model->config().eos_token_ids;
  const bool stop_at_eos = !args.flag_set("ignore-eos");
  std::int64_t generated = 0, beyond_bytes = 0;
  bool ended = false;
  t0 = now_seconds();
  for (; generated < n_new; ++generated) {
    const int token = sampler.sample(decoder.logits(), history);
    if (stop_at_eos && std::find(eos.begin(), eos.end(), token) != eos.end()) {
      ended = true;
      break;
    }
    history.push_back(token);
    if (ids_out) {
      std::fprintf(stdout, "%d\n", token);
      flush_stdout();
    } else if (stream) {
      out.put(stream->put(token));
    } else if (token >= ByteTokenizer::kVocab) {
      ++beyond_bytes;
      out.put(fmt::format("<|{}|>", token));
    } else {
      out.put(ByteTokenizer().decode(token));
    }
    decoder.step(token);
  }
  const double decode_s = now_seconds() - t0;
  if (!ids_out) {
    if (stream) out.put(stream->finish());
    out.finish();
    std::fputc('\n', stdout);
  }
  flush_stdout();

  fmt::print(stderr, "prefill: {} tokens in {:.3f} s = {:.0f} tokens/s (chunk {}, threads {}, kernels {})\n",
             n_prompt, prefill_s, double(n_prompt) / std::max(prefill_s, 1e-9), options.chunk,
             options.threads == 0 ? std::string("all") : std::to_string(options.threads),
             kernels_line(false));
  fmt::print(stderr, "decode:  {} tokens in {:.3f} s = {:.1f} tokens/s{}\n", generated, decode_s,
             double(generated) / std::max(decode_s, 1e-9),
             ended ? " (stopped at the end-of-sequence id)" : "");
  fmt::print(stderr, "state:   {} bytes ({}) after {} tokens; the same at any length (weights "
                     "{}, {} per token)\n",
             decoder.state_bytes(), human_bytes(double(decoder.state_bytes())), decoder.n_tokens(),
             model->weight_format(), human_bytes(double(model->weight_bytes_per_token())));
  if (beyond_bytes > 0)
    fmt::print(stderr, "warning: {} generated ids were outside the byte range and are written as "
                       "<|id|>; use --ids to read ids\n", beyond_bytes);
  if (args.given("save-state")) {
    SessionData session;
    session.tokens = history;
    session.has_sampler_state = true;
    session.sampler_state = sampler.state();
    decoder.save(args.str("save-state"), &session);
    fmt::print(stderr, "state: saved to {}\n", printable(args.str("save-state")));
  }
  return 0;
}

int run_score(int argc, char** argv) {
  Args args("score",
            "Runs the tokens through the model in chunks and prints the mean negative\n"
            "log-likelihood (nats per token) of each token after the first given those before it,\n"
            "the perplexity exp(mean_nll) and, for text, bits per byte. --json prints the numbers\n"
            "with 17 significant digits: the same digits at any --chunk and --threads.");
  args.option("model", "", "model directory; default: the built-in model", 'm')
      .option("tokenizer", "", "tokenizer.json, or a directory that holds one, for a model "
                               "directory without its own (Based's checkpoints use GPT-2's)")
      .option("file", "", "text to score, through the model's tokenizer.json (bytes without one; "
                          "'-': standard input)", 'f')
      .option("token-ids", "", "token ids to score, one per line ('-': standard input)")
      .option("chunk", "64", "prefill chunk size (changes speed, never the result)")
      .option("threads", "0", "worker threads, 0: all cores (changes speed, never the result)")
      .flag("no-special", "encode without what the tokenizer's post-processor adds (a BOS)")
      .flag("random-model", "the random-weight test model (byte-level, seed 1)")
      .flag("verbose", "also say which instruction set the kernels run on, and which others there are", 'v')
      .flag("json", "print {\"tokens\", \"predicted\", \"mean_nll\", \"ppl\", \"bytes\", "
                    "\"bits_per_byte\"} as JSON (ppl is null when exp(mean_nll) overflows; bytes "
                    "and bits_per_byte are null for ids)")
      .retired("tokens", "score --tokens FILE is now --token-ids FILE (--tokens is a count in every "
                         "other command)")
      .excludes("file", "token-ids")
      .excludes("random-model", "model");
  if (!args.parse(argc, argv, 2)) return 0;
  if (!args.given("file") && !args.given("token-ids"))
    throw ArgumentError("give the text to score: -f FILE or --token-ids FILE");
  const TextModel tm = open_model(args);
  const auto& model = tm.model;
  std::vector<int> tokens;
  std::int64_t n_bytes = -1;
  if (args.given("file")) {
    tm.require_text();
    const std::string text = read_input(args.str("file"), "--file");
    n_bytes = static_cast<std::int64_t>(text.size());
    tokens = tm.tokenizer ? tm.tokenizer->encode(text, !args.flag_set("no-special"))
                          : ByteTokenizer().encode(text);
  } else {
    tokens = read_token_ids(args.str("token-ids"), "--token-ids");
  }
  if (tokens.size() < 2)
    throw ArgumentError(fmt::format("{} tokens: scoring needs at least 2", tokens.size()));
  if (!args.flag_set("json")) describe_model(tm);
  if (args.flag_set("verbose")) fmt::print(stderr, "{}\n", kernels_line(true));
  const int V = model->config().vocab_size;
  Decoder decoder(model, decoder_options(args));
  Progress progress("score", static_cast<std::int64_t>(tokens.size()));
  double nll = 0.0;
  const double t0 = now_seconds();
  decoder.prefill(
      tokens, [&](std::int64_t done, std::int64_t) { progress.update(done); },
      [&](std::int64_t pos, const float* logits) {
        if (pos + 1 < static_cast<std::int64_t>(tokens.size()))
          nll -= log_probability(logits, V, tokens[static_cast<std::size_t>(pos + 1)]);
      });
  progress.finish();
  const double seconds = now_seconds() - t0;
  const auto predicted = static_cast<std::int64_t>(tokens.size()) - 1;
  const double mean = nll / double(predicted);
  if (!std::isfinite(mean))
    throw NumericError(fmt::format("[score] the mean negative log-likelihood is {}", mean));
  const double ppl = std::exp(mean);
  // Bits per byte: the whole text's information over its bytes (the first token is given).
  const double bpb = n_bytes > 0 ? nll / std::log(2.0) / double(n_bytes) : 0.0;
  if (args.flag_set("json")) {
    // JSON has no infinity: a perplexity past the largest double is null.
    fmt::print("{{\"tokens\": {}, \"predicted\": {}, \"mean_nll\": {:.17g}, \"ppl\": {}, "
               "\"bytes\": {}, \"bits_per_byte\": {}}}\n",
               tokens.size(), predicted, mean,
               std::isfinite(ppl) ? fmt::format("{:.17g}", ppl) : std::string("null"),
               n_bytes >= 0 ? std::to_string(n_bytes) : "null",
               n_bytes > 0 ? fmt::format("{:.17g}", bpb) : std::string("null"));
  } else {
    fmt::print("tokens: {} ({} predicted)\nmean NLL: {:.6f} nats/token\nperplexity: {:.4f}\n",
               tokens.size(), predicted, mean, ppl);
    if (n_bytes > 0) fmt::print("bits per byte: {:.4f} ({} bytes)\n", bpb, n_bytes);
    fmt::print(stderr, "{:.0f} tokens/s (kernels {})\n", double(tokens.size()) / std::max(seconds, 1e-9),
               kernels_line(false));
  }
  flush_stdout();
  return 0;
}

namespace {

// The files of a model recur writes and reads in a directory.
bool is_model_file(const std::string& name) {
  if (name == "config.json" || name == "model.safetensors" || name == "model.safetensors.index.json")
    return true;
  return name.rfind("model-", 0) == 0 && name.size() > 12 &&
         name.compare(name.size() - 12, 12, ".safetensors") == 0;
}

// make-model writes into an empty or new directory; one that holds a model is replaced only
// with --force, and then every model file in it goes first, so that no old shard or index can
// be paired with the new config.
void prepare_model_dir(const std::string& dir, bool force) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const auto status = fs::status(dir, ec);
  if (!fs::exists(status)) return;
  if (!fs::is_directory(status))
    throw ArgumentError(fmt::format("{} exists and is not a directory", printable(dir)));
  std::vector<fs::path> found;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (is_model_file(e.path().filename().string())) found.push_back(e.path());
  if (found.empty()) return;
  if (!force)
    throw ArgumentError(fmt::format("{} already holds a model ({} and {} more files); pass --force "
                                    "to replace it", printable(dir),
                                    printable(found.front().filename().string()), found.size() - 1));
  for (const auto& f : found) {
    fs::remove(f, ec);
    if (ec) throw Error(fmt::format("cannot remove {}: {}", printable(f.string()), ec.message()));
  }
}

}  // namespace

int run_make_model(int argc, char** argv) {
  Args args("make-model",
            "Writes a model with random weights (config.json + model.safetensors, or shards with\n"
            "model.safetensors.index.json) in the layout `recur generate -m DIR` reads. For tests\n"
            "and demos: the weights are random, so is the text.");
  args.option("arch", "linear_attn", "linear_attn, transformers_are_rnns or based")
      .option("config", "", "take the configuration from this config.json")
      .option("vocab", "256", "vocabulary size")
      .option("hidden", "64", "hidden size (d_model)")
      .option("layers", "2", "layers")
      .option("heads", "4", "attention heads")
      .option("kv-heads", "", "key/value heads (linear_attn; default: as many as heads)")
      .option("expand-k", "", "key width / hidden size (linear_attn; default 1)")
      .option("expand-v", "", "value width / hidden size (linear_attn; default 1)")
      .option("intermediate", "0", "MLP width, 0: the model type's default")
      .option("feature-map", "elu", "elu, relu, identity, hedgehog, t2r, dpfp, elementwise_product")
      .option("hidden-act", "", "relu or gelu (transformers_are_rnns; default relu)")
      .option("dtype", "f32", "stored dtype: f32, bf16 or f16")
      .option("shards", "1", "files to split the weights over (more than 1 writes an index)")
      .option("seed", "1", "seed of the random weights")
      .option("la-layers", "", "based: the Taylor linear-attention layers, e.g. 1,6 (alt_mixer_layers)")
      .option("window-layers", "", "based: the sliding-window layers, e.g. 2,7 (alt_mixer_2_layers)")
      .option("la-heads", "", "based: linear-attention heads (default: --heads)")
      .option("feature-dim", "16", "based: q and k width per linear-attention head")
      .option("window-size", "16", "based: window_size (a token sees window_size / 2 before it)")
      .flag("normalized", "the normalized form (norm_feature_map, linear_attn)")
      .flag("norm-q", "norm_q: divide phi(q) by its sum (linear_attn)")
      .flag("norm-k", "norm_k: divide phi(k) by its sum (linear_attn)")
      .flag("tie-feature-maps", "one learned feature map for q and k (linear_attn)")
      .flag("no-affine", "no weight in the per-head output norm (linear_attn)")
      .flag("tie-embeddings", "the LM head reuses the embedding matrix")
      .flag("builtin", "write the random-weight test model (--random-model: its configuration and seed)")
      .flag("force", "replace a model already in DIR (its config.json, safetensors and index go "
                     "first; other files stay)")
      .positionals(1, "DIR")
      .footer("DIR is created if needed. A DIR that already holds a model is refused unless\n"
              "--force. Files are written beside their final names and renamed into place.");
  if (!args.parse(argc, argv, 2)) return 0;
  if (args.positional().empty()) throw ArgumentError("give the directory to write: recur make-model DIR");
  const std::string dir = args.positional()[0];
  const char* shape_options[] = {"arch", "vocab", "hidden", "layers", "heads", "kv-heads",
                                 "la-layers", "window-layers", "la-heads", "feature-dim",
                                 "window-size",
                                 "expand-k", "expand-v", "intermediate", "feature-map",
                                 "hidden-act", "normalized", "norm-q", "norm-k",
                                 "tie-feature-maps", "no-affine", "tie-embeddings", "seed"};
  for (const char* o : shape_options) {
    if (args.flag_set("builtin") && args.given(o))
      throw ArgumentError(fmt::format("--builtin writes the built-in model as it is: --{} does not apply", o));
    if (args.given("config") && args.given(o) && std::string(o) != "seed")
      throw ArgumentError(fmt::format("--config gives the shape: --{} does not apply", o));
  }
  if (args.flag_set("builtin") && args.given("config"))
    throw ArgumentError("give at most one of --builtin and --config");
  const std::string arch = args.str("arch");
  if (arch != "linear_attn" && arch != "transformers_are_rnns" && arch != "based")
    throw ArgumentError(fmt::format("--arch is '{}', expected linear_attn, transformers_are_rnns "
                                    "or based", printable(arch)));
  for (const char* o : {"la-layers", "window-layers", "la-heads", "feature-dim", "window-size"})
    if (arch != "based" && args.given(o))
      throw ArgumentError(fmt::format("--{} applies to --arch based only", o));
  if (!args.flag_set("builtin") && !args.given("config")) {
    const char* fla_only[] = {"kv-heads", "expand-k", "expand-v", "normalized", "norm-q",
                              "norm-k", "tie-feature-maps", "no-affine"};
    for (const char* o : fla_only)
      if (arch != "linear_attn" && args.given(o))
        throw ArgumentError(fmt::format("--{} applies to --arch linear_attn only", o));
    if (arch == "linear_attn" && args.given("hidden-act"))
      throw ArgumentError("--hidden-act applies to --arch transformers_are_rnns only (linear_attn "
                          "uses swish)");
  }
  ModelConfig c;
  std::uint64_t seed = static_cast<std::uint64_t>(args.integer("seed", 0, INT64_MAX));
  if (args.flag_set("builtin")) {
    c = Model::builtin_config();
    seed = kBuiltinSeed;
  } else if (args.given("config")) {
    c = ModelConfig::from_json(read_input(args.str("config"), "--config", 16u << 20), args.str("config"));
  } else if (arch == "based") {
    if (args.given("feature-map") || args.given("hidden-act") || args.given("tie-embeddings"))
      throw ArgumentError("--feature-map, --hidden-act and --tie-embeddings do not apply to --arch "
                          "based (Taylor map, SwiGLU, tied head)");
    // A list of layer indices, "1,6,11": digits and commas only; config.json's reader checks
    // the range and repeats.
    const auto ids = [&](const char* name) {
      const std::string v = args.str(name);
      if (v.find_first_not_of("0123456789,") != std::string::npos || v.find(",,") != std::string::npos ||
          (!v.empty() && (v.front() == ',' || v.back() == ',')))
        throw ArgumentError(fmt::format("--{} is '{}', expected layer indices such as 1,6,11", name,
                                        printable(v)));
      for (std::size_t i = 0, j; i < v.size(); i = j + 1) {
        j = v.find(',', i);
        if (j == std::string::npos) j = v.size();
        if (j - i > 4)
          throw ArgumentError(fmt::format("--{}: layer index {} is too large", name, printable(v.substr(i, j - i))));
      }
      return "[" + v + "]";
    };
    const auto heads = args.integer("heads", 1, 1 << 16);
    const std::string json = fmt::format(
        "{{\"model_type\": \"gpt2\", \"vocab_size\": {}, \"n_embd\": {}, \"n_layer\": {}, "
        "\"n_head\": {}, {}\"rms_norm\": true, \"activation_function\": \"swiglu\", "
        "\"pad_vocab_size_multiple\": 8, \"alt_mixer_layers\": {}, \"alt_mixer_2_layers\": {}, "
        "\"mixer\": {{\"_target_\": \"based.models.mixers.convolution.BaseConv\", "
        "\"use_bias\": true, \"expand_proj\": 4, \"kernel_sizes\": 3}}, "
        "\"alt_mixer\": {{\"_target_\": \"based.models.mixers.linear_attention.LinearAttention\", "
        "\"feature_dim\": {}, \"num_heads\": {}}}, "
        "\"alt_mixer_2\": {{\"_target_\": \"based.models.mixers.slide_attention.SlidingAttention\", "
        "\"window_size\": {}, \"num_heads\": {}}}}}",
        args.integer("vocab", 1, 1 << 24), args.integer("hidden", 1, 1 << 20),
        args.integer("layers", 1, 4096), heads,
        args.integer("intermediate", 0, 1 << 20) > 0
            ? fmt::format("\"n_inner\": {}, ", args.integer("intermediate", 0, 1 << 20)) : "",
        ids("la-layers"), ids("window-layers"), args.integer("feature-dim", 1, 256),
        args.given("la-heads") ? args.integer("la-heads", 1, 1 << 16) : heads,
        args.integer("window-size", 1, 1 << 24), heads);
    c = ModelConfig::from_json(json, "make-model options");
  } else {
    std::string json = "{";
    const auto add = [&](const std::string& k, const std::string& v) {
      json += (json.size() > 1 ? ", " : "") + fmt::format("\"{}\": {}", k, v);
    };
    add("model_type", fmt::format("\"{}\"", arch));
    add("vocab_size", std::to_string(args.integer("vocab", 1, 1 << 24)));
    add("hidden_size", std::to_string(args.integer("hidden", 1, 1 << 20)));
    add("num_hidden_layers", std::to_string(args.integer("layers", 1, 4096)));
    add("num_heads", std::to_string(args.integer("heads", 1, 1 << 16)));
    add("feature_map", json::quote(args.str("feature-map")));
    add("tie_word_embeddings", args.flag_set("tie-embeddings") ? "true" : "false");
    if (const auto inter = args.integer("intermediate", 0, 1 << 20); inter > 0)
      add("intermediate_size", std::to_string(inter));
    if (arch == "linear_attn") {
      if (args.given("kv-heads")) add("num_kv_heads", std::to_string(args.integer("kv-heads", 1, 1 << 16)));
      if (args.given("expand-k")) add("expand_k", fmt::format("{}", args.real("expand-k", 1e-6, 1e6)));
      if (args.given("expand-v")) add("expand_v", fmt::format("{}", args.real("expand-v", 1e-6, 1e6)));
      add("norm_feature_map", args.flag_set("normalized") ? "true" : "false");
      add("norm_q", args.flag_set("norm-q") ? "true" : "false");
      add("norm_k", args.flag_set("norm-k") ? "true" : "false");
      add("tie_feature_map_qk", args.flag_set("tie-feature-maps") ? "true" : "false");
      add("elementwise_affine", args.flag_set("no-affine") ? "false" : "true");
    } else if (args.given("hidden-act")) {
      add("hidden_act", json::quote(args.str("hidden-act")));
    }
    json += "}";
    c = ModelConfig::from_json(json, "make-model options");
  }
  const DType dtype = parse_dtype(args.str("dtype"));
  const int shards = static_cast<int>(args.integer("shards", 1, 4096));
  std::int64_t params = 0;
  for (const auto& [name, shape] : model_tensor_shapes(c)) {
    std::int64_t n = 1;
    for (auto d : shape) n *= d;
    params += n;
  }
  // The values of one shard are held as float32 while it is written.
  check_memory(4.0 * double(params) / shards, "a model of " + std::to_string(params) + " parameters");
  prepare_model_dir(dir, args.flag_set("force"));
  const int files = write_random_model(dir, c, seed, dtype, shards);
  fmt::print("wrote {}: {} layers, hidden {}, {} heads, feature map {}, {} parameters as {}, "
             "{} weight file{}{}, seed {}\n",
             printable(dir), c.num_hidden_layers, c.hidden_size, c.num_heads,
             c.architecture == Architecture::kBased ? "taylor (Based)"
                                                    : ModelConfig::feature_map_name(c.feature_map),
             params, dtype_name(dtype), files,
             files > 1 ? "s" : "",
             files < shards ? fmt::format(" (--shards {}: the model has only {} tensors)", shards, files) : "",
             seed);
  flush_stdout();
  return 0;
}

int run_convert(int argc, char** argv) {
  Args args("convert",
            "Writes a model directory's weights as one model.safetensors, with its config.json\n"
            "(and tokenizer.json, if there is one) beside it. For a checkpoint published as\n"
            "pytorch_model.bin: the archive is read by recur's restricted unpickler, which runs\n"
            "nothing, the model is loaded (every tensor checked against config.json), and the\n"
            "tensors it reads are written under the names it reads them by.");
  args.option("dtype", "", "stored dtype: f32, bf16 or f16 (default: the checkpoint's own, if it "
                           "has one for every tensor, else f32)")
      .flag("force", "replace a model already in OUT")
      .positionals(2, "DIR OUT");
  if (!args.parse(argc, argv, 2)) return 0;
  if (args.positional().size() != 2)
    throw ArgumentError("give the model directory and the directory to write: recur convert DIR OUT");
  namespace fs = std::filesystem;
  const std::string in = args.positional()[0], out = args.positional()[1];
  std::error_code ec;
  if (fs::exists(out, ec) && fs::equivalent(in, out, ec))
    throw ArgumentError("OUT is DIR itself: convert writes a new directory");
  const std::string config_text = read_input((fs::path(in) / "config.json").string(), "config.json", 16u << 20);
  const ModelConfig config = ModelConfig::from_json(config_text, (fs::path(in) / "config.json").string());
  if (!config.quantization.empty())
    throw ArgumentError(fmt::format("{} is quantized ({}): convert writes float tensors; convert "
                                    "the model it was quantized from", printable(in),
                                    config.quantization));
  const auto weights = open_weights(in);
  // Loading checks every tensor against the configuration before anything is written.
  const auto model = Model::from_weights(config, *weights);
  std::vector<std::string> names = weights->names();
  std::vector<std::vector<float>> values;
  std::vector<TensorData> tensors;
  double total = 0;
  for (const auto& n : names) {
    double e = 1;
    for (auto d : weights->shape(n)) e *= double(d);
    total += e;
  }
  check_memory(4.0 * total, "the checkpoint's tensors as float32");
  DType dtype = weights->dtype(names.front());
  for (const auto& n : names)
    if (weights->dtype(n) != dtype) dtype = DType::kF32;
  if (args.given("dtype")) dtype = parse_dtype(args.str("dtype"));
  values.reserve(names.size());
  for (const auto& n : names) {
    values.push_back(weights->read(n));
    tensors.push_back({n, weights->shape(n), values.back().data()});
  }
  prepare_model_dir(out, args.flag_set("force"));
  fs::create_directories(out, ec);
  if (ec) throw Error(fmt::format("cannot create {}: {}", printable(out), ec.message()));
  write_safetensors((fs::path(out) / "model.safetensors").string(), tensors, dtype,
                    {{"format", "pt"}, {"converted_from", weights->describe()}});
  detail::write_file_atomically((fs::path(out) / "config.json").string(), config_text, "recur convert");
  if (Tokenizer::present(in))
    fs::copy_file(fs::path(in) / "tokenizer.json", fs::path(out) / "tokenizer.json",
                  fs::copy_options::overwrite_existing);
  fmt::print("wrote {}: {} tensors, {:.2f}M parameters as {}, from {}\n", printable(out),
             tensors.size(), double(model->parameters()) / 1e6, dtype_name(dtype),
             printable(weights->describe()));
  flush_stdout();
  return 0;
}

}  // namespace recur::cli

namespace recur::cli {

int run_quantize(int argc, char** argv) {
  Args args("quantize",
            "Writes a model with its matrices quantized in blocks of 32 (docs/quantization.md):\n"
            "q8 stores a byte per weight, q4 half a byte, each block with one half-precision\n"
            "scale. The projections, the MLP and the head (a tied embedding with it) are\n"
            "quantized; norms, biases, feature maps, convolutions, an untied embedding and\n"
            "matrices whose input width is not a multiple of 32 keep their precision. IN is any\n"
            "model directory recur reads (safetensors, or a pytorch_model.bin); the model is\n"
            "loaded and checked first, and OUT is loaded again once written.");
  args.option("type", "", "q8 or q4: the format of the projections and the MLP")
      .option("head", "", "q8 or q4: the head's format (the tied embedding's), default --type")
      .flag("builtin", "quantize the built-in model (then give OUT alone)")
      .flag("force", "replace a model already in OUT (its config.json, safetensors and index go "
                     "first; other files stay)")
      .positionals(2, "IN OUT")
      .footer("OUT gets config.json (with a quantization_config), model.safetensors and the\n"
              "tokenizer files of IN. A quantized tensor NAME is I8 (n_out, k_in) for q8 or U8\n"
              "(n_out, k_in / 2) for q4, its scales NAME_scale F16 (n_out, k_in / 32);\n"
              "tools/quant_reader.py reads them with numpy. A OUT that already holds a model is\n"
              "refused unless --force. Example:\n"
              "  recur quantize models/kjv kjv-q8 --type q8\n"
              "  recur score -m kjv-q8 -f models/kjv/heldout.txt");
  if (!args.parse(argc, argv, 2)) return 0;
  namespace fs = std::filesystem;
  const bool builtin = args.flag_set("builtin");
  const std::size_t want = builtin ? 1 : 2;
  if (args.positional().size() != want)
    throw ArgumentError(builtin ? "give the directory to write: recur quantize --builtin OUT"
                                : "give the model directory and the directory to write: recur "
                                  "quantize IN OUT --type q8|q4");
  if (!args.given("type")) throw ArgumentError("give the format: --type q8 or --type q4");
  QuantizeOptions options;
  options.format = args.str("type");
  options.head = args.given("head") ? args.str("head") : "";
  for (const char* o : {"type", "head"})
    if (args.given(o) && args.str(o) != "q8" && args.str(o) != "q4")
      throw ArgumentError(fmt::format("--{} is '{}', expected q8 or q4", o, printable(args.str(o))));
  const std::string in = builtin ? builtin_dir() : args.positional()[0];
  const std::string out = args.positional()[want - 1];
  std::error_code ec;
  if (!fs::is_directory(in, ec))
    throw ArgumentError(fmt::format("{} is not a model directory", printable(in)));
  if (fs::exists(out, ec) && fs::equivalent(in, out, ec))
    throw ArgumentError("OUT is IN itself: quantize writes a new directory");
  const std::string config_path = (fs::path(in) / "config.json").string();
  const ModelConfig config =
      ModelConfig::from_json(read_input(config_path, "config.json", 16u << 20), config_path);
  if (!config.quantization.empty())
    throw ArgumentError(fmt::format("{} is already quantized ({}): quantize the model it was "
                                    "made from", printable(in), config.quantization));
  const auto weights = open_weights(in);
  double elements = 0;
  for (const auto& n : weights->names()) {
    double e = 1;
    for (auto d : weights->shape(n)) e *= double(d);
    elements += e;
  }
  // The loaded model, the tensors as float32 while each is read, and what is written.
  check_memory(10.0 * elements, "the model and its tensors as float32");
  prepare_model_dir(out, args.flag_set("force"));
  fmt::print(stderr, "quantize: loading and checking {} ({:.2f}M weights)\n",
             printable(weights->describe()), elements / 1e6);
  const bool tty = isatty(STDERR_FILENO) != 0;
  const double t0 = now_seconds();
  const QuantizeReport r = write_quantized_model(
      out, config, *weights, options, [&](int done, int total, const std::string& name) {
        if (tty)
          fmt::print(stderr, "\rquantize: {}/{} tensors ({}){}", done, total, printable(name),
                     std::string(8, ' '));
      });
  if (tty) fmt::print(stderr, "\n");
  // Tokenizer files beside the weights, as Hugging Face's layouts name them.
  for (const char* name : {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                           "vocab.json", "merges.txt", "tokenizer.model", "added_tokens.json"}) {
    const fs::path from = fs::path(in) / name;
    if (fs::is_regular_file(from, ec))
      fs::copy_file(from, fs::path(out) / name, fs::copy_options::overwrite_existing);
  }
  fmt::print("wrote {}: {} tensors, {} matrices quantized, {} kept in their precision (input "
             "width not a multiple of 32), weights {} ({}), from {} in {:.1f} s\n",
             printable(out), r.tensors, r.quantized, r.kept, r.weight_format,
             human_bytes(double(r.bytes)), printable(weights->describe()), now_seconds() - t0);
  flush_stdout();
  return 0;
}

}  // namespace recur::cli
