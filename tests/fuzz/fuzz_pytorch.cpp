// A PyTorch checkpoint from memory, two ways. An input that starts like a zip ("PK") is a whole
// pytorch_model.bin: opened with libzip as TorchCheckpoint::open_buffer opens one, and every
// tensor it lists read back. Any other input is a bare data.pkl for the restricted unpickler,
// whose storages are every entry one asks for, 64 bytes each (libFuzzer's comparison tracing
// finds the element counts that fit). The seeds are tests/data/pytorch's checkpoints and their
// pickles.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "io/pytorch.h"
#include "recur/error.h"
#include "recur/pytorch.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  try {
    if (size >= 2 && data[0] == 'P' && data[1] == 'K') {
      const auto checkpoint = recur::TorchCheckpoint::open_buffer(bytes, "fuzz.bin");
      for (const auto& name : checkpoint.names()) {
        const auto& info = checkpoint.info(name);
        if (checkpoint.read_bytes(name).size() != info.bytes) __builtin_trap();
        (void)info.shape_string();
      }
    } else {
      const recur::detail::TorchEntrySize entry_size =
          [](const std::string&) -> std::optional<std::uint64_t> { return 64; };
      for (const auto& t : recur::detail::read_state_dict(bytes, "fuzz.bin", "fuzz/data.pkl",
                                                          "fuzz/data/", entry_size))
        if (t.offset + t.bytes > 64) __builtin_trap();
    }
  } catch (const recur::Error&) {
  }
  return 0;
}
