// A quantized model made by the test: random weights written by write_quantized_model (as
// `recur quantize` writes them) and loaded back from the files.
#pragma once

#include <memory>
#include <string>

#include "model/random_weights.h"
#include "recur/model.h"
#include "recur/quantize.h"
#include "support/temp_dir.h"

namespace recur::testing {

inline std::shared_ptr<const Model> quantized_model(const ModelConfig& config, std::uint64_t seed,
                                                    const std::string& format,
                                                    const std::string& head = "",
                                                    DType dtype = DType::kF32) {
  TempDir dir;
  write_quantized_model(dir.file("model"), config, RandomWeights(config, seed, dtype),
                        {format, head});
  return Model::load(dir.file("model"));
}

}  // namespace recur::testing
