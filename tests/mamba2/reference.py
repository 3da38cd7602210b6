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
import tempfile

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
from pyref import dumps, parse_ids, read_safetensors, write_safetensors  # noqa: E402

F64 = torch.float64
DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16}

DEFAULTS = dict(layout="transformers", hidden=64, vocab=300, layers=2, head_dim=16, state=16,
                groups=1, expand=2, conv=4, use_bias=False, conv_bias=True, dt_limit=None,
                norm_before_gate=False, tie=False, eps=1e-5, dtype="f32", seed=0, extra={},
                logit_std=3.0, pad_multiple=16, gain=1.0)


# --------------------------------------------------------------------------------------------
# Random checkpoints

class Draw:
    def __init__(self, seed):
        self.g = torch.Generator().manual_seed(seed)

    def randn(self, *shape, std=1.0, mean=0.0):
        return torch.randn(*shape, generator=self.g, dtype=torch.float32) * std + mean

    def rand(self, *shape, lo=0.0, hi=1.0):
        return torch.rand(*shape, generator=self.g, dtype=torch.float32) * (hi - lo) + lo


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
            t[m + "conv1d.weight"] = r.randn(conv_dim, 1, s["conv"], std=s["conv"] ** -0.5)
            if s["conv_bias"]:
                t[m + "conv1d.bias"] = r.randn(conv_dim, std=0.1)
            dt = torch.exp(r.rand(H, lo=math.log(1e-3), hi=math.log(0.1)))
            t[m + "dt_bias"] = dt + torch.log(-torch.expm1(-dt))
            t[m + "A_log"] = r.rand(H, lo=0.0, hi=math.log(16.0))
            t[m + "D"] = r.randn(H, std=0.1, mean=1.0)
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
    os.makedirs(out_dir, exist_ok=True)
    write_safetensors(os.path.join(out_dir, "model.safetensors"), t, {"format": "pt"})
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")


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
        t[m + "conv1d.weight"] = r.randn(conv_dim, 1, s["conv"], std=s["conv"] ** -0.5)
        if s["conv_bias"]:
            t[m + "conv1d.bias"] = r.randn(conv_dim, std=0.1)
        # dt = softplus(dt_bias) log-uniform in (0.001, 0.1), A in (1, 16): mamba_ssm's init.
        dt = torch.exp(r.rand(H, lo=math.log(1e-3), hi=math.log(0.1)))
        t[m + "dt_bias"] = dt + torch.log(-torch.expm1(-dt))
        t[m + "A_log"] = r.rand(H, lo=0.0, hi=math.log(16.0))
        t[m + "D"] = r.randn(H, std=0.1, mean=1.0)
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
    os.makedirs(out_dir, exist_ok=True)
    write_safetensors(os.path.join(out_dir, "model.safetensors"), t, {"format": "pt"})
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        # Python's json, as transformers writes it: an infinite limit is a bare Infinity.
        json.dump(config_of(s), f, indent=2)
        f.write("\n")


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

def rms(x, w, eps):
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * w


def gated_norm(y, z, w, groups, eps, before_gate):
    """mamba_ssm's rms_norm_ref with group_size = width / groups: y * silu(z) normed per group
    (or y normed, then times silu(z)). groups = 1 is transformers' MambaRMSNormGated."""
    silu_z = z * torch.sigmoid(z)
    if not before_gate:
        y = y * silu_z
    T, W = y.shape
    yg = y.reshape(T, groups, W // groups)
    out = (yg * torch.rsqrt((yg * yg).mean(-1, keepdim=True) + eps)).reshape(T, W) * w
    return out * silu_z if before_gate else out


def scan_recurrent(x, dt, A, B, C, Dskip):
    """Token by token, as transformers' cached step (and mamba_ssm's selective_state_update):
    S = S exp(dt A) + (dt x) B^T, y = S C + D x. x (T, H, P), dt (T, H), B, C (T, H, N)."""
    T, H, P = x.shape
    N = B.shape[-1]
    S = torch.zeros(H, P, N, dtype=x.dtype)
    ys = []
    for t in range(T):
        dA = torch.exp(dt[t] * A)                                   # (H)
        dBx = (dt[t][:, None] * x[t])[:, :, None] * B[t][:, None, :]  # (H, P, N)
        S = S * dA[:, None, None] + dBx
        ys.append(torch.einsum("hpn,hn->hp", S, C[t]) + Dskip[:, None] * x[t])
    return torch.stack(ys), S


def segsum(a):
    """(..., L) -> (..., L, L): sum of a over (j, i] below the diagonal, -inf above."""
    L = a.shape[-1]
    c = torch.cumsum(a, -1)
    s = c[..., :, None] - c[..., None, :]
    mask = torch.tril(torch.ones(L, L, dtype=torch.bool))
    return s.masked_fill(~mask, -math.inf)


def scan_chunked(x, dt, A, B, C, Dskip, block=8):
    """The paper's SSD minimal form (chunks of `block`: the intra-chunk quadratic part, the
    states passed between chunks): the second source, summing in another order."""
    T, H, P = x.shape
    pad = (-T) % block
    if pad:  # dt = 0 and x = 0 after the end: no decay, nothing added
        z = lambda t: torch.cat([t, torch.zeros((pad,) + t.shape[1:], dtype=t.dtype)])
        x, dt, B, C = z(x), z(dt), z(B), z(C)
    n = x.shape[0] // block
    X = (x * dt[..., None]).reshape(n, block, H, P)
    Ad = (dt * A).reshape(n, block, H).permute(2, 0, 1)          # (H, n, L)
    Bc, Cc = B.reshape(n, block, H, -1), C.reshape(n, block, H, -1)
    Acum = torch.cumsum(Ad, -1)
    Ldec = torch.exp(segsum(Ad))                                 # (H, n, L, L)
    Y_diag = torch.einsum("clhn,cshn,hcls,cshp->clhp", Cc, Bc, Ldec, X)
    decay_states = torch.exp(Acum[..., -1:] - Acum)              # (H, n, L)
    states = torch.einsum("clhn,hcl,clhp->chpn", Bc, decay_states, X)
    states = torch.cat([torch.zeros_like(states[:1]), states])
    chunk_decay = torch.exp(segsum(torch.nn.functional.pad(Acum[..., -1], (1, 0))))  # (H, n+1, n+1)
    new_states = torch.einsum("hzc,chpn->zhpn", chunk_decay, states)
    states, final = new_states[:-1], new_states[-1]
    Y_off = torch.einsum("clhn,chpn,hcl->clhp", Cc, states, torch.exp(Acum))
    y = (Y_diag + Y_off).reshape(n * block, H, P)[:T]
    return y + Dskip[None, :, None] * x[:T], final


def ssd(t, q, xBC, dt_raw, H, P, N, G, limit, scan):
    """The middle of a Mamba-2 mixer (tensors under the prefix q): the causal convolution of
    xBC and its silu, dt, the scan and the D skip; y (T, H P). Falcon-H1's reference uses it too."""
    T = xBC.shape[0]
    inner = H * P
    w = t[q + "conv1d.weight"][:, 0, :]                       # (C, K)
    K = w.shape[1]
    padded = torch.cat([torch.zeros(K - 1, xBC.shape[1], dtype=xBC.dtype), xBC])
    conv = sum(padded[k:k + T] * w[:, k] for k in range(K))
    if q + "conv1d.bias" in t:
        conv = conv + t[q + "conv1d.bias"]
    conv = conv * torch.sigmoid(conv)
    xs = conv[:, :inner].reshape(T, H, P)
    B = conv[:, inner:inner + G * N].reshape(T, G, N).repeat_interleave(H // G, dim=1)
    C = conv[:, inner + G * N:].reshape(T, G, N).repeat_interleave(H // G, dim=1)
    dt = torch.nn.functional.softplus(dt_raw + t[q + "dt_bias"])
    dt = torch.clamp(dt, limit[0], limit[1])
    A = -torch.exp(t[q + "A_log"])
    y, _ = scan(xs, dt, A, B, C, t[q + "D"])
    return y.reshape(T, inner)


def mixer(m, q, h, scan=scan_recurrent, norm_groups=None):
    """One Mamba-2 mixer (tensors under the prefix q) over the normed rows h (T, D)."""
    t, H, P, N, G = m["t"], m["H"], m["P"], m["N"], m["G"]
    inner = H * P
    proj = h @ t[q + "in_proj.weight"].T
    if q + "in_proj.bias" in t:
        proj = proj + t[q + "in_proj.bias"]
    z, xBC, dt_raw = proj[:, :inner], proj[:, inner:-H], proj[:, -H:]
    y = ssd(t, q, xBC, dt_raw, H, P, N, G, m["limit"], scan)
    y = gated_norm(y, z, t[q + "norm.weight"],
                   G if norm_groups is None else norm_groups, m["eps"], m["norm_before_gate"])
    out = y @ t[q + "out_proj.weight"].T
    if q + "out_proj.bias" in t:
        out = out + t[q + "out_proj.bias"]
    return out


def rotate(x, theta):
    """GPT-NeoX's rotary over the whole head: x (T, heads, d), position = row."""
    T, _, d = x.shape
    inv = 1.0 / theta ** (torch.arange(0, d // 2, dtype=F64) * 2.0 / d)
    ang = torch.arange(T, dtype=F64)[:, None] * inv[None, :]
    cos, sin = torch.cos(ang).to(x.dtype)[:, None, :], torch.sin(ang).to(x.dtype)[:, None, :]
    x1, x2 = x[..., :d // 2], x[..., d // 2:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)


def attention(m, a, h):
    """Granite's softmax attention: scores times attention_multiplier, grouped kv heads, rotary
    only with position_embedding_type rope, causal."""
    t, T = m["t"], h.shape[0]
    Hq, Hkv = m["heads"], m["kv_heads"]
    d = h.shape[1] // Hq
    lin = lambda n: h @ t[a + n + ".weight"].T + (t[a + n + ".bias"] if a + n + ".bias" in t else 0)
    q, k, v = lin("q_proj").reshape(T, Hq, d), lin("k_proj").reshape(T, Hkv, d), lin("v_proj").reshape(T, Hkv, d)
    if m["rope"]:
        q, k = rotate(q, m["rope_theta"]), rotate(k, m["rope_theta"])
    k, v = k.repeat_interleave(Hq // Hkv, dim=1), v.repeat_interleave(Hq // Hkv, dim=1)
    s = torch.einsum("thd,shd->hts", q, k) * m["attention_multiplier"]
    s = s.masked_fill(~torch.tril(torch.ones(T, T, dtype=torch.bool)), -math.inf)
    o = torch.einsum("hts,shd->thd", torch.softmax(s, -1), v).reshape(T, Hq * d)
    out = o @ t[a + "o_proj.weight"].T
    return out + t[a + "o_proj.bias"] if a + "o_proj.bias" in t else out


def forward(m, ids, scan=scan_recurrent, norm_groups=None):
    """Logits (T, V), in the dtype of the model's tensors (float64)."""
    t = m["t"]
    if m.get("granite"):
        x = t["model.embed_tokens.weight"][torch.tensor(ids)] * m["embedding_multiplier"]
        r = m["residual_multiplier"]
        for i, kind in enumerate(m["layer_types"]):
            p = f"model.layers.{i}."
            h = rms(x, t[p + "input_layernorm.weight"], m["eps"])
            out = attention(m, p + "self_attn.", h) if kind == "attention" else \
                mixer(m, p + "mamba.", h, scan, norm_groups)
            x = x + out * r
            h = rms(x, t[p + "post_attention_layernorm.weight"], m["eps"])
            g, u = (h @ t[p + "shared_mlp.input_linear.weight"].T).chunk(2, dim=-1)
            x = x + ((g * torch.sigmoid(g)) * u) @ t[p + "shared_mlp.output_linear.weight"].T * r
        return rms(x, t["model.norm.weight"], m["eps"]) @ m["head"].T / m["logits_scaling"]
    x = t[m["emb"]][torch.tensor(ids)]
    for i in range(m["layers"]):
        p = f"backbone.layers.{i}."
        x = x + mixer(m, p + "mixer.", rms(x, t[p + "norm.weight"], m["eps"]), scan, norm_groups)
    return rms(x, t["backbone.norm_f.weight"], m["eps"]) @ m["head"].T


def mean_nll(logits, ids):
    lp = torch.log_softmax(logits[:-1], -1)
    return float(-lp[torch.arange(len(ids) - 1), torch.tensor(ids[1:])].mean())


def greedy(m, ids, n):
    out = []
    seq = list(ids)
    for _ in range(n):
        nxt = int(torch.argmax(forward(m, seq)[-1]))
        out.append(nxt)
        seq.append(nxt)
    return out


# Positions and ids whose logits expected.json keeps (recur's test compares every one).
PROBE_IDS = [0, 10, 32, 65, 101, 116, 200, 299]


def in_float32(m):
    """The same model computed in float32 (torch's own kernels): how far float32's rounding
    alone takes the logits from float64."""
    out = dict(m)
    out["t"] = {k: v.float() for k, v in m["t"].items()}
    out["head"] = m["head"].float()
    return out


def normwise(got, want, probe):
    """max over positions of max_j |got - want| over the probe ids / max |want| of the position."""
    d = (got[:, probe] - want[:, probe]).abs().max(-1).values
    return float((d / want.abs().max(-1).values).max())


def figures(model_dir, ids):
    m = load(model_dir)
    logits = forward(m, ids)
    chunked = forward(m, ids, scan=scan_chunked)
    agree = float(((logits - chunked).abs().max() / logits.abs().max()))
    f32 = forward(in_float32(m), ids).double()
    return {
        "mean_nll": mean_nll(logits, ids),
        "greedy_ids": greedy(m, ids, 8),
        "probe_ids": PROBE_IDS,
        "probe_logits": [[float(logits[t, i]) for i in PROBE_IDS] for t in range(len(ids))],
        "logit_max_abs": [float(logits[t].abs().max()) for t in range(len(ids))],
        "chunked_scan_max_relative_difference": agree,
        "float32_reference_normwise_error": normwise(f32, logits, PROBE_IDS),
    }


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


def check_expected(path, here=HERE, make_fn=None, figures_fn=None):
    """Regenerates every fixture of `path` (expected.json in the folder `here`, beside its
    make_fixtures.py) and compares the files' bytes and the figures. tests/falcon_h1 passes its
    own folder, make and figures."""
    sys.path.insert(0, here)
    import make_fixtures  # noqa: E402
    make_fn, figures_fn = make_fn or make, figures_fn or figures
    with open(path) as f:
        want = json.load(f)
    ids = parse_ids(open(os.path.join(HERE, "prompt_ids.txt")).read())
    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name, entry in want["fixtures"].items():
            d = os.path.join(tmp, name)
            make_fn(d, make_fixtures.SPECS[name])
            for f in ("config.json", "model.safetensors"):
                if open(os.path.join(d, f), "rb").read() != open(os.path.join(here, name, f), "rb").read():
                    print(f"{name}/{f}: regenerated bytes differ from the committed ones")
                    bad += 1
            got = figures_fn(d, ids)
            for key in ("mean_nll", "greedy_ids", "probe_logits"):
                if got[key] != entry[key]:
                    print(f"{name}: {key} differs")
                    bad += 1
    if bad:
        sys.exit(1)
    print(f"reference.py: {len(want['fixtures'])} fixtures regenerate byte for byte with their figures")


def main(argv):
    if argv[:1] == ["--self-test"]:
        return self_test()
    if argv[:1] == ["--check-expected"]:
        return check_expected(argv[1])
    if argv[:1] == ["make"]:
        return make(argv[1], json.loads(argv[2]))
    if argv[:1] == ["score"]:
        ids = parse_ids(open(argv[2]).read())
        m = load(argv[1])
        logits = forward(m, ids)
        print(dumps({"mean_nll": mean_nll(logits, ids), "greedy_ids": greedy(m, ids, 8)}))
        return None
    print(__doc__)
    sys.exit(2)


if __name__ == "__main__":
    main(sys.argv[1:])
