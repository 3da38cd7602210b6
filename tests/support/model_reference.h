// A float64 forward pass of a whole model over a whole sequence, in the quadratic
// (attention-matrix) form, written independently of the engine from the model's formulas. It
// reads the same config.json and safetensors files the engine does.
#pragma once

#include <string>
#include <vector>

#include "recur/types.h"

namespace recur::testing {

/// Logits (T, vocab) of every position of `tokens` for the model in `dir`.
RowMatrixD reference_logits(const std::string& dir, const std::vector<int>& tokens);

/// max |a - b| / max |b| over the whole matrix.
double relative_error(const RowMatrixD& a, const RowMatrixD& b);

}  // namespace recur::testing
