// The recur tool's subcommands. Each parses its own options and returns the exit status.
#pragma once

namespace recur::cli {

int run_demo(int argc, char** argv);
int run_bench(int argc, char** argv);
int run_isa(int argc, char** argv);
int run_generate(int argc, char** argv);
int run_score(int argc, char** argv);
int run_make_model(int argc, char** argv);
int run_convert(int argc, char** argv);
int run_quantize(int argc, char** argv);
int run_tokenize(int argc, char** argv);
int run_template(int argc, char** argv);
int run_serve(int argc, char** argv);
int run_chat(int argc, char** argv);

}  // namespace recur::cli
