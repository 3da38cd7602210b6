// The former name of recur/gla_recurrence.h, kept for code written against it: GLA's decayed
// linear-attention recurrence was GatedAttention, a name that said less ("gated" also names
// Qwen3.5's output gate, the fla family and Gated DeltaNet). Include recur/gla_recurrence.h.
#pragma once

#include "recur/gla_recurrence.h"

namespace recur {

using GatedAttention [[deprecated("use recur::GlaRecurrence (recur/gla_recurrence.h)")]] =
    GlaRecurrence;
using GatedAttentionConfig [[deprecated("use recur::GlaRecurrenceConfig")]] = GlaRecurrenceConfig;
using GatedState [[deprecated("use recur::GlaState")]] = GlaState;

}  // namespace recur
