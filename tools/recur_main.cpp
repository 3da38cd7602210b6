// recur: the command-line front end. `recur help` lists the subcommands.
#include <fmt/format.h>

#include <cstdio>
#include <exception>
#include <new>
#include <string>

#include "cli.h"
#include "commands.h"
#include "recur/error.h"
#include "recur/isa.h"

namespace {

constexpr const char* kUsage =
    "usage: recur <command> [options]\n"
    "\n"
    "commands:\n"
    "  generate    stream text from a model (the built-in one without -m)\n"
    "  score       mean negative log-likelihood and perplexity of a text under a model\n"
    "  serve       an OpenAI-compatible HTTP server with batched decoding (the built-in model\n"
    "              without -m)\n"
    "  tokenize    text to token ids and back with a model's tokenizer.json or RWKV vocabulary\n"
    "  template    a conversation through the model's chat template: the prompt it is given\n"
    "  chat        a conversation in the terminal, through the model's chat template\n"
    "  make-model  write a model with random weights, for tests and demos\n"
    "  convert     write a model (a pytorch_model.bin checkpoint, say) as safetensors\n"
    "  quantize    write a model with 8-bit or 4-bit weights (q8, q4)\n"
    "  demo        stream a long random sequence through a linear-attention state\n"
    "  bench       constant-memory generation against a softmax KV cache: CSV, plot, summary\n"
    "  isa         the instruction set the kernels run on (--available: the others)\n"
    "  help        this text\n"
    "\n"
    "`recur <command> --help` describes a command's options; `recur --version` the version.\n"
    "\n"
    "The kernels run on the best instruction set this CPU has (avx512vnni, avx512, avx2\n"
    "or scalar on x86-64; neon or scalar on ARM64); every one gives the same bytes.\n"
    "RECUR_ISA=NAME forces one; `recur isa` names the one in use.\n";

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  const std::string command = argv[1];
  // Messages quote file names and file contents: control bytes never reach the terminal raw.
  const auto report = [&](const char* what) {
    std::fflush(stdout);
    fmt::print(stderr, "recur {}: {}\n", recur::cli::printable(command),
               recur::cli::printable(what));
  };
  try {
    // A RECUR_ISA that names an instruction set this build or CPU lacks fails here, before any work.
    if (command != "help" && command != "--help" && command != "-h") recur::isa();
    if (command == "generate") return recur::cli::run_generate(argc, argv);
    if (command == "score") return recur::cli::run_score(argc, argv);
    if (command == "tokenize") return recur::cli::run_tokenize(argc, argv);
    if (command == "template") return recur::cli::run_template(argc, argv);
    if (command == "chat") return recur::cli::run_chat(argc, argv);
    if (command == "make-model") return recur::cli::run_make_model(argc, argv);
    if (command == "convert") return recur::cli::run_convert(argc, argv);
    if (command == "quantize") return recur::cli::run_quantize(argc, argv);
    if (command == "demo") return recur::cli::run_demo(argc, argv);
    if (command == "bench") return recur::cli::run_bench(argc, argv);
    if (command == "isa") return recur::cli::run_isa(argc, argv);
#ifdef RECUR_SERVE
    if (command == "serve") return recur::cli::run_serve(argc, argv);
#else
    if (command == "serve") {
      fmt::print(stderr, "recur serve: this build has no HTTP server (built with RECUR_SERVE=OFF)\n");
      return 2;
    }
#endif
    if (command == "help" || command == "--help" || command == "-h") {
      std::fputs(kUsage, stdout);
      recur::cli::flush_stdout();
      return 0;
    }
    if (command == "--version") {
      std::printf("%s\n", recur::cli::kVersion);
      recur::cli::flush_stdout();
      return 0;
    }
    fmt::print(stderr, "recur: unknown command '{}'\n\n{}", recur::cli::printable(command), kUsage);
    return 2;
  } catch (const recur::ArgumentError& e) {
    report(e.what());
    return 2;
  } catch (const std::bad_alloc&) {
    report("out of memory: the machine could not provide what this run needs (a smaller model, "
           "fewer tokens or a smaller --chunk may fit)");
    return 1;
  } catch (const std::exception& e) {
    report(e.what());
    return 1;
  }
}
