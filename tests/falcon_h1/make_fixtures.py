#!/usr/bin/env python3
"""The Falcon-H1 fixtures: random-weight checkpoints written by reference.py's make() from the
specs below, and expected.json with the float64 reference's figures for each (mean NLL over
tests/mamba2/prompt_ids.txt, 8 greedy ids after it, the logits of the probe ids at every position
and each position's largest |logit|, the chunked scan's agreement, PyTorch float32's distance).
expected_nll.txt: `name mean_nll` lines. The multipliers are made up (no published config.json
could be read here), each other than 1 so that each is checked where it applies.

  /usr/bin/python3 tests/falcon_h1/make_fixtures.py          write everything here
"""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "support"))
import reference  # noqa: E402
from pyref import write_fixture_set  # noqa: E402

MULT_A = dict(embedding_multiplier=5.0, lm_head_multiplier=0.04, key_multiplier=0.4,
              attention_in_multiplier=1.5, attention_out_multiplier=0.9, ssm_in_multiplier=1.25,
              ssm_out_multiplier=0.25, mlp_multipliers=[0.9, 0.6],
              ssm_multipliers=[0.35, 0.25, 0.5, 0.7, 1.2])
MULT_B = dict(embedding_multiplier=12.0, lm_head_multiplier=0.5, key_multiplier=2.0,
              attention_in_multiplier=0.7, attention_out_multiplier=1.4, ssm_in_multiplier=0.8,
              ssm_out_multiplier=1.6, mlp_multipliers=[1.3, 0.45],
              ssm_multipliers=[1.5, 0.6, 1.1, 0.9, 0.8])

# name: (what it covers, spec)
FIXTURES = {
    "falcon-h1": (
        "transformers 4's falcon_h1 layout as the published models use it: no gated norm "
        "(mamba_rms_norm false: y * silu(z)), mamba_d_ssm 96 (not mamba_expand * hidden_size), "
        "6 Mamba-2 heads of 16, state 16, one group; attention 4 heads over 2 kv heads with "
        "head_dim 8 (not hidden_size / heads), rope_theta 1e11; every multiplier other than 1; "
        "untied, float32, time_step_limit [0.0, Infinity], attn_layer_indices null",
        dict(d_ssm=96, m_heads=6, m_head_dim=16, head_dim=8, norm_before_gate=False,
             dt_limit=[0.0, float("inf")], mult=MULT_A, extra={"attn_layer_indices": None})),
    "falcon-h1-norm": (
        "the gated norm before the gate (mamba_rms_norm true, transformers' default "
        "mamba_norm_before_gate true) per group, 2 groups, mamba_d_ssm null and mamba_d_head "
        "\"auto\" (8 heads of 16), every bias (mamba_proj_bias, projectors_bias, attention_bias, "
        "mlp_bias), tied, transformers 5's rope_parameters, time_step_limit [0.004, 0.05] "
        "biting, other multipliers, bfloat16, 3 layers",
        dict(layers=3, m_heads=8, m_head_dim="auto", groups=2, rms_norm=True,
             norm_before_gate=True, proj_bias=True, projectors_bias=True, attention_bias=True,
             mlp_bias=True, tie=True, rope_parameters=True, rope_theta=10000.0,
             dt_limit=[0.004, 0.05], mult=MULT_B, dtype="bf16", seed=3)),
    "falcon-h1-after-gate": (
        "the gated norm after the gate (y * silu(z) normed per group), 4 groups of 2 heads, "
        "state 32, no conv bias, 3 taps, num_key_value_heads null (as many as heads), head_dim "
        "absent (hidden_size / heads), multipliers of 1",
        dict(m_heads=8, m_head_dim=16, groups=4, state=32, conv=3, conv_bias=False,
             rms_norm=True, norm_before_gate=False, kv_heads=None, seed=5)),
}
SPECS = {name: spec for name, (_, spec) in FIXTURES.items()}


if __name__ == "__main__":
    write_fixture_set(HERE, FIXTURES, reference)
