// recur tokenize: text to ids and back with a model's tokenizer.json (or RWKV's world vocabulary).
#include <fmt/format.h>

#include <cstdio>

#include "cli.h"
#include "commands.h"
#include "recur/error.h"
#include "recur/tokenizer.h"

namespace recur::cli {

int run_tokenize(int argc, char** argv) {
  Args args("tokenize",
            "Encodes text with a model's tokenizer.json and prints the ids, one per line, exactly\n"
            "as Hugging Face's tokenizers library would (or with RWKV's rwkv_vocab_v20230424.txt,\n"
            "as its reference trie tokenizer would); with --decode, turns ids back into text.");
  args.option("model", "", "model directory holding tokenizer.json or rwkv_vocab_v20230424.txt, "
                           "or the file itself", 'm')
      .option("prompt", "", "text to encode", 'p')
      .option("file", "", "file to encode, or with --decode the ids ('-': standard input)", 'f')
      .flag("no-special", "encode without what the post-processor adds (the BOS of most models); "
                          "with --decode, drop special tokens")
      .flag("decode", "read ids (one per line) and print their text")
      .flag("tokens", "print each id with its token string, tab-separated")
      .flag("count", "print only the number of ids")
      .excludes("prompt", "file")
      .excludes("decode", "prompt")
      .excludes("decode", "tokens")
      .excludes("decode", "count")
      .excludes("tokens", "count")
      .footer("Examples:\n"
              "  recur tokenize -m models/kjv -p \"And God said\"\n"
              "  recur tokenize -m DIR -f text.txt > ids.txt\n"
              "  recur tokenize -m DIR --decode -f ids.txt");
  if (!args.parse(argc, argv, 2)) return 0;
  if (!args.given("model")) throw ArgumentError("give the tokenizer: -m DIR (or -m tokenizer.json)");
  const bool decode = args.flag_set("decode");
  if (!args.given("prompt") && !args.given("file"))
    throw ArgumentError(decode ? "give the ids to decode: -f FILE ('-' for standard input)"
                               : "give the text: -p TEXT or -f FILE ('-' for standard input)");
  const auto tokenizer = Tokenizer::load(args.str("model"));
  const bool special = !args.flag_set("no-special");
  if (decode) {
    const std::vector<int> ids = read_token_ids(args.str("file"), "--file", tokenizer->vocab_size());
    const std::string text = tokenizer->decode(ids, !special);
    std::fwrite(text.data(), 1, text.size(), stdout);
    flush_stdout();
    return 0;
  }
  const std::string text = args.given("prompt") ? args.str("prompt") : read_input(args.str("file"), "--file");
  const std::vector<int> ids = tokenizer->encode(text, special);
  if (args.flag_set("count")) {
    fmt::print("{}\n", ids.size());
  } else {
    std::string out;
    out.reserve(ids.size() * 7);
    for (const int id : ids) {
      out += std::to_string(id);
      if (args.flag_set("tokens")) out += "\t" + printable(tokenizer->id_to_token(id));
      out += '\n';
    }
    std::fwrite(out.data(), 1, out.size(), stdout);
  }
  flush_stdout();
  return 0;
}

}  // namespace recur::cli
