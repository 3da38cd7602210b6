#!/usr/bin/env python3
"""Falcon-H1's float64 reference, written from transformers' models/falcon_h1
(modeling_falcon_h1.py: FalconH1DecoderLayer, FalconH1Mixer.torch_forward, FalconH1Attention,
FalconH1MLP, FalconH1RMSNormGated, compute_mup_vector; configuration_falcon_h1.py's defaults).
transformers is not imported; the Mamba-2 scans (token by token, and the paper's chunked SSD
form as a second source) and the gated norm come from tests/support/ssd_ref.py. Debian's
python3-torch, run as /usr/bin/python3.

  reference.py make OUT_DIR SPEC_JSON        write a random checkpoint (config.json, model.safetensors)
  reference.py score MODEL_DIR IDS_FILE      mean NLL, greedy ids (JSON on stdout)
  reference.py --self-test                   the multipliers each change the logits; the scans agree
  reference.py --check-expected EXPECTED     regenerate every fixture's figures and compare

Per layer (docs/mamba2.md, "Falcon-H1"):
  h = rmsnorm(x);  x += ssm_out * mamba(ssm_in * h) + attn_out * attention(attn_in * h)
  x += down_mult * down(up(h2) * silu(gate_mult * gate(h2))),  h2 = rmsnorm(x)
"""

import json
import math
import os
import sys
import tempfile

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
from pyref import (Draw, causal_attention, dense, read_safetensors,  # noqa: E402
                   reference_main, rms_norm, rotate, write_checkpoint)
import ssd_ref  # noqa: E402

F64 = torch.float64
DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16}
PROMPT = os.path.join(HERE, "..", "mamba2", "prompt_ids.txt")
PROMPT_NOTE = "tests/mamba2/prompt_ids.txt (300 ids: bytes of models/kjv/heldout.txt)"

DEFAULTS = dict(hidden=64, vocab=300, layers=2, heads=4, kv_heads=2, head_dim=None, ff=96,
                m_heads=8, m_head_dim=16, d_ssm=None, expand=2, state=16, groups=1, conv=4,
                conv_bias=True, proj_bias=False, projectors_bias=False, attention_bias=False,
                mlp_bias=False, rms_norm=False, norm_before_gate=True, dt_limit=None,
                rope_theta=1e11, rope_parameters=False, tie=False, eps=1e-5, dtype="f32", seed=0,
                mult={}, extra={}, logit_std=3.0)

# configuration_falcon_h1.py's defaults.
MULT_DEFAULTS = dict(embedding_multiplier=1.0, lm_head_multiplier=1.0, key_multiplier=1.0,
                     attention_in_multiplier=1.0, attention_out_multiplier=1.0,
                     ssm_in_multiplier=1.0, ssm_out_multiplier=1.0, mlp_multipliers=[1.0, 1.0],
                     ssm_multipliers=[1.0, 1.0, 1.0, 1.0, 1.0])


def sizes(s):
    """inner, heads, head size, conv_dim, in_proj width, as FalconH1Mixer sizes them."""
    inner = s["d_ssm"] if s["d_ssm"] is not None else int(s["expand"] * s["hidden"])
    H = s["m_heads"]
    P = inner // H if s["m_head_dim"] == "auto" else s["m_head_dim"]
    conv_dim = inner + 2 * s["groups"] * s["state"]
    return inner, H, P, conv_dim, inner + conv_dim + H


def attn_head_dim(s):
    return s["head_dim"] if s["head_dim"] is not None else s["hidden"] // s["heads"]


def make(out_dir, spec):
    s = dict(DEFAULTS, **spec)
    mult = dict(MULT_DEFAULTS, **s["mult"])
    r = Draw(s["seed"])
    D, V, F = s["hidden"], s["vocab"], s["ff"]
    inner, H, P, conv_dim, width = sizes(s)
    hd = attn_head_dim(s)
    kv = s["kv_heads"] or s["heads"]  # null: as many as heads
    em, lm = mult["embedding_multiplier"], mult["lm_head_multiplier"]
    # Embeddings at 1 / embedding_multiplier: the multiplier brings them to unit scale.
    t = {"model.embed_tokens.weight": r.randn(V, D, std=1.0 / em)}
    for i in range(s["layers"]):
        p = f"model.layers.{i}."
        t[p + "input_layernorm.weight"] = r.randn(D, std=0.1, mean=1.0)
        m = p + "mamba."
        r.dense(t, m + "in_proj", width, D, s["proj_bias"], D ** -0.5)
        ssd_ref.draw_ssd(r, t, m, H, conv_dim, s["conv"], s["conv_bias"])
        if s["rms_norm"]:
            t[m + "norm.weight"] = r.randn(inner, std=0.1, mean=1.0)
        r.dense(t, m + "out_proj", D, inner, s["projectors_bias"],
            inner ** -0.5 / mult["ssm_out_multiplier"])
        a = p + "self_attn."
        # q over key_multiplier: the scores (times key_multiplier / sqrt(hd)) of unit scale.
        r.dense(t, a + "q_proj", s["heads"] * hd, D, s["attention_bias"], D ** -0.5 / mult["key_multiplier"])
        r.dense(t, a + "k_proj", kv * hd, D, s["attention_bias"], D ** -0.5)
        r.dense(t, a + "v_proj", kv * hd, D, s["attention_bias"], D ** -0.5)
        r.dense(t, a + "o_proj", D, s["heads"] * hd, s["attention_bias"],
            (s["heads"] * hd) ** -0.5 / mult["attention_out_multiplier"])
        t[p + "pre_ff_layernorm.weight"] = r.randn(D, std=0.1, mean=1.0)
        f = p + "feed_forward."
        r.dense(t, f + "gate_proj", F, D, s["mlp_bias"], D ** -0.5)
        r.dense(t, f + "up_proj", F, D, s["mlp_bias"], D ** -0.5)
        r.dense(t, f + "down_proj", D, F, s["mlp_bias"], F ** -0.5 / mult["mlp_multipliers"][1])
    target = s["logit_std"] / lm
    if s["tie"]:
        target *= em / D ** 0.5
    t["model.final_layernorm.weight"] = target * r.randn(D, std=0.1, mean=1.0)
    if not s["tie"]:
        t["lm_head.weight"] = r.randn(V, D, std=D ** -0.5)
    t = {k: v.to(DTYPES[s["dtype"]]) for k, v in t.items()}
    cfg = {"architectures": ["FalconH1ForCausalLM"], "model_type": "falcon_h1",
           "vocab_size": V, "hidden_size": D, "intermediate_size": F,
           "num_hidden_layers": s["layers"], "num_attention_heads": s["heads"],
           "num_key_value_heads": s["kv_heads"], "hidden_act": "silu",
           "initializer_range": 0.02, "rms_norm_eps": s["eps"], "use_cache": True,
           "num_logits_to_keep": 1, "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2,
           "max_position_embeddings": 8192, "attention_dropout": 0.0,
           "mamba_d_ssm": s["d_ssm"], "mamba_n_heads": H, "mamba_d_head": s["m_head_dim"],
           "mamba_n_groups": s["groups"], "mamba_d_state": s["state"], "mamba_d_conv": s["conv"],
           "mamba_expand": s["expand"], "mamba_chunk_size": 256, "mamba_conv_bias": s["conv_bias"],
           "mamba_proj_bias": s["proj_bias"], "mamba_norm_before_gate": s["norm_before_gate"],
           "mamba_rms_norm": s["rms_norm"], "time_step_min": 0.001, "time_step_max": 0.1,
           "projectors_bias": s["projectors_bias"], "attention_bias": s["attention_bias"],
           "mlp_bias": s["mlp_bias"], "tie_word_embeddings": s["tie"],
           "torch_dtype": {"f32": "float32", "bf16": "bfloat16"}[s["dtype"]]}
    if s["head_dim"] is not None:
        cfg["head_dim"] = s["head_dim"]
    if s["dt_limit"] is not None:
        cfg["time_step_limit"] = list(s["dt_limit"])
    if s["rope_parameters"]:
        cfg["rope_parameters"] = {"rope_type": "default", "rope_theta": s["rope_theta"]}
    else:
        cfg.update(rope_theta=s["rope_theta"], rope_scaling=None)
    cfg.update(s["mult"])
    cfg.update(s["extra"])
    write_checkpoint(out_dir, t, cfg)


def load(model_dir):
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    s = dict(DEFAULTS, hidden=cfg["hidden_size"], heads=cfg["num_attention_heads"],
             kv_heads=cfg.get("num_key_value_heads") or cfg["num_attention_heads"],
             head_dim=cfg.get("head_dim"), m_heads=cfg["mamba_n_heads"],
             m_head_dim=cfg.get("mamba_d_head", "auto"), d_ssm=cfg.get("mamba_d_ssm"),
             expand=cfg.get("mamba_expand", 2), state=cfg["mamba_d_state"],
             groups=cfg.get("mamba_n_groups", 1), rms_norm=cfg.get("mamba_rms_norm", False),
             norm_before_gate=cfg.get("mamba_norm_before_gate", True),
             eps=cfg.get("rms_norm_eps", 1e-5), tie=cfg.get("tie_word_embeddings", False))
    rope = cfg.get("rope_parameters") or {}
    s["rope_theta"] = rope.get("rope_theta", cfg.get("rope_theta", 1e11))
    s["limit"] = tuple(cfg.get("time_step_limit", (0.0, math.inf)))
    s["mult"] = {k: cfg.get(k, v) for k, v in MULT_DEFAULTS.items()}
    s["t"] = {k: v.to(F64) for k, v in
              read_safetensors(os.path.join(model_dir, "model.safetensors")).items()}
    s["head"] = s["t"]["model.embed_tokens.weight"] if s["tie"] else s["t"]["lm_head.weight"]
    return s


def mup_vector(s, dtype):
    """compute_mup_vector: one multiplier per part of in_proj's output (z, x, B, C, dt)."""
    inner, H, _, _, _ = sizes(s)
    GN = s["groups"] * s["state"]
    parts = (inner, inner, GN, GN, H)
    return torch.cat([torch.full((n,), float(v), dtype=dtype)
                      for n, v in zip(parts, s["mult"]["ssm_multipliers"])])


def mamba(s, q, h, scan):
    """FalconH1Mixer.torch_forward over the normed rows h (T, D), without a cache."""
    t = s["t"]
    inner, H, P, _, _ = sizes(s)
    G, N = s["groups"], s["state"]
    proj = dense(t, q + "in_proj", h * s["mult"]["ssm_in_multiplier"]) * mup_vector(s, h.dtype)
    z, xBC, dt_raw = proj[:, :inner], proj[:, inner:-H], proj[:, -H:]
    y = ssd_ref.ssd(t, q, xBC, dt_raw, H, P, N, G, s["limit"], scan)
    if s["rms_norm"]:  # FalconH1RMSNormGated: per group, before or after the gate
        y = ssd_ref.gated_norm(y, z, t[q + "norm.weight"], G, s["eps"], s["norm_before_gate"])
    else:
        y = y * (z * torch.sigmoid(z))
    return dense(t, q + "out_proj", y)


def attention(s, a, h):
    """FalconH1Attention: the keys times key_multiplier before rotary, scores / sqrt(head_dim)."""
    t, T = s["t"], h.shape[0]
    Hq, Hkv, d = s["heads"], s["kv_heads"], attn_head_dim(s)
    q = dense(t, a + "q_proj", h).reshape(T, Hq, d)
    k = dense(t, a + "k_proj", h).reshape(T, Hkv, d) * s["mult"]["key_multiplier"]
    v = dense(t, a + "v_proj", h).reshape(T, Hkv, d)
    q, k = rotate(q, s["rope_theta"]), rotate(k, s["rope_theta"])
    return dense(t, a + "o_proj", causal_attention(q, k, v, d ** -0.5))


def forward(s, ids, scan=ssd_ref.scan_recurrent):
    """Logits (T, V), in the dtype of the model's tensors (float64)."""
    t, mu = s["t"], s["mult"]
    x = t["model.embed_tokens.weight"][torch.tensor(ids)] * mu["embedding_multiplier"]
    i = 0
    while f"model.layers.{i}.input_layernorm.weight" in t:
        p = f"model.layers.{i}."
        h = rms_norm(x, t[p + "input_layernorm.weight"], s["eps"])
        ssm = mamba(s, p + "mamba.", h, scan) * mu["ssm_out_multiplier"]
        att = attention(s, p + "self_attn.", h * mu["attention_in_multiplier"])
        x = x + (ssm + att * mu["attention_out_multiplier"])
        h = rms_norm(x, t[p + "pre_ff_layernorm.weight"], s["eps"])
        f = p + "feed_forward."
        g = dense(t, f + "gate_proj", h) * mu["mlp_multipliers"][0]
        y = dense(t, f + "up_proj", h) * (g * torch.sigmoid(g))
        x = x + dense(t, f + "down_proj", y) * mu["mlp_multipliers"][1]
        i += 1
    x = rms_norm(x, t["model.final_layernorm.weight"], s["eps"])
    return x @ s["head"].T * mu["lm_head_multiplier"]


def figures(model_dir, ids):
    return ssd_ref.figures(load(model_dir), forward, ids)


def self_test():
    """Each multiplier, and each option, changes the logits: none is read and then dropped."""
    ids = list(range(1, 40))
    with tempfile.TemporaryDirectory() as tmp:
        base = dict(rms_norm=True, groups=2, d_ssm=96, m_heads=6, m_head_dim=16, seed=1)
        b = os.path.join(tmp, "base")
        make(b, base)
        want = forward(load(b), ids)
        chunked = forward(load(b), ids, scan=ssd_ref.scan_chunked)
        assert (want - chunked).abs().max() < 1e-12 * want.abs().max(), "the two scans disagree"
        changes = {k: 1.3 for k in MULT_DEFAULTS if not k.endswith("s")}
        changes.update(mlp_multipliers=[1.3, 1.0], ssm_multipliers=[1.0, 1.0, 1.0, 1.3, 1.0])
        for key, value in changes.items():
            d = os.path.join(tmp, key)
            make(d, base)  # the same weights, one multiplier changed in config.json
            cfg = json.load(open(os.path.join(d, "config.json")))
            cfg[key] = value
            json.dump(cfg, open(os.path.join(d, "config.json"), "w"))
            got = forward(load(d), ids)
            assert (got - want).abs().max() > 1e-6, f"{key} changes nothing"
        for key, value in (("mamba_norm_before_gate", False), ("mamba_rms_norm", False)):
            d = os.path.join(tmp, key)
            make(d, base)
            cfg = json.load(open(os.path.join(d, "config.json")))
            cfg[key] = value
            json.dump(cfg, open(os.path.join(d, "config.json"), "w"))
            assert (forward(load(d), ids) - want).abs().max() > 1e-6, f"{key} changes nothing"
    print("reference.py self-test: the two scans agree within 1e-12; every multiplier and the "
          "gated norm's two options change the logits")


if __name__ == "__main__":
    reference_main(sys.argv[1:], sys.modules[__name__])
