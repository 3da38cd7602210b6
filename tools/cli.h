// A small command-line parser for the recur tool: --name value and --flag, with typed getters,
// defaults, and a --help text built from the declared options.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace recur::cli {

class Args {
 public:
  /// Declares an option. `fallback` is its default ("" for none); flags take no value.
  Args& option(const std::string& name, const std::string& fallback, const std::string& help);
  Args& flag(const std::string& name, const std::string& help);
  /// A one-letter spelling (-m) of a declared option or flag.
  Args& alias(char letter, const std::string& name);
  /// Accept up to `max` positional arguments, described as `label` in the usage text.
  Args& positionals(int max, const std::string& label);

  /// Parses argv[first..]; throws ArgumentError on an unknown option or a missing value.
  void parse(int argc, char** argv, int first);

  std::string str(const std::string& name) const;
  std::int64_t integer(const std::string& name, std::int64_t min, std::int64_t max) const;
  double real(const std::string& name, double min, double max) const;
  /// Whether the option was given on the command line (not only defaulted).
  bool given(const std::string& name) const { return values_.count(name) > 0; }
  const std::vector<std::string>& positional() const { return positional_; }
  bool flag_set(const std::string& name) const;
  bool help() const { return help_; }
  std::string usage() const;

 private:
  struct Spec {
    std::string fallback, help;
    bool is_flag = false;
  };
  std::vector<std::string> order_;
  std::map<std::string, Spec> specs_;
  std::map<std::string, std::string> values_;
  std::map<char, std::string> aliases_;
  std::vector<std::string> positional_;
  int max_positional_ = 0;
  std::string positional_label_;
  bool help_ = false;
};

/// A progress bar on stderr, redrawn at most ten times a second; silent when stderr is not a
/// terminal unless forced.
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
