#!/usr/bin/env python3
"""The Mamba-2 fixtures: random-weight checkpoints written by reference.py's make() from the
specs below, and expected.json with the float64 reference's figures for each (mean NLL over
prompt_ids.txt, 8 greedy ids after it, the logits of PROBE_IDS at every position and each
position's logit RMS, the chunked scan's agreement). expected_nll.txt: `name mean_nll` lines.

  /usr/bin/python3 tests/mamba2/make_fixtures.py          write everything here
"""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "support"))
import reference  # noqa: E402
from pyref import write_fixture_set  # noqa: E402

# name: (what it covers, spec)
FIXTURES = {
    "mamba2-plain": (
        "transformers' mamba2 layout: 8 heads of 16, state 16, one group, conv bias, no "
        "time_step_limit, untied, float32, 2 layers",
        dict(layers=2)),
    "mamba2-groups": (
        "2 groups sharing B and C (the gated norm per group), state 32, in_proj and out_proj "
        "biases, tied, time_step_limit [0.0, Infinity] as Python writes it, Codestral Mamba's "
        "extra fields (norm_before_gate true, which transformers ignores; intermediate_size), 3 "
        "layers",
        dict(layers=3, groups=2, state=32, use_bias=True, tie=True, gain=3.0,
             dt_limit=[0.0, float("inf")],
             extra={"norm_before_gate": True, "intermediate_size": 128, "time_step_scale": 1.0,
                    "time_step_init_scheme": "random"})),
    "mamba2-clamped": (
        "time_step_limit [0.004, 0.03] (the clamp bites at both ends), 4 groups of one head of "
        "32, no conv bias, conv 3 taps, bfloat16",
        dict(layers=2, head_dim=32, groups=4, state=16, conv=3, conv_bias=False,
             dt_limit=[0.004, 0.03], dtype="bf16", seed=3)),
    "mamba-ssm": (
        "state-spaces' mamba_ssm layout (no model_type; d_model, ssm_cfg; backbone.embedding), "
        "norm_before_gate true, 2 groups, tied, vocabulary 300 padded to 304, dt_limit "
        "[0.0, 0.05]",
        dict(layout="mamba_ssm", layers=2, groups=2, norm_before_gate=True, tie=True, gain=3.0,
             dt_limit=[0.0, 0.05], seed=5)),
    "granite-hybrid": (
        "granitemoehybrid (Granite 4.0-H) dense: Mamba-2, attention, Mamba-2, attention with no "
        "positions (position_embedding_type nope), 4 heads over 2 kv heads of 16, Granite's "
        "multipliers (embedding 12, residual 0.22, attention 1/128, logits 8), the shared MLP, "
        "untied, time_step_limit [0.0, Infinity]",
        dict(layout="granite", types="MAMA", dt_limit=[0.0, float("inf")], seed=11)),
    "granite-dense": (
        "granitemoehybrid as IBM's non-hybrid Granite 4.0 ships it: every layer attention, "
        "rotary (position_embedding_type rope, theta 1e4), the mamba_* keys still present, "
        "attention biases, tied, bfloat16",
        dict(layout="granite", types="AAA", rope=True, attention_bias=True, tie=True, dtype="bf16",
             seed=13)),
}
SPECS = {name: spec for name, (_, spec) in FIXTURES.items()}


if __name__ == "__main__":
    write_fixture_set(HERE, FIXTURES, reference)
