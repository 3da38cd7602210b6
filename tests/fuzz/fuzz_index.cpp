// A sharded checkpoint's model.safetensors.index.json, read by TensorStore::open_dir beside two
// real shards (written once at start in a fresh directory).
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "recur/error.h"
#include "recur/safetensors.h"

namespace {
std::string g_dir;
}

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const auto base = std::filesystem::exists("/dev/shm") ? std::filesystem::path("/dev/shm")
                                                        : std::filesystem::temp_directory_path();
  g_dir = (base / ("recur-fuzz-index-" + std::to_string(getpid()))).string();
  std::filesystem::create_directories(g_dir);
  const std::vector<float> a = {1, 2, 3, 4}, b = {5, 6};
  recur::write_safetensors(g_dir + "/model-00001-of-00002.safetensors", {{"a", {2, 2}, a.data()}},
                           recur::DType::kF32);
  recur::write_safetensors(g_dir + "/model-00002-of-00002.safetensors", {{"b", {2}, b.data()}},
                           recur::DType::kBF16);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  {
    std::ofstream out(g_dir + "/model.safetensors.index.json", std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  try {
    const auto store = recur::TensorStore::open_dir(g_dir);
    for (const auto& [name, info] : store.tensors()) (void)store.read(name);
  } catch (const recur::Error&) {
  }
  return 0;
}
