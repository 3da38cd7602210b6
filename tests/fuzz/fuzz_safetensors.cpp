// One safetensors file's header: the input is the whole file (the 8-byte length, the header,
// the data), checked as TensorStore checks a file on disk.
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

#include "io/safetensors_header.h"
#include "recur/error.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 8) return 0;
  std::uint64_t len = 0;
  for (int i = 7; i >= 0; --i) len = (len << 8) | data[i];
  if (len > size - 8) return 0;  // the file-size check TensorStore makes before reading
  const std::string header(reinterpret_cast<const char*>(data) + 8, static_cast<std::size_t>(len));
  std::map<std::string, recur::TensorInfo> tensors;
  try {
    recur::detail::check_header("fuzz.safetensors", size, header, tensors);
    for (const auto& [name, t] : tensors) (void)t.shape_string();
  } catch (const recur::Error&) {
  }
  return 0;
}
