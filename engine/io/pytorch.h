// The restricted unpickler of a PyTorch checkpoint's data.pkl, apart from the zip archive, so
// that a fuzzer can drive it from memory with no archive around it.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "recur/pytorch.h"

namespace recur::detail {

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
