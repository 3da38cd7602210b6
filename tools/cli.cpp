#include "cli.h"

#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>

#include "recur/error.h"

namespace recur::cli {

Args& Args::option(const std::string& name, const std::string& fallback,
                   const std::string& help) {
  order_.push_back(name);
  specs_[name] = Spec{fallback, help, false};
  return *this;
}

Args& Args::flag(const std::string& name, const std::string& help) {
  order_.push_back(name);
  specs_[name] = Spec{"", help, true};
  return *this;
}

Args& Args::alias(char letter, const std::string& name) {
  aliases_[letter] = name;
  return *this;
}

Args& Args::positionals(int max, const std::string& label) {
  max_positional_ = max;
  positional_label_ = label;
  return *this;
}

void Args::parse(int argc, char** argv, int first) {
  for (int i = first; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      help_ = true;
      continue;
    }
    if (a.size() == 2 && a[0] == '-' && aliases_.count(a[1])) a = "--" + aliases_.at(a[1]);
    if (a.rfind("-", 0) != 0 || a == "-") {
      if (static_cast<int>(positional_.size()) >= max_positional_)
        throw ArgumentError(fmt::format("unexpected argument '{}' (see --help)", a));
      positional_.push_back(a);
      continue;
    }
    std::string value;
    bool inline_value = false;
    if (const auto eq = a.find('='); a.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = a.substr(eq + 1);
      a = a.substr(0, eq);
      inline_value = true;
    }
    if (a.rfind("--", 0) != 0) throw ArgumentError(fmt::format("unexpected argument '{}'", a));
    const std::string name = a.substr(2);
    const auto it = specs_.find(name);
    if (it == specs_.end())
      throw ArgumentError(fmt::format("unknown option '--{}' (see --help)", name));
    if (it->second.is_flag) {
      values_[name] = "1";
      continue;
    }
    if (!inline_value) {
      if (i + 1 >= argc) throw ArgumentError(fmt::format("option '--{}' needs a value", name));
      value = argv[++i];
    }
    values_[name] = value;
  }
}

std::string Args::str(const std::string& name) const {
  const auto it = values_.find(name);
  return it != values_.end() ? it->second : specs_.at(name).fallback;
}

std::int64_t Args::integer(const std::string& name, std::int64_t min, std::int64_t max) const {
  const std::string s = str(name);
  std::size_t used = 0;
  long long v = 0;
  try {
    // Accept 1K, 64K, 1M, 4G as powers of two.
    v = std::stoll(s, &used);
    if (used < s.size()) {
      const char suffix = s[used];
      const long long mult = suffix == 'K' || suffix == 'k' ? 1LL << 10
                             : suffix == 'M' || suffix == 'm' ? 1LL << 20
                             : suffix == 'G' || suffix == 'g' ? 1LL << 30
                                                              : 0;
      if (mult == 0 || used + 1 != s.size()) throw std::invalid_argument(s);
      v *= mult;
    }
  } catch (const std::exception&) {
    throw ArgumentError(fmt::format("--{} must be a whole number, got '{}'", name, s));
  }
  if (v < min || v > max)
    throw ArgumentError(fmt::format("--{} is {}, expected {} to {}", name, v, min, max));
  return v;
}

double Args::real(const std::string& name, double min, double max) const {
  const std::string s = str(name);
  std::size_t used = 0;
  double v = 0;
  try {
    v = std::stod(s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != s.size())
    throw ArgumentError(fmt::format("--{} must be a number, got '{}'", name, s));
  if (!(v >= min && v <= max))
    throw ArgumentError(fmt::format("--{} is {}, expected {} to {}", name, v, min, max));
  return v;
}

bool Args::flag_set(const std::string& name) const { return values_.count(name) > 0; }

std::string Args::usage() const {
  std::string out = "options:\n";
  for (const auto& name : order_) {
    const auto& s = specs_.at(name);
    std::string left = "  --" + name + (s.is_flag ? "" : " X");
    for (const auto& [letter, target] : aliases_)
      if (target == name) left = fmt::format("  -{}, --{}{}", letter, name, s.is_flag ? "" : " X");
    out += fmt::format("{:<26} {}", left, s.help);
    if (!s.fallback.empty()) out += fmt::format(" (default {})", s.fallback);
    out += "\n";
  }
  out += fmt::format("{:<26} {}\n", "  -h, --help", "this text");
  return out;
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

Progress::Progress(std::string label, std::int64_t total)
    : label_(std::move(label)), total_(total), start_(now_seconds()),
      enabled_(isatty(STDERR_FILENO) != 0) {}

void Progress::update(std::int64_t done) {
  if (!enabled_) return;
  const double t = now_seconds();
  if (t - last_draw_ < 0.1 && done < total_) return;
  last_draw_ = t;
  constexpr int kWidth = 30;
  const double frac = total_ > 0 ? double(done) / double(total_) : 1.0;
  const int filled = static_cast<int>(frac * kWidth);
  const double rate = double(done) / std::max(1e-9, t - start_);
  std::fprintf(stderr, "\r%s [%s%s] %5.1f%% %lld/%lld  %.0f tok/s ", label_.c_str(),
               std::string(std::size_t(filled), '#').c_str(),
               std::string(std::size_t(kWidth - filled), '.').c_str(), 100.0 * frac,
               static_cast<long long>(done), static_cast<long long>(total_), rate);
  std::fflush(stderr);
}

void Progress::finish() {
  if (!enabled_) return;
  update(total_);
  std::fprintf(stderr, "\n");
}

std::int64_t resident_bytes() {
  std::ifstream f("/proc/self/statm");
  long long pages_total = 0, pages_resident = 0;
  if (!(f >> pages_total >> pages_resident)) return 0;
  return pages_resident * sysconf(_SC_PAGESIZE);
}

std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024.0 && u < 4) {
    b /= 1024.0;
    ++u;
  }
  return u == 0 ? fmt::format("{:.0f} B", b) : fmt::format("{:.2f} {}", b, units[u]);
}

}  // namespace recur::cli
