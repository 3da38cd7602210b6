// flash-linear-attention's gated models (GLA, RetNet, HGRN2) and their hybrid softmax layers:
// the config reader, the tensor table, the loader and the layer stack, kept beside the other
// layouts' code (config.cpp, model.cpp, decoder.cpp) which call in here. docs/fla-models.md.
#pragma once

#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "model/decoder_impl.h"
#include "util/json.h"

namespace recur::fla {

using Shape = std::vector<std::int64_t>;

/// Reads the fields of model_type `type` ("gla", "retnet", "hgrn2") into `c`; every name it
/// looked at goes into `used` (the caller refuses the others).
void read_config(const json::Value& root, const std::string& type, const std::string& source,
                 ModelConfig& c, std::set<std::string>& used);
/// The derived sizes and the layer schedule; FormatError naming `source`.
void resolve(ModelConfig& c, const std::string& source);
/// config.json's fields for this configuration, each line "  \"key\": value,\n".
std::string to_json_fields(const ModelConfig& c);
/// Every tensor, in a fixed order.
std::vector<std::pair<std::string, Shape>> tensor_shapes(const ModelConfig& c);

/// How the loader reads tensors (model.cpp's Loader, seen through functions).
struct Reader {
  std::function<std::vector<float>(const std::string&, const Shape&, const char*)> take;
  std::function<model::Dense(const std::string&, int, int, bool, const char*)> dense;
  std::function<DType(const std::string&)> dtype;
  std::function<void(const std::string&)> ignore;
  std::function<bool(const std::string&)> has;
  std::function<void(const std::string&, const std::vector<float>&, const Shape&)> accept_tied;
  /// The LM head's matrix (quantized in the head's format, `recur quantize --head`).
  std::function<model::Dense(const std::string&, int, int, const char*)> head;
  /// A tied embedding: read as the head's matrix (so quantize packs it with the head's format);
  /// its values into `embeddings`, its packed rows returned, the copy under `tied_name` checked.
  std::function<model::Dense(const std::string&, const std::string&, int, int, const char*,
                             std::vector<float>&)> tied_table;
};
/// Fills impl's embeddings, layers, final norm and head.
void load(const ModelConfig& c, const Reader& r, Model::Impl& impl);

/// The layers of an fla model over the workspace's n rows (the embeddings already in w.x).
void run_stack(const Model& model, model::Workspace& w, int n, int threads, model::Attend attend);
/// Workspace sizes for `rows` rows.
void allocate(const ModelConfig& c, const Model::Impl& m, model::Workspace& w, int rows);
/// The rows a layer's sequence part reads and writes.
model::MixerIo mixer_io(const ModelConfig& c, const Model::Impl::Layer& layer);
/// That part, for `rows` rows of one sequence.
void run_mixer(const ModelConfig& c, const Model::Impl::Layer& layer, model::LayerState& state,
               const model::MixerRows& rows, int n, int threads);

}  // namespace recur::fla
