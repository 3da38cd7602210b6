// Whole-file reads for the small text files recur parses (config.json, an index).
#pragma once

#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

namespace recur::detail {

/// The file's bytes, or nothing if it cannot be opened or read.
inline std::optional<std::string> read_file(const std::string& path) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  if (ec) return std::nullopt;
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::string text(size, '\0');
  in.read(text.data(), static_cast<std::streamsize>(size));
  if (static_cast<std::uintmax_t>(in.gcount()) != size) return std::nullopt;
  return text;
}

}  // namespace recur::detail
