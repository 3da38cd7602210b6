// The frame of a layer state's record in a saved state (LayerState::raw_bytes): a u32 format
// first, the token count as i64 last, the mixer's own bytes between; little-endian hosts.
#pragma once

#include <fmt/format.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "recur/error.h"

namespace recur::model {

/// The token count of a record of `size` bytes (raw_size() checked by the caller) after checking
/// its format is `format` and the count is not negative; FormatError naming `call` otherwise.
inline std::int64_t read_state_frame(const unsigned char* data, std::size_t size,
                                     std::uint32_t format, const char* call) {
  std::uint32_t given = 0;
  std::memcpy(&given, data, sizeof given);
  if (given != format)
    throw FormatError(fmt::format("[{}] state format {}, this build reads format {}", call, given,
                                  format));
  std::int64_t n = 0;
  std::memcpy(&n, data + size - sizeof n, sizeof n);
  if (n < 0) throw FormatError(fmt::format("[{}] the token count is {}", call, n));
  return n;
}

}  // namespace recur::model
