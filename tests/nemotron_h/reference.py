#!/usr/bin/env python3
"""Nemotron-H's float64 reference, written from the published code (transformers'
models/nemotron_h/modeling_nemotron_h.py and NVIDIA's modeling_nemotron_h.py beside its
checkpoints: NemotronHBlock, NemotronHAttention, NemotronHMLP, NemotronHRMSNorm and the Mamba-2
mixer with its MambaRMSNormGated per group). The Mamba-2 mixer and its two scans are
tests/support/ssd_ref.py's, as tests/mamba2's; neither library is imported. Debian's
python3-torch, run as /usr/bin/python3.

  reference.py make OUT_DIR SPEC_JSON        write a random checkpoint (config.json, model.safetensors)
  reference.py score MODEL_DIR IDS_FILE      mean NLL, greedy ids (JSON on stdout)
  reference.py --self-test                   the blocks' readings where they could part
  reference.py --check-expected EXPECTED     regenerate every fixture's figures and compare

Per layer, one letter of hybrid_override_pattern (docs/nemotron_h.md):
  x += block(rmsnorm(x)),  block: M Mamba-2, * attention (no positions), - down(relu(up(h))^2)
"""

import json
import math
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
from pyref import (Draw, causal_attention, dense, read_safetensors,  # noqa: E402
                   reference_main, rms_norm, write_checkpoint)
import ssd_ref  # noqa: E402

F64 = torch.float64
DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16}
PROMPT = os.path.join(HERE, "..", "mamba2", "prompt_ids.txt")
PROMPT_NOTE = "tests/mamba2/prompt_ids.txt (300 ids: bytes of models/kjv/heldout.txt)"

DEFAULTS = dict(hidden=64, vocab=300, pattern="M*M-", heads=4, kv_heads=2, head_dim=24,
                intermediate=160, m_heads=8, m_head_dim=12, state=16, groups=2, conv=4,
                use_bias=False, conv_bias=True, attention_bias=False, mlp_bias=False,
                dt_limit=None, tie=False, eps=1e-5, dtype="f32", seed=0, extra={}, logit_std=3.0,
                gain=1.0)


# --------------------------------------------------------------------------------------------
# Random checkpoints

def make(out_dir, spec):
    s = dict(DEFAULTS, **spec)
    r = Draw(s["seed"])
    D, V = s["hidden"], s["vocab"]
    H, P, N, G = s["m_heads"], s["m_head_dim"], s["state"], s["groups"]
    inner = H * P
    conv_dim = inner + 2 * G * N
    hd, I = s["head_dim"], s["intermediate"]
    t = {"backbone.embeddings.weight": r.randn(V, D)}

    for i, kind in enumerate(s["pattern"]):
        p = f"backbone.layers.{i}."
        t[p + "norm.weight"] = r.randn(D, std=0.1, mean=1.0)
        m = p + "mixer."
        if kind == "M":
            r.dense(t, m + "in_proj", inner + conv_dim + H, D, s["use_bias"], D ** -0.5)
            ssd_ref.draw_ssd(r, t, m, H, conv_dim, s["conv"], s["conv_bias"])
            t[m + "norm.weight"] = r.randn(inner, std=0.1, mean=1.0)
            r.dense(t, m + "out_proj", D, inner, s["use_bias"], s["gain"] * inner ** -0.5)
        elif kind == "*":
            r.dense(t, m + "q_proj", s["heads"] * hd, D, s["attention_bias"], 2.0 * D ** -0.5)
            r.dense(t, m + "k_proj", s["kv_heads"] * hd, D, s["attention_bias"], 2.0 * D ** -0.5)
            r.dense(t, m + "v_proj", s["kv_heads"] * hd, D, s["attention_bias"], D ** -0.5)
            r.dense(t, m + "o_proj", D, s["heads"] * hd, s["attention_bias"],
                    s["gain"] * (s["heads"] * hd) ** -0.5)
        else:
            r.dense(t, m + "up_proj", I, D, s["mlp_bias"], D ** -0.5)
            r.dense(t, m + "down_proj", D, I, s["mlp_bias"], s["gain"] * I ** -0.5)
    target = s["logit_std"] / D ** 0.5 if s["tie"] else s["logit_std"]
    t["backbone.norm_f.weight"] = target * r.randn(D, std=0.1, mean=1.0)
    if not s["tie"]:
        t["lm_head.weight"] = r.randn(V, D, std=D ** -0.5)
    t = {k: v.to(DTYPES[s["dtype"]]) for k, v in t.items()}
    # The fields of NVIDIA's published config.json files (their values here the fixture's).
    cfg = {"architectures": ["NemotronHForCausalLM"], "model_type": "nemotron_h",
           "vocab_size": V, "hidden_size": D, "num_hidden_layers": len(s["pattern"]),
           "hybrid_override_pattern": s["pattern"], "num_attention_heads": s["heads"],
           "num_key_value_heads": s["kv_heads"], "head_dim": hd, "attention_bias": s["attention_bias"],
           "attention_dropout": 0.0, "intermediate_size": I, "mlp_hidden_act": "relu2",
           "mlp_bias": s["mlp_bias"], "mamba_num_heads": H, "mamba_head_dim": P,
           "ssm_state_size": N, "n_groups": G, "conv_kernel": s["conv"], "expand": 2,
           "use_conv_bias": s["conv_bias"], "use_bias": s["use_bias"], "mamba_proj_bias": False,
           "mamba_hidden_act": "silu", "chunk_size": 128, "time_step_min": 0.001,
           "time_step_max": 0.1, "time_step_floor": 0.0001, "layer_norm_epsilon": s["eps"],
           "rms_norm_eps": s["eps"], "residual_in_fp32": False, "rescale_prenorm_residual": True,
           "initializer_range": 0.02, "hidden_dropout": 0.0, "sliding_window": None,
           "max_position_embeddings": 8192, "num_logits_to_keep": 1, "use_cache": True,
           "use_mamba_kernels": True, "tie_word_embeddings": s["tie"], "bos_token_id": 1,
           "eos_token_id": 2, "pad_token_id": 0,
           "torch_dtype": {"f32": "float32", "bf16": "bfloat16"}[s["dtype"]]}
    if s["dt_limit"] is not None:
        cfg["time_step_limit"] = list(s["dt_limit"])
    cfg.update(s["extra"])
    write_checkpoint(out_dir, t, cfg)


# --------------------------------------------------------------------------------------------
# Reading a checkpoint

def load(model_dir):
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    t = {k: v.to(F64) for k, v in read_safetensors(os.path.join(model_dir, "model.safetensors")).items()}
    tie = cfg.get("tie_word_embeddings", False)
    # The mixer's keys as ssd_ref.mixer() reads them.
    return dict(t=t, pattern=cfg["hybrid_override_pattern"], H=cfg["mamba_num_heads"],
                P=cfg["mamba_head_dim"], N=cfg["ssm_state_size"], G=cfg["n_groups"],
                eps=cfg["layer_norm_epsilon"], norm_before_gate=False,
                limit=tuple(cfg.get("time_step_limit", (0.0, math.inf))),
                heads=cfg["num_attention_heads"], kv_heads=cfg["num_key_value_heads"],
                head_dim=cfg["head_dim"],
                head=t["backbone.embeddings.weight"] if tie else t["lm_head.weight"])


# --------------------------------------------------------------------------------------------
# The model

def attention(m, a, h):
    """NemotronHAttention: grouped kv heads of head_dim, scores times head_dim^-1/2, causal, no
    rotary (its forward applies none)."""
    t, T = m["t"], h.shape[0]
    Hq, Hkv, d = m["heads"], m["kv_heads"], m["head_dim"]
    q = dense(t, a + "q_proj", h).reshape(T, Hq, d)
    k = dense(t, a + "k_proj", h).reshape(T, Hkv, d)
    v = dense(t, a + "v_proj", h).reshape(T, Hkv, d)
    return dense(t, a + "o_proj", causal_attention(q, k, v, d ** -0.5))


def mlp(m, a, h):
    """NemotronHMLP: down_proj(relu2(up_proj(h))), relu2 = relu(x)^2."""
    return dense(m["t"], a + "down_proj", torch.relu(dense(m["t"], a + "up_proj", h)) ** 2)


def forward(m, ids, scan=ssd_ref.scan_recurrent):
    """Logits (T, V), in the dtype of the model's tensors (float64)."""
    t = m["t"]
    x = t["backbone.embeddings.weight"][torch.tensor(ids)]
    for i, kind in enumerate(m["pattern"]):
        p = f"backbone.layers.{i}."
        h = rms_norm(x, t[p + "norm.weight"], m["eps"])
        if kind == "M":
            x = x + ssd_ref.mixer(m, p + "mixer.", h, scan)
        elif kind == "*":
            x = x + attention(m, p + "mixer.", h)
        else:
            x = x + mlp(m, p + "mixer.", h)
    return rms_norm(x, t["backbone.norm_f.weight"], m["eps"]) @ m["head"].T


def figures(model_dir, ids):
    return ssd_ref.figures(load(model_dir), forward, ids)


# --------------------------------------------------------------------------------------------

def self_test():
    r = Draw(7)
    # relu2 is relu(x)^2: zero below 0, x^2 above (not x * |x|, not the square of x).
    x = torch.tensor([-2.0, -0.5, 0.0, 0.5, 3.0], dtype=F64)
    assert torch.equal(torch.relu(x) ** 2, torch.tensor([0.0, 0.0, 0.0, 0.25, 9.0], dtype=F64))
    # Attention: one kv head shared by two query heads equals each query head over a copy; with
    # T = 1 the output is the value (softmax over one key), whatever the scores.
    m = dict(t={}, heads=2, kv_heads=1, head_dim=3)
    for n, rows in (("q_proj", 6), ("k_proj", 3), ("v_proj", 3)):
        m["t"]["a." + n + ".weight"] = r.randn(rows, 6).to(F64)
    m["t"]["a.o_proj.weight"] = torch.eye(6, dtype=F64)
    h = r.randn(1, 6).to(F64)
    v = h @ m["t"]["a.v_proj.weight"].T
    assert torch.allclose(attention(m, "a.", h), torch.cat([v, v], -1))
    # A later token attends to earlier ones: changing token 0 changes token 1's output, and
    # changing token 1 leaves token 0's (causal).
    h2 = r.randn(2, 6).to(F64)
    a = attention(m, "a.", h2)
    b = attention(m, "a.", torch.stack([h2[0] + 1.0, h2[1]]))
    c = attention(m, "a.", torch.stack([h2[0], h2[1] + 1.0]))
    assert (a[1] - b[1]).abs().max() > 1e-6 and torch.equal(a[0], c[0])
    print("reference.py self-test: relu2, grouped kv heads and the causal mask as the published "
          "code computes them")


if __name__ == "__main__":
    reference_main(sys.argv[1:], sys.modules[__name__])
