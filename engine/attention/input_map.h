// Which built-in elementwise map a FeatureMap is, so that the prefill's input pass
// (kernels/linear_kernels.h, gather_tiles) can apply it in the same read as the finiteness check
// and the transposition, with the same operations and so the same bytes.
#pragma once

#include "kernels/linear_kernels.h"
#include "recur/feature_map.h"

namespace recur::detail {

/// elu+1, relu or the identity when phi is the built-in map of that name; kNone for any other
/// map (Taylor, the models' maps, a caller's own), which the caller applies itself.
kernels::InputMap input_map_of(const FeatureMap& phi);

}  // namespace recur::detail
