// config.json: parsed, resolved, and when it is accepted, its tensors listed (the sizes every
// later step allocates from).
#include <cstddef>
#include <cstdint>
#include <string>

#include "recur/error.h"
#include "recur/model.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const auto config = recur::ModelConfig::from_json(text, "fuzz/config.json");
    (void)recur::model_tensor_shapes(config);
    (void)recur::ModelConfig::from_json(config.to_json(), "round trip");  // what make-model writes
  } catch (const recur::Error&) {
  }
  return 0;
}
