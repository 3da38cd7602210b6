// The JSON parser behind config.json, safetensors headers and indexes.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "recur/error.h"
#include "util/json.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const auto v = recur::json::parse(text, "fuzz");
    // What a reader does next: walk it and quote its strings back.
    if (v.is_object())
      for (const auto& [key, value] : v.object()) (void)recur::json::quote(key), (void)value.kind_name();
  } catch (const recur::Error&) {
  }
  return 0;
}
