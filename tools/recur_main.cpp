// recur: the command-line front end. `recur help` lists the subcommands.
#include <fmt/format.h>

#include <cstdio>
#include <exception>
#include <string>

#include "commands.h"
#include "recur/error.h"

namespace {

constexpr const char* kUsage =
    "usage: recur <command> [options]\n"
    "\n"
    "commands:\n"
    "  generate    stream text from a model (the built-in one without -m)\n"
    "  score       mean negative log-likelihood and perplexity of a text under a model\n"
    "  make-model  write a model with random weights, for tests and demos\n"
    "  demo        stream a long random sequence through a linear-attention state\n"
    "  bench       constant-memory generation against a softmax KV cache: CSV, plot, summary\n"
    "  help        this text\n"
    "\n"
    "`recur <command> --help` describes a command's options.\n";

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  const std::string command = argv[1];
  try {
    if (command == "generate") return recur::cli::run_generate(argc, argv);
    if (command == "score") return recur::cli::run_score(argc, argv);
    if (command == "make-model") return recur::cli::run_make_model(argc, argv);
    if (command == "demo") return recur::cli::run_demo(argc, argv);
    if (command == "bench") return recur::cli::run_bench(argc, argv);
    if (command == "help" || command == "--help" || command == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    fmt::print(stderr, "recur: unknown command '{}'\n\n{}", command, kUsage);
    return 2;
  } catch (const recur::ArgumentError& e) {
    fmt::print(stderr, "recur {}: {}\n", command, e.what());
    return 2;
  } catch (const std::exception& e) {
    fmt::print(stderr, "recur {}: {}\n", command, e.what());
    return 1;
  }
}
