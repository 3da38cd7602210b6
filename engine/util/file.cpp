#include "util/file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "recur/error.h"

namespace recur::detail {

namespace fs = std::filesystem;

std::optional<std::string> read_file(const std::string& path, std::uint64_t max_bytes) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return std::nullopt;
  const auto size = fs::file_size(path, ec);
  if (ec || size > max_bytes) return std::nullopt;
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::string text(size, '\0');
  in.read(text.data(), static_cast<std::streamsize>(size));
  if (static_cast<std::uintmax_t>(in.gcount()) != size) return std::nullopt;
  return text;
}

std::string writable_target(const std::string& path, const char* call) {
  if (path.empty()) throw Error(fmt::format("[{}] the output path is empty", call));
  std::error_code ec;
  fs::path target = path;
  // A symbolic link is followed (a chain of them too), so that the link keeps pointing to the
  // new contents; a dangling link names the file to create.
  for (int hops = 0; fs::is_symlink(target, ec); ++hops) {
    if (hops == 40) throw Error(fmt::format("[{}] {}: too many levels of symbolic links", call, path));
    const fs::path next = fs::read_symlink(target, ec);
    if (ec) throw Error(fmt::format("[{}] {}: cannot read the link: {}", call, path, ec.message()));
    target = next.is_absolute() ? next : target.parent_path() / next;
  }
  const auto status = fs::status(target, ec);
  if (fs::exists(status)) {
    if (fs::is_directory(status))
      throw Error(fmt::format("[{}] {} is a directory, not a file", call, path));
    if (!fs::is_regular_file(status))
      throw Error(fmt::format("[{}] {} is not a regular file (a device, FIFO or socket): recur "
                              "writes by replacing the file, so it will not write there",
                              call, path));
  }
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  if (!fs::is_directory(dir, ec))
    throw Error(fmt::format("[{}] {}: the directory {} does not exist", call, path, dir.string()));
  if (::access(dir.c_str(), W_OK) != 0)
    throw Error(fmt::format("[{}] {}: cannot write in {}: {}", call, path, dir.string(),
                            std::strerror(errno)));
  return target.string();
}

AtomicFile::AtomicFile(const std::string& path, const char* call)
    : call_(call), target_(writable_target(path, call)) {
  std::vector<char> name(target_.begin(), target_.end());
  const std::string suffix = ".tmp-XXXXXX";
  name.insert(name.end(), suffix.begin(), suffix.end());
  name.push_back('\0');
  fd_ = ::mkstemp(name.data());
  if (fd_ < 0)
    throw Error(fmt::format("[{}] cannot create a temporary file beside {}: {}", call_, target_,
                            std::strerror(errno)));
  tmp_ = name.data();
  // mkstemp creates 0600; give the file the permissions a plain create would (umask applies).
  const mode_t mask = ::umask(0);
  ::umask(mask);
  ::fchmod(fd_, 0666 & ~mask);
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!tmp_.empty()) ::unlink(tmp_.c_str());
}

void AtomicFile::fail(const std::string& what) {
  const std::string reason = std::strerror(errno);
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!tmp_.empty()) ::unlink(tmp_.c_str());
  tmp_.clear();
  throw Error(fmt::format("[{}] {} {}: {}", call_, what, target_, reason));
}

void AtomicFile::write(const void* data, std::size_t size) {
  if (fd_ < 0) throw Error(fmt::format("[{}] {} was already committed or failed", call_, target_));
  const auto* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd_, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail("cannot write");
    p += n;
    size -= static_cast<std::size_t>(n);
  }
}

void AtomicFile::commit() {
  if (fd_ < 0) throw Error(fmt::format("[{}] {} was already committed or failed", call_, target_));
  if (::fsync(fd_) != 0) fail("cannot sync");
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) fail("cannot write");
  if (::rename(tmp_.c_str(), target_.c_str()) != 0) fail("cannot replace");
  tmp_.clear();
}

void write_file_atomically(const std::string& path, std::string_view bytes, const char* call) {
  AtomicFile f(path, call);
  f.write(bytes);
  f.commit();
}

}  // namespace recur::detail
