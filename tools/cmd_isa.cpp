// recur isa: which instruction set the kernels run on, and which others there are.
#include <fmt/format.h>

#include <string>
#include <vector>

#include "cli.h"
#include "commands.h"
#include "recur/isa.h"

namespace recur::cli {

int run_isa(int argc, char** argv) {
  Args args("isa",
            "Prints the instruction set recur's kernels run on: the best this CPU has, or the one\n"
            "the environment variable RECUR_ISA names. Every one gives the same bytes; they differ\n"
            "only in speed.");
  args.flag("available", "list every instruction set this build has and this CPU runs, best first")
      .flag("compiled", "list every instruction set compiled into this build, best first")
      .excludes("available", "compiled")
      .footer("Examples:\n"
              "  recur isa\n"
              "  RECUR_ISA=avx2 recur score -f text.txt   # force one\n"
              "  for i in $(recur isa --available); do RECUR_ISA=$i recur score --json -f t.txt; done");
  if (!args.parse(argc, argv, 2)) return 0;
  std::vector<std::string> names{recur::isa()};
  if (args.flag_set("available")) names = recur::available_isas();
  if (args.flag_set("compiled")) names = recur::compiled_isas();
  for (const std::string& n : names) fmt::print("{}\n", n);
  flush_stdout();
  return 0;
}

}  // namespace recur::cli
