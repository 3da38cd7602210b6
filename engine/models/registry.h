// The families recur reads, one module each (engine/models/<family>/); registry.cpp lists them.
#pragma once

#include "model/family.h"

namespace recur::models {

const model::Family& linear_family();  // linear_attn and transformers_are_rnns
const model::Family& based_family();   // HazyResearch's Based
const model::Family& gla_family();     // flash-linear-attention's GLA, RetNet, HGRN2
const model::Family& rwkv7_family();   // RWKV-7: fla-hub's folders and BlinkDL's .pth
const model::Family& mamba2_family();  // Mamba-2: transformers' mamba2, mamba_ssm's
const model::Family& granite_family();  // IBM Granite 4.0(-H): granitemoehybrid, dense
const model::Family& falcon_h1_family();  // TII Falcon-H1: Mamba-2 beside attention in each layer
const model::Family& gdn_family();     // Gated DeltaNet: Qwen3.5, fla gated_deltanet
const model::Family& lfm2_family();    // Liquid AI's LFM2 and LFM2.5 (dense)
const model::Family& nemotron_h_family();  // NVIDIA's Nemotron-H and Nemotron Nano 2, dense

}  // namespace recur::models
