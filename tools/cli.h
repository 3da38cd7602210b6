// The recur tool's shared pieces: command-line parsing on CLI11 (the same rules for every
// subcommand), typed values with checked ranges, safe input and output, a progress bar.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace CLI {
class App;
class Option;
}  // namespace CLI

namespace recur::cli {

/// The tool's version, printed by --version.
extern const char* const kVersion;

/// One subcommand's options, parsed by CLI11: --name VALUE, --name=VALUE, -x VALUE, -xVALUE and
/// -x=VALUE, flags, `--` to end the options, -h/--help and --version. Values are kept as text
/// and converted by the typed getters, whose errors name the option and the range.
class Args {
 public:
  /// `command` is "generate", "score", ...; `summary` opens the --help text.
  Args(const std::string& command, const std::string& summary);
  ~Args();
  Args(const Args&) = delete;
  Args& operator=(const Args&) = delete;

  /// Declares --name (and -letter when given). `fallback` is the default ("" for none).
  Args& option(const std::string& name, const std::string& fallback, const std::string& help,
               char letter = 0);
  Args& flag(const std::string& name, const std::string& help, char letter = 0);
  /// Changes a declared option's default, after parse() (make-model: the chosen --arch's own).
  Args& default_to(const std::string& name, const std::string& fallback);
  /// An option that may be given more than once (--name A --name B), read with all().
  Args& repeatable(const std::string& name, const std::string& help);
  /// An option that no longer exists: using it is an error that says what replaced it.
  Args& retired(const std::string& name, const std::string& message);
  /// Accepts up to `max` positional arguments, shown as `label`.
  Args& positionals(int max, const std::string& label);
  /// Giving both is an error.
  Args& excludes(const std::string& a, const std::string& b);
  /// Free text after the option list in --help.
  Args& footer(const std::string& text);

  /// Parses argv[first..]. Returns false when --help or --version was given and printed (the
  /// caller then exits 0). Throws ArgumentError naming the problem otherwise.
  bool parse(int argc, char** argv, int first);

  std::string str(const std::string& name) const;
  /// Every value of a repeatable option, in order.
  const std::vector<std::string>& all(const std::string& name) const { return lists_.at(name); }
  /// A whole number in [min, max]; K, M, G and T suffixes multiply by powers of 1024, and a
  /// product that overflows is an error, not a wrap.
  std::int64_t integer(const std::string& name, std::int64_t min, std::int64_t max) const;
  double real(const std::string& name, double min, double max) const;
  /// Whether the option was given on the command line (not only defaulted).
  bool given(const std::string& name) const;
  /// Whether the command declares `name` at all (shared helpers read options some lack).
  bool declared(const std::string& name) const { return options_.count(name) != 0; }
  bool flag_set(const std::string& name) const { return given(name); }
  const std::vector<std::string>& positional() const { return positional_; }

 private:
  std::unique_ptr<CLI::App> app_;
  std::map<std::string, std::string> values_;
  std::map<std::string, std::string> fallback_;
  std::map<std::string, std::vector<std::string>> lists_;
  std::map<std::string, CLI::Option*> options_;
  std::vector<std::string> positional_;
  std::vector<std::string> retired_;
};

/// `--threads`: 0 means every core; more threads than cores is lowered to the core count with
/// a warning (the result is the same; only the speed would suffer).
int threads_option(const Args& args);

/// A text file's bytes, or standard input's for "-". Refuses directories and anything larger
/// than `limit` bytes (a device such as /dev/zero too) with an error that names the option.
std::string read_input(const std::string& path, const std::string& option,
                       std::uint64_t limit = std::uint64_t(256) << 20);

/// Token ids, one per line (blank lines skipped), from `path` (read_input's rules). An id below
/// 0 or at or above `limit` is an ArgumentError naming the option, the line and the range.
std::vector<int> read_token_ids(const std::string& path, const std::string& option,
                                std::int64_t limit = std::int64_t(1) << 31);

/// Checks before long work that `path` can be written (see detail::writable_target): an output
/// that cannot be written is reported at once, not after a whole run.
void check_output(const std::string& path, const std::string& option);

/// Refuses work whose memory would pass this machine's physical memory.
void check_memory(double bytes, const std::string& what);

/// Flushes standard output and throws Error if anything written to it was lost (a full disk,
/// a closed pipe): output that did not arrive is a failure.
void flush_stdout();

/// `text` with control characters and broken UTF-8 shown as \xNN, for messages that quote input.
std::string printable(const std::string& text);

/// A progress bar on stderr, redrawn at most ten times a second; silent when stderr is not a
/// terminal.
class Progress {
 public:
  Progress(std::string label, std::int64_t total);
  void update(std::int64_t done);
  void finish();

 private:
  std::string label_;
  std::int64_t total_;
  double start_, last_draw_ = -1;
  bool enabled_;
};

/// Resident set size of this process, from /proc/self/statm (0 if unavailable).
std::int64_t resident_bytes();
/// Seconds on a monotonic clock.
double now_seconds();
/// "1.23 MiB" and the like.
std::string human_bytes(double bytes);

}  // namespace recur::cli
