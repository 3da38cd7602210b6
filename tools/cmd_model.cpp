// recur generate, recur score: the commands that run models (make-model, convert and quantize,
// which write them, are in cmd_write.cpp).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <filesystem>

#include "cli.h"
#include "commands.h"
#include "text/unicode.h"
#include "text_model.h"
#include "recur/error.h"
#include "recur/isa.h"
#include "recur/model.h"
#include "recur/sampling.h"
#include "recur/tokenizer.h"

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
  if (args.declared("random-model") && args.flag_set("random-model")) {
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
  // A bare checkpoint given as a file (BlinkDL's .pth) has its tokenizer beside it.
  std::error_code ec;
  const std::string files = std::filesystem::is_regular_file(dir, ec)
                                ? std::filesystem::path(dir).parent_path().string()
                                : dir;
  const std::string here = files.empty() ? "." : files;
  const bool own_tokenizer = args.declared("tokenizer") && args.given("tokenizer");
  if (own_tokenizer || Tokenizer::present(here)) {
    m.tokenizer = Tokenizer::load(own_tokenizer ? args.str("tokenizer") : here);
    if (m.tokenizer->vocab_size() > m.model->config().vocab_size)
      fmt::print(stderr, "warning: the tokenizer has {} ids and the model {}: ids past the "
                         "model's vocabulary will be refused\n",
                 m.tokenizer->vocab_size(), m.model->config().vocab_size);
    m.mask = m.tokenizer->sample_mask(m.model->config().vocab_size);
  } else if (const std::string why = m.model->missing_tokenizer(printable(here)); !why.empty()) {
    m.no_text = why;
  } else {
    for (const char* name : {"tokenizer.model", "vocab.json"}) {
      if (std::filesystem::exists(std::filesystem::path(here) / name)) {
        fmt::print(stderr, "warning: the model ships {} but no tokenizer.json (nor RWKV's "
                           "rwkv_vocab_v20230424.txt), the tokenizer formats recur reads: text "
                           "is fed as bytes, not the ids the model was trained on. Tokenize "
                           "elsewhere and pass ids.\n", name);
        break;
      }
    }
  }
  return m;
}

void TextModel::require_text() const {
  if (!no_text.empty()) throw ArgumentError(no_text);
}

Sampler TextModel::sampler(SamplerOptions options) const {
  options.mask = mask;
  return Sampler(options);
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
  fmt::print(stderr, "{}", m.describe(tm.label));
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

SamplerOptions sampler_options(const Args& args) {
  SamplerOptions so;
  so.temperature = args.flag_set("greedy") ? 0.0f : static_cast<float>(args.real("temperature", 0, 1e6));
  so.top_k = static_cast<int>(args.integer("top-k", 0, 1 << 24));
  so.top_p = static_cast<float>(args.real("top-p", 1e-9, 1.0));
  so.repetition_penalty = static_cast<float>(args.real("repetition-penalty", 1e-6, 1e6));
  so.seed = static_cast<std::uint64_t>(args.integer("seed", 0, INT64_MAX));
  so.threads = threads_option(args);
  return so;
}

DecoderOptions decoder_options(const Args& args) {
  DecoderOptions o;
  o.chunk = static_cast<int>(args.integer("chunk", 1, 1 << 16));
  o.threads = threads_option(args);
  return o;
}


namespace {

// generate's options; what each does is in its help line.
void declare_generate_options(Args& args) {
  args.option("model", "", "model directory (config.json, safetensors or pytorch_model.bin, "
                           "tokenizer.json), or an RWKV-7 .pth; default: the built-in model", 'm')
      .option("tokenizer", "", "tokenizer.json or rwkv_vocab_v20230424.txt, or a directory that "
                               "holds one, for a model directory without its own (Based's "
                               "checkpoints use GPT-2's)")
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
}

// The prompt: its text (--prompt-file, --prompt, else a default unless ids are given or a state
// continues) into `text`, and its ids (--prompt-ids, else the text through the tokenizer or as
// bytes). ArgumentError when text is read or written and the model cannot take it.
std::vector<int> read_prompt(const Args& args, const TextModel& tm, bool loading,
                             std::string& text) {
  const bool ids_in = args.given("prompt-ids"), ids_out = args.flag_set("ids");
  const std::string fallback_prompt = args.given("model") || tm.random ? "The quick brown fox"
                                                                       : "And it came to pass";
  text = args.given("prompt-file") ? read_input(args.str("prompt-file"), "--prompt-file")
         : args.given("prompt")    ? args.str("prompt")
         : ids_in || loading       ? std::string()
                                   : fallback_prompt;
  // Text is read when a prompt is encoded and written unless --ids: only then does a model
  // without a tokenizer need the byte-level one (a continuation with --ids reads and writes none).
  const bool reads_text = !ids_in && !text.empty();
  if (!tm.tokenizer && tm.model->config().vocab_size < ByteTokenizer::kVocab &&
      (reads_text || !ids_out))
    throw ArgumentError(fmt::format("the model's vocabulary has {} ids, fewer than the 256 the "
                                    "byte-level tokenizer needs: use --prompt-ids and --ids",
                                    tm.model->config().vocab_size));
  if (reads_text || !ids_out) tm.require_text();
  // A continuation gets no second BOS.
  const bool add_special = !loading && !args.flag_set("no-special");
  return ids_in        ? read_token_ids(args.str("prompt-ids"), "--prompt-ids")
         : tm.tokenizer ? tm.tokenizer->encode(text, add_special)
                        : ByteTokenizer().encode(text);
}

// Where generated tokens go: ids one per line (--ids), else text through the tokenizer's stream
// or as bytes (an id past the bytes as <|id|>).
class TokenWriter {
 public:
  TokenWriter(const TextModel& tm, bool ids, bool raw) : ids_(ids), out_(raw) {
    if (tm.tokenizer && !ids_) stream_.emplace(tm.tokenizer);
  }
  // Generated text is decoded as a stream whose context is the last tokens before it, so that
  // a decoder that treats the first token specially (a stripped leading space) does not.
  void context(const std::vector<int>& history) {
    if (!stream_) return;
    const std::size_t n = std::min<std::size_t>(history.size(), 8);
    for (std::size_t i = history.size() - n; i < history.size(); ++i) stream_->put(history[i]);
  }
  // Text that is not generated (the prompt); only when ids are not written.
  void text(const std::string& bytes) { out_.put(bytes); }
  void token(int id) {
    if (ids_) {
      std::fprintf(stdout, "%d\n", id);
      flush_stdout();
    } else if (stream_) {
      out_.put(stream_->put(id));
    } else if (id >= ByteTokenizer::kVocab) {
      ++beyond_bytes_;
      out_.put(fmt::format("<|{}|>", id));
    } else {
      out_.put(ByteTokenizer().decode(id));
    }
  }
  void finish() {
    if (!ids_) {
      if (stream_) out_.put(stream_->finish());
      out_.finish();
      std::fputc('\n', stdout);
    }
    flush_stdout();
  }
  // Ids written as <|id|> because a byte-level model has more ids than bytes.
  std::int64_t beyond_bytes() const { return beyond_bytes_; }

 private:
  bool ids_;
  TextSink out_;
  std::optional<DecodeStream> stream_;
  std::int64_t beyond_bytes_ = 0;
};

struct Generated {
  std::int64_t count = 0;
  bool ended = false;  // at an end-of-sequence id
};

// Samples up to n_new tokens after the decoder's logits, each written and then stepped.
Generated generate(Decoder& decoder, Sampler& sampler, std::vector<int>& history,
                   std::int64_t n_new, bool stop_at_eos, TokenWriter& out) {
  const auto& eos = decoder.model().config().eos_token_ids;
  Generated g;
  for (; g.count < n_new; ++g.count) {
    const int token = sampler.sample(decoder.logits(), history);
    if (stop_at_eos && std::find(eos.begin(), eos.end(), token) != eos.end()) {
      g.ended = true;
      break;
    }
    history.push_back(token);
    out.token(token);
    decoder.step(token);
  }
  return g;
}

// The figures on stderr after a run: prefill and decode speed, and the state's size.
void print_figures(const Decoder& decoder, std::int64_t n_prompt, double prefill_s,
                   const Generated& g, double decode_s) {
  const DecoderOptions& options = decoder.options();
  fmt::print(stderr, "prefill: {} tokens in {:.3f} s = {:.0f} tokens/s (chunk {}, threads {}, kernels {})\n",
             n_prompt, prefill_s, double(n_prompt) / std::max(prefill_s, 1e-9), options.chunk,
             options.threads == 0 ? std::string("all") : std::to_string(options.threads),
             kernels_line(false));
  fmt::print(stderr, "decode:  {} tokens in {:.3f} s = {:.1f} tokens/s{}\n", g.count, decode_s,
             double(g.count) / std::max(decode_s, 1e-9),
             g.ended ? " (stopped at the end-of-sequence id)" : "");
  const Model& model = decoder.model();
  // A full softmax layer's KV cache grows (fla's hybrids, Qwen3.5); every other state does not.
  const bool full_cache = decoder.state_grows();
  fmt::print(stderr, "state:   {} bytes ({}) after {} tokens; {} (weights {}, {} per token)\n",
             decoder.state_bytes(), human_bytes(double(decoder.state_bytes())), decoder.n_tokens(),
             full_cache ? "the full-attention layers' KV cache grows with every token, the rest "
                          "is the same at any length"
                        : "the same at any length",
             model.weight_format(), human_bytes(double(model.weight_bytes_per_token())));
}

}  // namespace

int run_generate(int argc, char** argv) {
  Args args("generate",
            "Prefills the prompt in chunks, then streams generated text to stdout token by token.\n"
            "Progress and figures go to stderr: prefill and decode tokens/s and the state's size,\n"
            "which stays the same however long the text. Without -m it runs the built-in model,\n"
            "trained on the King James Bible (models/kjv).");
  declare_generate_options(args);
  if (!args.parse(argc, argv, 2)) return 0;
  const SamplerOptions so = sampler_options(args);
  const auto n_new = args.integer("tokens", 0, 1LL << 40);
  const DecoderOptions options = decoder_options(args);
  const bool loading = args.given("load-state");
  if (args.given("save-state")) check_output(args.str("save-state"), "--save-state");

  const TextModel tm = open_model(args);
  Sampler sampler = tm.sampler(so);  // never an id the tokenizer cannot decode, --ids too
  describe_model(tm);
  if (args.flag_set("verbose")) fmt::print(stderr, "{}\n", kernels_line(true));
  std::string prompt;
  const std::vector<int> prompt_ids = read_prompt(args, tm, loading, prompt);

  Decoder decoder(tm.model, options);
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

  const bool ids_out = args.flag_set("ids");
  TokenWriter out(tm, ids_out, args.flag_set("raw"));
  out.context(history);
  if (!ids_out)
    out.text(args.given("prompt-ids") && tm.tokenizer ? tm.tokenizer->decode(prompt_ids) : prompt);
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

  t0 = now_seconds();
  const Generated g =
      generate(decoder, sampler, history, n_new, !args.flag_set("ignore-eos"), out);
  const double decode_s = now_seconds() - t0;
  out.finish();

  print_figures(decoder, n_prompt, prefill_s, g, decode_s);
  if (out.beyond_bytes() > 0)
    fmt::print(stderr, "warning: {} generated ids were outside the byte range and are written as "
                       "<|id|>; use --ids to read ids\n", out.beyond_bytes());
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
  args.option("model", "", "model directory, or an RWKV-7 .pth; default: the built-in model", 'm')
      .option("tokenizer", "", "tokenizer.json or rwkv_vocab_v20230424.txt, or a directory that "
                               "holds one, for a model directory without its own (Based's "
                               "checkpoints use GPT-2's)")
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

}  // namespace recur::cli
