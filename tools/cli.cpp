#include "cli.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <charconv>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <thread>

#include "recur/error.h"
#include "util/file.h"

namespace recur::cli {

const char* const kVersion = "recur 0.1.0";

Args::Args(const std::string& command, const std::string& summary)
    : app_(std::make_unique<CLI::App>(summary, "recur " + command)) {
  app_->set_version_flag("--version", kVersion, "print the version and exit");
  app_->set_help_flag("-h,--help", "print this text and exit");
}

Args::~Args() = default;

Args& Args::option(const std::string& name, const std::string& fallback, const std::string& help,
                   char letter) {
  const std::string names = letter ? fmt::format("-{},--{}", letter, name) : "--" + name;
  const std::string text = fallback.empty() ? help : fmt::format("{} (default {})", help, fallback);
  options_[name] = app_->add_option(names, values_[name], text);
  fallback_[name] = fallback;
  return *this;
}

Args& Args::default_to(const std::string& name, const std::string& fallback) {
  fallback_.at(name) = fallback;
  return *this;
}

Args& Args::repeatable(const std::string& name, const std::string& help) {
  options_[name] = app_->add_option("--" + name, lists_[name], help)
                       ->allow_extra_args(false)
                       ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  return *this;
}

Args& Args::flag(const std::string& name, const std::string& help, char letter) {
  const std::string names = letter ? fmt::format("-{},--{}", letter, name) : "--" + name;
  options_[name] = app_->add_flag(names, help);
  return *this;
}

Args& Args::retired(const std::string& name, const std::string& message) {
  options_[name] = app_->add_option("--" + name, values_[name], "")->group("");
  fallback_[name] = message;  // read by parse()
  retired_.push_back(name);
  return *this;
}

Args& Args::positionals(int max, const std::string& label) {
  app_->add_option(label, positional_, label)->expected(0, max);
  return *this;
}

Args& Args::excludes(const std::string& a, const std::string& b) {
  options_.at(a)->excludes(options_.at(b));
  return *this;
}

Args& Args::footer(const std::string& text) {
  app_->footer(text);
  return *this;
}

bool Args::parse(int argc, char** argv, int first) {
  // CLI11 reads -x=VALUE as the value "=VALUE"; split it as it splits --name=VALUE.
  std::vector<std::string> words;
  bool options_done = false;
  for (int i = first; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--") options_done = true;
    if (!options_done && a.size() > 2 && a[0] == '-' && a[1] != '-' && a[2] == '=' &&
        app_->get_option_no_throw(std::string("-") + a[1]) != nullptr) {
      words.push_back(a.substr(0, 2));
      words.push_back(a.substr(3));
    } else {
      words.push_back(a);
    }
  }
  std::vector<std::string> reversed(words.rbegin(), words.rend());  // CLI11's convention
  try {
    app_->parse(reversed);
  } catch (const CLI::CallForHelp&) {
    std::fputs(app_->help().c_str(), stdout);
    return false;
  } catch (const CLI::CallForVersion&) {
    std::printf("%s\n", kVersion);
    return false;
  } catch (const CLI::ParseError& e) {
    throw ArgumentError(fmt::format("{} (see --help)", e.what()));
  }
  for (const auto& name : retired_)
    if (given(name)) throw ArgumentError(fallback_.at(name));
  return true;
}

bool Args::given(const std::string& name) const { return options_.at(name)->count() > 0; }

std::string Args::str(const std::string& name) const {
  return given(name) ? values_.at(name) : fallback_.at(name);
}

std::int64_t Args::integer(const std::string& name, std::int64_t min, std::int64_t max) const {
  const std::string s = str(name);
  const auto bad = [&] {
    return ArgumentError(
        fmt::format("--{} must be a whole number (K, M, G, T: powers of 1024), got '{}'", name,
                    printable(s)));
  };
  std::int64_t v = 0;
  const char* end = s.data() + s.size();
  const auto [ptr, ec] = std::from_chars(s.data(), end, v);
  if (ec == std::errc::result_out_of_range)
    throw ArgumentError(fmt::format("--{} is {}, expected {} to {}", name, printable(s), min, max));
  if (ec != std::errc() || ptr == s.data()) throw bad();
  if (ptr != end) {
    const char u = static_cast<char>(std::toupper(static_cast<unsigned char>(*ptr)));
    const int shift = u == 'K' ? 10 : u == 'M' ? 20 : u == 'G' ? 30 : u == 'T' ? 40 : 0;
    if (shift == 0 || ptr + 1 != end) throw bad();
    if (__builtin_mul_overflow(v, std::int64_t{1} << shift, &v))
      throw ArgumentError(fmt::format("--{} is {}, expected {} to {}", name, printable(s), min, max));
  }
  if (v < min || v > max)
    throw ArgumentError(fmt::format("--{} is {}, expected {} to {}", name, v, min, max));
  return v;
}

double Args::real(const std::string& name, double min, double max) const {
  const std::string s = str(name);
  double v = 0;
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || ptr != s.data() + s.size() || s.empty())
    throw ArgumentError(fmt::format("--{} must be a number, got '{}'", name, printable(s)));
  if (!(v >= min && v <= max))
    throw ArgumentError(fmt::format("--{} is {}, expected {} to {}", name, v, min, max));
  return v;
}

int threads_option(const Args& args) {
  const int asked = static_cast<int>(args.integer("threads", 0, 1 << 16));
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (asked <= cores) return asked;
  fmt::print(stderr, "warning: --threads {}: this machine has {} cores; using {} (the result is "
                     "the same at any thread count, only slower with more threads than cores)\n",
             asked, cores, cores);
  return cores;
}

std::string read_input(const std::string& path, const std::string& option, std::uint64_t limit) {
  namespace fs = std::filesystem;
  const auto too_big = [&] {
    return ArgumentError(fmt::format("{} {}: more than the limit of {}", option, printable(path),
                                     human_bytes(double(limit))));
  };
  std::string text;
  const auto read_stream = [&](std::istream& in) {
    char buf[1 << 16];
    while (in.read(buf, sizeof buf) || in.gcount() > 0) {
      text.append(buf, static_cast<std::size_t>(in.gcount()));
      if (text.size() > limit) throw too_big();
    }
  };
  if (path == "-") {
    read_stream(std::cin);
    if (std::cin.bad()) throw ArgumentError(fmt::format("{} -: cannot read standard input", option));
    return text;
  }
  std::error_code ec;
  const auto status = fs::status(path, ec);
  if (!fs::exists(status))
    throw ArgumentError(fmt::format("{} {}: no such file", option, printable(path)));
  if (fs::is_directory(status))
    throw ArgumentError(fmt::format("{} {}: is a directory, not a file", option, printable(path)));
  if (fs::is_regular_file(status) && fs::file_size(path, ec) > limit) throw too_big();
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ArgumentError(fmt::format("{} {}: cannot open the file", option, printable(path)));
  read_stream(in);  // a device or FIFO is read up to the limit
  if (in.bad()) throw ArgumentError(fmt::format("{} {}: read error", option, printable(path)));
  return text;
}

std::vector<int> read_token_ids(const std::string& path, const std::string& option,
                                std::int64_t limit) {
  std::istringstream in(read_input(path, option));
  std::vector<int> tokens;
  std::string line;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    std::size_t used = 0;
    long long id = -1;
    try {
      id = std::stoll(line, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || line.find_first_not_of(" \t\r", used) != std::string::npos || id < 0 ||
        id >= limit)
      throw ArgumentError(fmt::format("{} {} line {}: '{}' is not a token id (0 to {})", option,
                                      printable(path), line_no, printable(line), limit - 1));
    tokens.push_back(static_cast<int>(id));
  }
  return tokens;
}

void check_output(const std::string& path, const std::string& option) {
  try {
    detail::writable_target(path, option.c_str());
  } catch (const Error& e) {
    throw ArgumentError(e.what());
  }
}

void check_memory(double bytes, const std::string& what) {
  const double physical = double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGESIZE));
  if (physical > 0 && bytes > 0.9 * physical)
    throw ArgumentError(fmt::format("{} would need {}, more than this machine's {} of memory", what,
                                    human_bytes(bytes), human_bytes(physical)));
}

void flush_stdout() {
  if (std::fflush(stdout) != 0 || std::ferror(stdout))
    throw Error(fmt::format("cannot write to standard output: {}", std::strerror(errno)));
}

std::string printable(const std::string& text) {
  std::string out;
  for (std::size_t i = 0; i < text.size();) {
    const auto b = static_cast<unsigned char>(text[i]);
    std::size_t len = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
    bool ok = len > 0 && i + len <= text.size() && !(b < 0x20 || b == 0x7f) && !(len > 1 && b < 0xC2);
    for (std::size_t k = 1; ok && k < len; ++k)
      ok = (static_cast<unsigned char>(text[i + k]) & 0xC0) == 0x80;
    if (ok) {
      out.append(text, i, len);
      i += len;
    } else {
      out += fmt::format("\\x{:02x}", b);
      ++i;
    }
  }
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
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int u = 0;
  while (b >= 1024.0 && u < 6) {
    b /= 1024.0;
    ++u;
  }
  return u == 0 ? fmt::format("{:.0f} B", b) : fmt::format("{:.2f} {}", b, units[u]);
}

}  // namespace recur::cli
