// The families recur reads, one module each (engine/models/<family>/), each declared here from
// its line in families.def.
#pragma once

#include "model/family.h"

namespace recur::models {

#define RECUR_FAMILY(f) const model::Family& f##_family();
#include "models/families.def"
#undef RECUR_FAMILY

}  // namespace recur::models
