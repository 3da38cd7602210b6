// The restricted unpickler of a PyTorch checkpoint's data.pkl (io/unpickle.cpp), apart from the
// zip archive (io/pytorch.cpp), so that a fuzzer can drive it from memory with no archive around
// it; and the few helpers the two share.
#pragma once

#include <fmt/format.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "recur/error.h"
#include "recur/pytorch.h"

namespace recur::detail {

/// The call named in every message of the checkpoint reader.
inline constexpr const char* kTorchCall = "load_pytorch";
/// A state dict's pickle takes some 150 bytes a tensor: 16 MiB is room for 100 000 tensors.
inline constexpr std::size_t kMaxPickleBytes = std::size_t(16) << 20;

/// Text from a hostile file, fit for a message: non-printable bytes as \xNN, at most 100 bytes.
std::string printable(std::string_view s);

/// The name of a pickle opcode, or null for a byte that names none.
const char* pickle_opcode_name(unsigned char op);

/// Throws FormatError "[load_pytorch] <file>: <message>".
template <class... Args>
[[noreturn]] void fail(const std::string& file, fmt::format_string<Args...> f, Args&&... args) {
  throw FormatError(
      fmt::format("[{}] {}: {}", kTorchCall, file, fmt::format(f, std::forward<Args>(args)...)));
}

inline bool checked_mul(std::uint64_t a, std::uint64_t b, std::uint64_t& out) {
  return !__builtin_mul_overflow(a, b, &out);
}

/// The size in bytes of the archive entry `entry`, or nothing when the archive has none.
using TorchEntrySize = std::function<std::optional<std::uint64_t>(const std::string& entry)>;

/// Reads `pickle` (the entry `pickle_entry` of the checkpoint `file`) as a state dict of tensors,
/// without calling anything. Storages are the entries `<data_prefix><key>`, sized by
/// `entry_size`. Returns the tensors in the state dict's order, each checked against its
/// storage. Throws FormatError "[load_pytorch] <file>: <pickle_entry> offset N: <problem>".
std::vector<TorchTensorInfo> read_state_dict(std::string_view pickle, const std::string& file,
                                             const std::string& pickle_entry,
                                             const std::string& data_prefix,
                                             const TorchEntrySize& entry_size);

}  // namespace recur::detail
