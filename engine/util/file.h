// Files: whole-file reads for the small text files recur parses (config.json, an index), and
// safe writes for everything recur writes (saved states, safetensors, config.json, CSV, plots).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace recur::detail {

/// The file's bytes, or nothing if it cannot be opened or read, is not a regular file, or holds
/// more than `max_bytes`.
std::optional<std::string> read_file(const std::string& path,
                                     std::uint64_t max_bytes = std::uint64_t(1) << 40);

/// Where a write to `path` will land: `path` itself, or the file a symbolic link at `path` points
/// to (followed, so that a link keeps pointing to the new contents). Throws Error naming `call`
/// when the target exists and is not a regular file (a directory, a device, a FIFO, a socket),
/// when its directory does not exist or cannot be written. Nothing is created or changed.
std::string writable_target(const std::string& path, const char* call);

/// A file written safely: the bytes go to a new temporary file in the target's directory, which
/// replaces the target only on commit(), after every byte was written and synced. A write that
/// fails, or an AtomicFile destroyed before commit(), leaves no temporary file behind and the
/// target as it was. Only a regular file (or nothing) is ever replaced: see writable_target().
class AtomicFile {
 public:
  AtomicFile(const std::string& path, const char* call);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, std::size_t size);
  void write(std::string_view text) { write(text.data(), text.size()); }
  /// Syncs, closes and renames over the target. Throws Error on failure (nothing left behind).
  void commit();

 private:
  [[noreturn]] void fail(const std::string& what);
  std::string call_, target_, tmp_;
  int fd_ = -1;
};

/// Writes `bytes` to `path` through an AtomicFile.
void write_file_atomically(const std::string& path, std::string_view bytes, const char* call);

}  // namespace recur::detail
