// The checks of one safetensors header, apart from reading the file, so that a fuzzer can
// drive them from memory.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "recur/safetensors.h"

namespace recur::detail {

/// Checks `header` (the JSON text after the 8-byte length) of a file of `size` bytes named
/// `path`, and adds its tensors to `out`. Throws FormatError naming the file and the problem.
void check_header(const std::string& path, std::uint64_t size, const std::string& header,
                  std::map<std::string, TensorInfo>& out);

}  // namespace recur::detail
