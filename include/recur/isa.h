// The instruction set recur's kernels run on.
//
// One build of recur carries every kernel compiled for several instruction sets (on x86-64:
// "avx512vnni", "avx512", "avx2" and "scalar", the emulated baseline; on ARM64: "neon" and
// "scalar") and picks one when it first needs it: the one the environment variable RECUR_ISA names, else the best
// that this CPU runs. Every instruction set computes the same bytes, so the choice changes only
// speed: a state saved under one continues bit for bit under another, on this machine or any
// other (docs/design.md, "One reduction order").
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace recur {

/// The instruction set in use, e.g. "avx512". The first call makes the choice; a RECUR_ISA that
/// names an instruction set this build lacks, or that this CPU cannot run, throws ArgumentError.
std::string isa();

/// The instruction sets this build has and this CPU runs, best first.
std::vector<std::string> available_isas();

/// Every instruction set compiled into this build, best first, whether or not this CPU runs it.
std::vector<std::string> compiled_isas();

/// Switches every kernel to `name` (one of available_isas()); throws ArgumentError, naming what
/// there is, otherwise. Results do not change, only speed. Not to be called while another thread
/// is inside a recur call.
void set_isa(std::string_view name);

}  // namespace recur
