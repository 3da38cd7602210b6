#!/usr/bin/env python3
"""Mamba-2's float64 reference, written from the published code (transformers'
models/mamba2/modeling_mamba2.py: Mamba2Mixer.torch_forward and its cache's step; state-spaces'
mamba_ssm: modules/mamba2.py, ops/triton/layernorm_gated.py's rms_norm_ref, and the chunked
"SSD minimal" form of the paper's ssd_minimal.py as a second source for the scan). Neither
library is imported. Debian's python3-torch, run as /usr/bin/python3.

  reference.py make OUT_DIR SPEC_JSON        write a random checkpoint (config.json, model.safetensors)
  reference.py score MODEL_DIR IDS_FILE      mean NLL, greedy ids (JSON on stdout)
  reference.py --self-test                   the two scans agree; the readings differ where said
  reference.py --check-expected EXPECTED     regenerate every fixture's figures and compare

Per layer (docs/mamba2.md): x += out_proj(gated_norm(ssd(conv(in_proj(rmsnorm(x)))))).
"""

import json
import math
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
from pyref import (Draw, causal_attention, dense, read_safetensors,  # noqa: E402
                   reference_main, rms_norm, rotate, write_checkpoint)
from ssd_ref import (draw_ssd, figures as ssd_figures, gated_norm, mixer,  # noqa: E402
                     scan_chunked, scan_recurrent)

F64 = torch.float64
PROMPT = os.path.join(HERE, "prompt_ids.txt")
PROMPT_NOTE = "prompt_ids.txt (300 ids: bytes of models/kjv/heldout.txt)"
DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16}

DEFAULTS = dict(layout="transformers", hidden=64, vocab=300, layers=2, head_dim=16, state=16,
                groups=1, expand=2, conv=4, use_bias=False, conv_bias=True, dt_limit=None,
                norm_before_gate=False, tie=False, eps=1e-5, dtype="f32", seed=0, extra={},
                logit_std=3.0, pad_multiple=16, gain=1.0)


# --------------------------------------------------------------------------------------------
# Random checkpoints

def sizes(s):
    inner = int(s["expand"] * s["hidden"])
    H = inner // s["head_dim"]
    conv_dim = inner + 2 * s["groups"] * s["state"]
    return inner, H, conv_dim, inner + conv_dim + H


def padded_vocab(s):
    if s["layout"] != "mamba_ssm":
        return s["vocab"]
    m = s["pad_multiple"]
    return (s["vocab"] + m - 1) // m * m


def config_of(s):
    inner, H, _, _ = sizes(s)
    if s["layout"] == "mamba_ssm":
        ssm = {"layer": "Mamba2", "d_state": s["state"], "d_conv": s["conv"], "expand": s["expand"],
               "headdim": s["head_dim"], "ngroups": s["groups"],
               "norm_before_gate": s["norm_before_gate"], "bias": s["use_bias"],
               "conv_bias": s["conv_bias"], "chunk_size": 256}
        if s["dt_limit"] is not None:
            ssm["dt_limit"] = list(s["dt_limit"])
        cfg = {"d_model": s["hidden"], "d_intermediate": 0, "n_layer": s["layers"],
               "vocab_size": s["vocab"], "ssm_cfg": ssm, "attn_layer_idx": [], "attn_cfg": {},
               "rms_norm": True, "residual_in_fp32": True, "fused_add_norm": True,
               "pad_vocab_size_multiple": s["pad_multiple"], "tie_embeddings": s["tie"]}
    else:
        cfg = {"architectures": ["Mamba2ForCausalLM"], "model_type": "mamba2",
               "vocab_size": s["vocab"], "hidden_size": s["hidden"], "num_hidden_layers": s["layers"],
               "state_size": s["state"], "expand": s["expand"], "conv_kernel": s["conv"],
               "n_groups": s["groups"], "num_heads": H, "head_dim": s["head_dim"],
               "use_bias": s["use_bias"], "use_conv_bias": s["conv_bias"], "hidden_act": "silu",
               "layer_norm_epsilon": s["eps"], "rms_norm": True, "residual_in_fp32": True,
               "chunk_size": 256, "time_step_rank": 256, "time_step_min": 0.001,
               "time_step_max": 0.1, "time_step_floor": 0.0001, "initializer_range": 0.1,
               "rescale_prenorm_residual": False, "use_cache": True, "pad_token_id": 0,
               "bos_token_id": 0, "eos_token_id": 0, "tie_word_embeddings": s["tie"],
               "torch_dtype": {"f32": "float32", "bf16": "bfloat16"}[s["dtype"]]}
        if s["dt_limit"] is not None:
            cfg["time_step_limit"] = list(s["dt_limit"])
    cfg.update(s["extra"])
    return cfg


GRANITE_DEFAULTS = dict(types="MAMA", heads=4, kv_heads=2, rope=False, rope_theta=10000.0,
                        shared=96, embedding_multiplier=12.0, residual_multiplier=0.22,
                        attention_multiplier=0.0078125, logits_scaling=8.0, attention_bias=False)


def make_granite(out_dir, s):
    """A granitemoehybrid checkpoint (dense): transformers' names, Granite's multipliers."""
    s = dict(GRANITE_DEFAULTS, **s)
    r = Draw(s["seed"])
    D, V = s["hidden"], s["vocab"]
    inner, H, conv_dim, width = sizes(s)
    hd = D // s["heads"]
    types = ["mamba" if c == "M" else "attention" for c in s["types"]]
    # Granite's embeddings are small (the multiplier brings them to unit scale).
    t = {"model.embed_tokens.weight": r.randn(V, D, std=1.0 / s["embedding_multiplier"])}
    for i, kind in enumerate(types):
        p = f"model.layers.{i}."
        t[p + "input_layernorm.weight"] = r.randn(D, std=0.1, mean=1.0)
        if kind == "attention":
            a = p + "self_attn."
            for name, rows in (("q_proj", s["heads"] * hd), ("k_proj", s["kv_heads"] * hd),
                               ("v_proj", s["kv_heads"] * hd)):
                t[a + name + ".weight"] = r.randn(rows, D, std=D ** -0.5)
                if s["attention_bias"]:
                    t[a + name + ".bias"] = r.randn(rows, std=0.1)
            # The scores' multiplier is small: q scaled up so that softmax is not uniform.
            t[a + "q_proj.weight"] *= (hd ** -0.5) / s["attention_multiplier"]
            t[a + "o_proj.weight"] = r.randn(D, s["heads"] * hd, std=(s["heads"] * hd) ** -0.5 / s["residual_multiplier"])
            if s["attention_bias"]:
                t[a + "o_proj.bias"] = r.randn(D, std=0.1)
        else:
            m = p + "mamba."
            t[m + "in_proj.weight"] = r.randn(width, D, std=D ** -0.5)
            draw_ssd(r, t, m, H, conv_dim, s["conv"], s["conv_bias"])
            t[m + "norm.weight"] = r.randn(inner, std=0.1, mean=1.0)
            t[m + "out_proj.weight"] = r.randn(D, inner, std=inner ** -0.5 / s["residual_multiplier"])
        t[p + "post_attention_layernorm.weight"] = r.randn(D, std=0.1, mean=1.0)
        t[p + "shared_mlp.input_linear.weight"] = r.randn(2 * s["shared"], D, std=D ** -0.5)
        t[p + "shared_mlp.output_linear.weight"] = r.randn(D, s["shared"], std=s["shared"] ** -0.5 / s["residual_multiplier"])
    target = s["logit_std"] * s["logits_scaling"]
    if s["tie"]:
        target *= s["embedding_multiplier"] / D ** 0.5
    t["model.norm.weight"] = target * r.randn(D, std=0.1, mean=1.0)
    if not s["tie"]:
        t["lm_head.weight"] = r.randn(V, D, std=D ** -0.5)
    t = {k: v.to(DTYPES[s["dtype"]]) for k, v in t.items()}
    cfg = {"architectures": ["GraniteMoeHybridForCausalLM"], "model_type": "granitemoehybrid",
           "vocab_size": V, "hidden_size": D, "num_hidden_layers": len(types),
           "num_attention_heads": s["heads"], "num_key_value_heads": s["kv_heads"],
           "intermediate_size": s["shared"], "shared_intermediate_size": s["shared"],
           "num_local_experts": 0, "num_experts_per_tok": 0, "layer_types": types,
           "position_embedding_type": "rope" if s["rope"] else "nope",
           "rope_theta": s["rope_theta"], "rope_scaling": None, "rms_norm_eps": s["eps"],
           "attention_bias": s["attention_bias"], "attention_dropout": 0.0,
           "embedding_multiplier": s["embedding_multiplier"],
           "residual_multiplier": s["residual_multiplier"],
           "attention_multiplier": s["attention_multiplier"], "logits_scaling": s["logits_scaling"],
           "mamba_n_heads": H, "mamba_d_head": s["head_dim"], "mamba_d_state": s["state"],
           "mamba_n_groups": s["groups"], "mamba_d_conv": s["conv"], "mamba_expand": s["expand"],
           "mamba_chunk_size": 256, "mamba_conv_bias": s["conv_bias"], "mamba_proj_bias": False,
           "hidden_act": "silu", "max_position_embeddings": 4096, "normalization_function": "rmsnorm",
           "tie_word_embeddings": s["tie"], "bos_token_id": 0, "eos_token_id": 0,
           "pad_token_id": 0, "torch_dtype": {"f32": "float32", "bf16": "bfloat16"}[s["dtype"]]}
    if s["dt_limit"] is not None:
        cfg["time_step_limit"] = list(s["dt_limit"])
    cfg.update(s["extra"])
    write_checkpoint(out_dir, t, cfg)


def make(out_dir, spec):
    s = dict(DEFAULTS, **spec)
    if s["layout"] == "granite":
        return make_granite(out_dir, s)
    r = Draw(s["seed"])
    D, V = s["hidden"], padded_vocab(s)
    inner, H, conv_dim, width = sizes(s)
    emb_name = "backbone.embedding.weight" if s["layout"] == "mamba_ssm" else "backbone.embeddings.weight"
    t = {emb_name: r.randn(V, D)}
    for i in range(s["layers"]):
        p = f"backbone.layers.{i}."
        t[p + "norm.weight"] = r.randn(D, std=0.1, mean=1.0)
        m = p + "mixer."
        t[m + "in_proj.weight"] = r.randn(width, D, std=D ** -0.5)
        if s["use_bias"]:
            t[m + "in_proj.bias"] = r.randn(width, std=0.1)
        draw_ssd(r, t, m, H, conv_dim, s["conv"], s["conv_bias"])
        t[m + "norm.weight"] = r.randn(inner, std=0.1, mean=1.0)
        # gain: what each layer adds to the residual stream (tied fixtures take 3, or the model
        # mostly predicts its input token, whose embedding is also its head row).
        t[m + "out_proj.weight"] = r.randn(D, inner, std=s["gain"] * inner ** -0.5)
        if s["use_bias"]:
            t[m + "out_proj.bias"] = r.randn(D, std=0.1)
    target = s["logit_std"] / D ** 0.5 if s["tie"] else s["logit_std"]
    t["backbone.norm_f.weight"] = target * r.randn(D, std=0.1, mean=1.0)
    if not s["tie"]:
        t["lm_head.weight"] = r.randn(V, D, std=D ** -0.5)
    t = {k: v.to(DTYPES[s["dtype"]]) for k, v in t.items()}
    write_checkpoint(out_dir, t, config_of(s))


# --------------------------------------------------------------------------------------------
# Reading a checkpoint

def load(model_dir):
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)  # Python's reader takes Infinity too
    t = {k: v.to(F64) for k, v in read_safetensors(os.path.join(model_dir, "model.safetensors")).items()}
    m = {}
    if cfg.get("model_type") == "granitemoehybrid":
        D = cfg["hidden_size"]
        inner = int(cfg.get("mamba_expand", 2) * D)
        H = cfg["mamba_n_heads"]
        dh = cfg.get("mamba_d_head", "auto")
        m.update(granite=True, layer_types=cfg["layer_types"], H=H,
                 P=inner // H if dh == "auto" else dh, N=cfg["mamba_d_state"],
                 G=cfg.get("mamba_n_groups", 1), eps=cfg.get("rms_norm_eps", 1e-6),
                 norm_before_gate=False, tie=cfg.get("tie_word_embeddings", False),
                 limit=tuple(cfg.get("time_step_limit", (0.0, math.inf))),
                 emb="model.embed_tokens.weight", heads=cfg["num_attention_heads"],
                 kv_heads=cfg.get("num_key_value_heads", cfg["num_attention_heads"]),
                 rope=cfg.get("position_embedding_type") == "rope",
                 rope_theta=cfg.get("rope_theta", 10000.0),
                 embedding_multiplier=cfg.get("embedding_multiplier", 1.0),
                 residual_multiplier=cfg.get("residual_multiplier", 1.0),
                 attention_multiplier=cfg.get("attention_multiplier", 1.0),
                 logits_scaling=cfg.get("logits_scaling", 1.0))
    elif cfg.get("model_type") == "mamba2":
        D = cfg["hidden_size"]
        m.update(layers=cfg["num_hidden_layers"], H=cfg["num_heads"], P=cfg["head_dim"],
                 N=cfg["state_size"], G=cfg["n_groups"], eps=cfg.get("layer_norm_epsilon", 1e-5),
                 norm_before_gate=False, tie=cfg.get("tie_word_embeddings", False),
                 limit=tuple(cfg.get("time_step_limit", (0.0, math.inf))), emb="backbone.embeddings.weight")
    else:
        ssm = cfg["ssm_cfg"]
        D = cfg["d_model"]
        inner = int(ssm.get("expand", 2) * D)
        m.update(layers=cfg["n_layer"], H=inner // ssm.get("headdim", 64), P=ssm.get("headdim", 64),
                 N=ssm.get("d_state", 128), G=ssm.get("ngroups", 1), eps=1e-5,
                 norm_before_gate=ssm.get("norm_before_gate", False),
                 tie=cfg.get("tie_embeddings", True), limit=tuple(ssm.get("dt_limit", (0.0, math.inf))),
                 emb="backbone.embedding.weight")
    m["D"] = D
    m["t"] = t
    m["head"] = t[m["emb"]] if m["tie"] else t["lm_head.weight"]
    return m


# --------------------------------------------------------------------------------------------
# The model

def attention(m, a, h):
    """Granite's softmax attention: scores times attention_multiplier, grouped kv heads, rotary
    only with position_embedding_type rope, causal."""
    t, T = m["t"], h.shape[0]
    Hq, Hkv = m["heads"], m["kv_heads"]
    d = h.shape[1] // Hq
    q = dense(t, a + "q_proj", h).reshape(T, Hq, d)
    k, v = dense(t, a + "k_proj", h).reshape(T, Hkv, d), dense(t, a + "v_proj", h).reshape(T, Hkv, d)
    if m["rope"]:
        q, k = rotate(q, m["rope_theta"]), rotate(k, m["rope_theta"])
    return dense(t, a + "o_proj", causal_attention(q, k, v, m["attention_multiplier"]))


def forward(m, ids, scan=scan_recurrent, norm_groups=None):
    """Logits (T, V), in the dtype of the model's tensors (float64)."""
    t = m["t"]
    if m.get("granite"):
        x = t["model.embed_tokens.weight"][torch.tensor(ids)] * m["embedding_multiplier"]
        r = m["residual_multiplier"]
        for i, kind in enumerate(m["layer_types"]):
            p = f"model.layers.{i}."
            h = rms_norm(x, t[p + "input_layernorm.weight"], m["eps"])
            out = attention(m, p + "self_attn.", h) if kind == "attention" else \
                mixer(m, p + "mamba.", h, scan, norm_groups)
            x = x + out * r
            h = rms_norm(x, t[p + "post_attention_layernorm.weight"], m["eps"])
            g, u = (h @ t[p + "shared_mlp.input_linear.weight"].T).chunk(2, dim=-1)
            x = x + ((g * torch.sigmoid(g)) * u) @ t[p + "shared_mlp.output_linear.weight"].T * r
        return rms_norm(x, t["model.norm.weight"], m["eps"]) @ m["head"].T / m["logits_scaling"]
    x = t[m["emb"]][torch.tensor(ids)]
    for i in range(m["layers"]):
        p = f"backbone.layers.{i}."
        x = x + mixer(m, p + "mixer.", rms_norm(x, t[p + "norm.weight"], m["eps"]), scan, norm_groups)
    return rms_norm(x, t["backbone.norm_f.weight"], m["eps"]) @ m["head"].T


def figures(model_dir, ids):
    return ssd_figures(load(model_dir), forward, ids)


# --------------------------------------------------------------------------------------------

def self_test():
    r = Draw(7)
    T, H, P, N = 37, 4, 3, 5
    x, B, C = r.randn(T, H, P).to(F64), r.randn(T, H, N).to(F64), r.randn(T, H, N).to(F64)
    dt = torch.exp(r.rand(T, H, lo=-6.0, hi=0.0)).to(F64)
    A = -r.rand(H, lo=1.0, hi=16.0).to(F64)
    Dskip = r.randn(H).to(F64)
    y1, s1 = scan_recurrent(x, dt, A, B, C, Dskip)
    for block in (1, 4, 8, 64):
        y2, s2 = scan_chunked(x, dt, A, B, C, Dskip, block)
        assert torch.allclose(y1, y2, rtol=1e-12, atol=1e-12), f"scans differ at block {block}"
        assert torch.allclose(s1, s2, rtol=1e-12, atol=1e-12), f"final states differ at block {block}"
    # The readings of the gated norm differ once there are several groups (and agree with one).
    y, z, w = r.randn(3, 8).to(F64), r.randn(3, 8).to(F64), r.randn(8).to(F64)
    a, b = gated_norm(y, z, w, 2, 1e-5, False), gated_norm(y, z, w, 1, 1e-5, False)
    assert (a - b).abs().max() > 1e-3, "per-group and whole-width norms should differ"
    c = gated_norm(y[:, :4], z[:, :4], w[:4], 1, 1e-5, False)
    assert torch.allclose(a[:, :4], c), "a group's norm is the whole norm of that group"
    # A test that can fail: a scan with a wrong decay disagrees.
    y3, _ = scan_chunked(x, dt * 1.001, A, B, C, Dskip)
    assert (y1 - y3).abs().max() > 1e-6
    print("reference.py self-test: the token-by-token scan and the chunked SSD form agree within "
          "1e-12 at blocks 1, 4, 8, 64; the per-group gated norm differs from the whole-width one")


if __name__ == "__main__":
    reference_main(sys.argv[1:], sys.modules[__name__])
