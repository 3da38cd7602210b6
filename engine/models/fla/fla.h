// flash-linear-attention's gated models (GLA, RetNet, HGRN2) and the softmax attention layers of
// their hybrids: the config reader (fla_config.cpp), and the tensor table, the loader and the
// layer stack (fla.cpp). docs/fla-models.md.
#pragma once

#include <string>

#include "model/family.h"

namespace recur::models::fla {

// fla_config.cpp
/// Reads the fields of model_type `type` ("gla", "retnet", "hgrn2") into `c`.
void read_config(const json::Value& root, const std::string& type, model::Fields& f,
                 ModelConfig& c);
/// The derived sizes and the layer schedule; FormatError naming `source`.
void resolve(ModelConfig& c, const std::string& source);
/// config.json's fields for this configuration, each line "  \"key\": value,\n".
std::string config_fields(const ModelConfig& c);

}  // namespace recur::models::fla
