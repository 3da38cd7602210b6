// Helpers of the file-reading tests: raw safetensors bytes, files in a temporary directory, and
// the check that an error names what it should.
#pragma once

#include <catch2/catch.hpp>

#include <cstdint>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "recur/error.h"
#include "support/temp_dir.h"

namespace recur::testing {

// A file of an 8-byte little-endian length, the header text and the data bytes.
inline std::string raw_file(const std::string& header, const std::string& data, std::uint64_t claimed = 0) {
  std::uint64_t n = claimed ? claimed : header.size();
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[static_cast<std::size_t>(i)] = static_cast<char>(n >> (8 * i));
  return out + header + data;
}

inline std::string write(const TempDir& dir, const std::string& name, const std::string& bytes) {
  std::ofstream out(dir.file(name), std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return dir.file(name);
}

inline void expect_format_error(const std::function<void()>& fn,
                                const std::vector<std::string>& parts) {
  try {
    fn();
    FAIL("no error");
  } catch (const FormatError& e) {
    const std::string msg = e.what();
    INFO(msg);
    for (const auto& p : parts) CHECK(msg.find(p) != std::string::npos);
  }
}

}  // namespace recur::testing
