#!/usr/bin/env python3
"""The Nemotron-H fixtures: random-weight checkpoints written by reference.py's make() from the
specs below, and expected.json with the float64 reference's figures for each (mean NLL over
tests/mamba2/prompt_ids.txt, 8 greedy ids after it, the logits of PROBE_IDS at every position and
each position's largest |logit|, the chunked scan's agreement, PyTorch float32's error).
expected_nll.txt: `name mean_nll` lines.

  /usr/bin/python3 tests/nemotron_h/make_fixtures.py          write everything here
"""

import importlib.util
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
from pyref import write_fixture_set  # noqa: E402

_spec = importlib.util.spec_from_file_location("nemotron_h_reference", os.path.join(HERE, "reference.py"))
reference = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(reference)

# name: (what it covers, spec)
FIXTURES = {
    "nemotron-h-hybrid": (
        "Nemotron Nano 2's shapes in small: M-M*-M- (Mamba-2, MLP, Mamba-2, attention, MLP, "
        "Mamba-2, MLP); 8 Mamba-2 heads of 12 (96 wide, not expand * hidden_size = 128) in 2 "
        "groups (the gated norm per group), state 16; attention 4 heads over 2 kv heads of 24 "
        "(head_dim apart from hidden_size / heads = 16), no positions; relu2 MLP 160 wide; "
        "untied, float32, time_step_limit [0.0, Infinity] as Python writes it, NVIDIA's other "
        "fields (rms_norm_eps, expand, mamba_proj_bias false, sliding_window null)",
        dict(pattern="M-M*-M-", dt_limit=[0.0, float("inf")])),
    "nemotron-h-biases": (
        "attention first (*M-M-), attention, MLP and mixer biases (attention_bias, mlp_bias, "
        "use_bias), no conv bias, 3 taps, 4 groups of one head of 16, state 8, one kv head, "
        "tied, bfloat16, time_step_limit [0.004, 0.05] (the clamp bites at both ends)",
        dict(pattern="*M-M-", heads=2, kv_heads=1, head_dim=32, m_heads=4, m_head_dim=16,
             groups=4, state=8, conv=3, conv_bias=False, use_bias=True, attention_bias=True,
             mlp_bias=True, intermediate=96, tie=True, dtype="bf16", dt_limit=[0.004, 0.05],
             gain=6.0, seed=7)),
}
SPECS = {name: spec for name, (_, spec) in FIXTURES.items()}


if __name__ == "__main__":
    write_fixture_set(HERE, FIXTURES, reference)
