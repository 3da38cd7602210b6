#!/usr/bin/env python3
"""Float64 reference of Gated DeltaNet language models: Qwen3.5's text model (Hugging Face
layout, hybrid with gated softmax attention) and flash-linear-attention's gated_deltanet and
delta_net (with fla's optional softmax `attn` layers).

Our own code, written from the published sources (transformers' qwen3_5 modelling code, fla's
layers and naive kernels; see README.md, "Formulas"). Neither transformers nor fla is imported.
It is an oracle, not fast: the delta rule runs token by token in torch.float64, the attention
layers over a key/value cache.

  /usr/bin/python3 tests/gdn/reference.py MODEL_DIR --tokens-file ids.txt [--greedy 16] [--logits-out F]
  /usr/bin/python3 tests/gdn/reference.py --self-test
  /usr/bin/python3 tests/gdn/reference.py --check-expected tests/gdn/expected.json

Output (JSON on stdout): mean_nll over the n-1 predictions of ids[1:] from ids[:-1] (log-softmax
over all vocab logits), the last position's top ids and logits, and --greedy N ids continued
from the state after the prompt.
"""

import argparse
import json
import math
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
from pyref import linear, parse_ids, read_safetensors, silu, write_logits  # noqa: E402

DT = torch.float64

# --------------------------------------------------------------------------------------------
# Pieces (float64; sequences are [T, ...])


def rms(x, eps):
    return x * torch.rsqrt((x * x).mean(dim=-1, keepdim=True) + eps)


def l2norm(x, eps=1e-6):
    """fla's and transformers' l2norm: x / sqrt(sum x^2 + eps) (eps inside the root)."""
    return x / torch.sqrt((x * x).sum(dim=-1, keepdim=True) + eps)


def sum_norm(x):
    return x / x.sum(dim=-1, keepdim=True)


def softplus(x):
    """log(1 + e^x) without torch's threshold (fla and torch return x above 20)."""
    return torch.where(x > 0, x + torch.log1p(torch.exp(-x)), torch.log1p(torch.exp(x)))


def conv_step(u, buf, w):
    """Depthwise causal conv continuing from buf. u [T, C], buf [K-1, C] (the previous inputs,
    oldest first), w [C, K] (tap K-1 is the current token). Returns (out [T, C], new buf)."""
    K = w.shape[1]
    full = torch.cat([buf, u], dim=0)
    T = u.shape[0]
    out = torch.zeros_like(u)
    for j in range(K):
        out = out + full[j:j + T] * w[:, j]
    return out, full[full.shape[0] - (K - 1):].clone()


def rope_half(x, theta, positions, rot):
    """Rotary on the first `rot` channels of x [T, H, d]: the pairs (j, j + rot/2) turned by
    pos * theta^(-2j/rot) (transformers' rotate_half; fla's non-interleaved rotary when rot = d)."""
    half = rot // 2
    inv = 1.0 / (float(theta) ** (torch.arange(0, rot, 2, dtype=DT) / rot))
    ang = torch.outer(positions.to(DT), inv)
    cos, sin = torch.cos(ang)[:, None, :], torch.sin(ang)[:, None, :]
    x1, x2 = x[..., :half], x[..., half:rot]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin, x[..., rot:]], dim=-1)


def delta_rule(q, k, v, g, beta, S):
    """The gated delta rule token by token, per value head h:
         S <- exp(g_t) S;  u = beta_t (v_t - S^T k_t);  S <- S + k_t u^T;  o_t = S^T q_t
    q, k [T, H, dk] (already normalised, q scaled, expanded to the value heads), v [T, H, dv],
    g, beta [T, H], S [H, dk, dv]. Returns (o [T, H, dv], S)."""
    T = q.shape[0]
    out = torch.zeros(T, v.shape[1], v.shape[2], dtype=DT)
    for t in range(T):
        S = S * torch.exp(g[t])[:, None, None]
        pred = torch.einsum("hk,hkv->hv", k[t], S)
        u = beta[t][:, None] * (v[t] - pred)
        S = S + k[t][:, :, None] * u[:, None, :]
        out[t] = torch.einsum("hk,hkv->hv", q[t], S)
    return out, S


def delta_rule_chunked(q, k, v, g, beta, S, chunk):
    """The same rule in chunks (used by the self-test only). Within a chunk, with
    c_i = g_1 + ... + g_i and D_ij = exp(c_i - c_j):
        (I + A) U = diag(beta) (V - diag(e^c) K S0),  A_ij = beta_i D_ij k_i.k_j for j < i
        o_i = e^(c_i) S0^T q_i + sum_{j<=i} D_ij (q_i.k_j) u_j
        S  = e^(c_n) S0 + sum_j e^(c_n - c_j) k_j u_j^T
    derived from S_i = e^(c_i) S0 + sum_{j<=i} D_ij k_j u_j^T."""
    T, H, dk = q.shape
    out = torch.zeros(T, H, v.shape[2], dtype=DT)
    for s in range(0, T, chunk):
        e = min(T, s + chunk)
        n = e - s
        qc, kc, vc = q[s:e].transpose(0, 1), k[s:e].transpose(0, 1), v[s:e].transpose(0, 1)  # [H, n, .]
        c = torch.cumsum(g[s:e].T, dim=1)  # [H, n]
        bc = beta[s:e].T
        Dm = torch.exp(c[:, :, None] - c[:, None, :]) * torch.tril(torch.ones(n, n, dtype=DT))
        strict = torch.tril(torch.ones(n, n, dtype=DT), diagonal=-1)
        A = bc[:, :, None] * Dm * (kc @ kc.transpose(1, 2)) * strict
        rhs = bc[:, :, None] * (vc - torch.exp(c)[:, :, None] * (kc @ S))
        U = torch.linalg.solve_triangular(torch.eye(n, dtype=DT) + A, rhs, upper=False, unitriangular=True)
        o = torch.exp(c)[:, :, None] * (qc @ S) + (Dm * (qc @ kc.transpose(1, 2))) @ U
        out[s:e] = o.transpose(0, 1)
        S = torch.exp(c[:, -1])[:, None, None] * S + \
            (kc * torch.exp(c[:, -1:] - c)[:, :, None]).transpose(1, 2) @ U
    return out, S


def attend(q, K, V, first_pos, window=None):
    """Causal softmax attention of q [T, H, d] (positions first_pos..) over the cache K, V
    [first_pos + T, H, d] (kv heads already mapped), scores scaled by d^-1/2."""
    T, H, d = q.shape
    s = torch.einsum("ihd,jhd->hij", q, K) * d ** -0.5
    i = torch.arange(T)[:, None] + first_pos
    j = torch.arange(K.shape[0])[None, :]
    visible = j <= i
    if window is not None:
        visible = visible & (j > i - window)
    s = s.masked_fill(~visible, -math.inf)
    return torch.einsum("hij,jhd->ihd", torch.softmax(s, dim=-1), V)


def mlp_width(D, hidden_ratio, intermediate_size):
    """fla's GatedMLP: intermediate_size, else int(D * ratio * 2/3) rounded up to 256."""
    if intermediate_size is not None:
        return int(intermediate_size)
    width = int(D * (4 if hidden_ratio is None else hidden_ratio) * 2 / 3)
    return 256 * ((width + 255) // 256)


# --------------------------------------------------------------------------------------------
# Loading

def load_weights(model_dir):
    """model.safetensors, or the shards model.safetensors.index.json names."""
    single = os.path.join(model_dir, "model.safetensors")
    index = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.exists(single):
        return read_safetensors(single), single
    if os.path.exists(index):
        with open(index) as f:
            shards = sorted(set(json.load(f)["weight_map"].values()))
        sd = {}
        for s in shards:
            sd.update(read_safetensors(os.path.join(model_dir, s)))
        return sd, index
    raise FileNotFoundError(f"no model.safetensors or model.safetensors.index.json in {model_dir}")


class Tensors:
    """Takes tensors by name with their expected shapes; remembers which were used."""

    def __init__(self, sd, skip_prefixes=()):
        self.w = {k: v.to(DT) for k, v in sd.items()}
        self.dtypes = sorted({str(v.dtype).replace("torch.", "") for v in sd.values()})
        self.used = set()
        self.skip_prefixes = tuple(skip_prefixes)

    def __call__(self, name, shape, optional=False):
        if name not in self.w:
            if optional:
                return None
            raise ValueError(f"missing tensor {name} (expected shape {tuple(shape)})")
        x = self.w[name]
        if tuple(x.shape) != tuple(shape):
            raise ValueError(f"{name} has shape {tuple(x.shape)}, expected {tuple(shape)}")
        self.used.add(name)
        return x

    def has(self, name):
        return name in self.w

    def finish(self):
        skipped = sorted(n for n in self.w if n not in self.used and n.startswith(self.skip_prefixes))
        unknown = sorted(n for n in self.w if n not in self.used and not n.startswith(self.skip_prefixes))
        if unknown:
            raise ValueError(f"tensors this configuration does not use: {unknown}")
        return skipped


def tied_copy(t, name, m, tie):
    """A tied checkpoint may still carry the head; accepted only when it equals the embedding."""
    if tie and t.has(name):
        if not torch.equal(t(name, tuple(m.embed.shape)), m.embed):
            raise ValueError(f"tie_word_embeddings is true but {name} differs from the embedding")


# --------------------------------------------------------------------------------------------
# Qwen3.5 (transformers' qwen3_5: Qwen3_5ForConditionalGeneration / Qwen3_5ForCausalLM)

QWEN_SKIP = ("model.visual.", "mtp.", "model.mtp.")


def qwen_text_config(config):
    """(text config, tensor prefix, tie) from a qwen3_5 (multimodal) or qwen3_5_text config."""
    mt = config.get("model_type")
    if mt == "qwen3_5":
        text = config.get("text_config")
        if not isinstance(text, dict):
            raise ValueError("qwen3_5: config.json has no text_config")
        if text.get("model_type", "qwen3_5_text") != "qwen3_5_text":
            raise ValueError(f"qwen3_5: text_config.model_type {text.get('model_type')!r} is not qwen3_5_text")
        prefix = "model.language_model."
        tie_text, tie_top = text.get("tie_word_embeddings"), config.get("tie_word_embeddings")
        if tie_text is not None and tie_top is not None and bool(tie_text) != bool(tie_top):
            raise ValueError(f"qwen3_5: tie_word_embeddings {tie_top} at the top, {tie_text} in text_config")
        tie = bool(tie_text if tie_text is not None else (tie_top or False))
    elif mt == "qwen3_5_text":
        text, prefix = config, "model."
        tie = bool(config.get("tie_word_embeddings", False))
    else:
        raise ValueError(f"model_type {mt!r} is not qwen3_5 or qwen3_5_text")
    return text, prefix, tie


def qwen_rope(text):
    """(theta, partial_rotary_factor, notes). rope_parameters (transformers >= 5) or the older
    top-level rope_theta / partial_rotary_factor / rope_scaling. Text-only positions are the same
    for t, h and w, so interleaved mrope (any mrope_section) is plain rope: each frequency takes
    its angle from one of three equal position rows."""
    rp = text.get("rope_parameters") or text.get("rope_scaling") or {}
    rtype = rp.get("rope_type", rp.get("type", "default"))
    if rtype not in ("default", "mrope"):
        raise ValueError(f"qwen3_5: rope_type {rtype!r} is not supported (only default)")
    theta = float(rp.get("rope_theta", text.get("rope_theta", 10000.0)))
    prf = float(rp.get("partial_rotary_factor", text.get("partial_rotary_factor", 0.25)))
    return theta, prf


class QwenBuilder:
    def __init__(self, config, sd):
        text, prefix, tie = qwen_text_config(config)
        self.c = text
        if text.get("hidden_act", "silu") != "silu":
            raise ValueError("qwen3_5: hidden_act must be silu")
        if text.get("attention_bias", False):
            raise ValueError("qwen3_5: attention_bias true is not supported")
        if not text.get("attn_output_gate", True):
            raise ValueError("qwen3_5: attn_output_gate false is not Qwen3.5's attention")
        D, L, V = int(text["hidden_size"]), int(text["num_hidden_layers"]), int(text["vocab_size"])
        types = text.get("layer_types")
        if types is None:
            n = int(text.get("full_attention_interval", 4))
            types = ["linear_attention" if (i + 1) % n else "full_attention" for i in range(L)]
        if len(types) != L or any(t not in ("linear_attention", "full_attention") for t in types):
            raise ValueError(f"qwen3_5: layer_types {types} do not give {L} linear/full layers")
        eps = float(text.get("rms_norm_eps", 1e-6))
        t = Tensors(sd, QWEN_SKIP)
        m = Model("qwen3_5", D, V, eps, zero_centred=True)
        m.embed = t(prefix + "embed_tokens.weight", (V, D))
        m.final_norm = t(prefix + "norm.weight", (D,))
        m.head = m.embed if tie else t("lm_head.weight", (V, D))
        m.tied = tie
        tied_copy(t, "lm_head.weight", m, tie)
        I = int(text["intermediate_size"])
        H, KV = int(text["num_attention_heads"]), int(text["num_key_value_heads"])
        hd = int(text.get("head_dim") or D // H)
        theta, prf = qwen_rope(text)
        rot = int(hd * prf)
        Hk, Hv = int(text["linear_num_key_heads"]), int(text["linear_num_value_heads"])
        dk, dv = int(text["linear_key_head_dim"]), int(text["linear_value_head_dim"])
        K = int(text.get("linear_conv_kernel_dim", 4))
        if Hv % Hk:
            raise ValueError(f"qwen3_5: linear_num_value_heads {Hv} is not a multiple of linear_num_key_heads {Hk}")
        if H % KV:
            raise ValueError(f"qwen3_5: num_attention_heads {H} is not a multiple of num_key_value_heads {KV}")
        for i, kind in enumerate(types):
            p = f"{prefix}layers.{i}."
            lay = {"in_norm": t(p + "input_layernorm.weight", (D,)),
                   "mlp_norm": t(p + "post_attention_layernorm.weight", (D,)),
                   "gate": t(p + "mlp.gate_proj.weight", (I, D)),
                   "up": t(p + "mlp.up_proj.weight", (I, D)),
                   "down": t(p + "mlp.down_proj.weight", (D, I))}
            if kind == "full_attention":
                a = p + "self_attn."
                lay.update(kind="qwen_attn", H=H, KV=KV, hd=hd, rot=rot, theta=theta, eps=eps,
                           q=t(a + "q_proj.weight", (2 * H * hd, D)), k=t(a + "k_proj.weight", (KV * hd, D)),
                           v=t(a + "v_proj.weight", (KV * hd, D)), o=t(a + "o_proj.weight", (D, H * hd)),
                           q_norm=t(a + "q_norm.weight", (hd,)), k_norm=t(a + "k_norm.weight", (hd,)))
            else:
                a = p + "linear_attn."
                kd, vd = Hk * dk, Hv * dv
                qkv = t(a + "in_proj_qkv.weight", (2 * kd + vd, D))
                conv = t(a + "conv1d.weight", (2 * kd + vd, 1, K))[:, 0, :]
                # One conv over the concatenated q, k, v channels is the same as one per part:
                # the convolution is depthwise.
                lay.update(kind="delta", Hk=Hk, Hv=Hv, dk=dk, dv=dv, K=K, decay=True, act="silu",
                           qk_norm="l2", eps=eps, neg_eigval=False,
                           wq=qkv[:kd], wk=qkv[kd:2 * kd], wv=qkv[2 * kd:],
                           conv=conv, z=t(a + "in_proj_z.weight", (vd, D)),
                           b=t(a + "in_proj_b.weight", (Hv, D)), a=t(a + "in_proj_a.weight", (Hv, D)),
                           A_log=t(a + "A_log", (Hv,)), dt_bias=t(a + "dt_bias", (Hv,)),
                           onorm=t(a + "norm.weight", (dv,)), o=t(a + "out_proj.weight", (D, vd)))
            m.layers.append(lay)
        m.skipped = t.finish()
        m.dtypes = t.dtypes
        m.rules = {"norms": "(1 + w) for input/post_attention/final/q_norm/k_norm, w for the gated norm",
                   "eps": eps, "rope_theta": theta, "rotary_dims": rot, "tied": tie,
                   "kv_heads_map": "value head h reads key head h // (Hv / Hk)"}
        self.model = m


# --------------------------------------------------------------------------------------------
# fla's gated_deltanet and delta_net

FLA_DEFAULTS = {
    "gated_deltanet": dict(hidden_size=2048, expand_v=2.0, use_gate=True, use_short_conv=True,
                           allow_neg_eigval=False, conv_size=4, head_dim=256, num_heads=6,
                           num_v_heads=None, hidden_ratio=4, intermediate_size=None,
                           hidden_act="swish", num_hidden_layers=21, norm_eps=1e-6, attn=None,
                           tie_word_embeddings=False, vocab_size=32000, attnres_block_size=None),
    "delta_net": dict(hidden_size=2048, expand_k=1.0, expand_v=1.0, use_gate=False,
                      use_short_conv=True, allow_neg_eigval=False, conv_size=4, use_beta=True,
                      num_heads=16, qk_norm="l2", qk_activation="silu", hidden_ratio=4,
                      intermediate_size=None, hidden_act="swish", num_hidden_layers=24,
                      norm_eps=1e-6, attn=None, tie_word_embeddings=False, vocab_size=32000,
                      attnres_block_size=None),
}


def attn_specs(attn, n_layers):
    """fla's `attn` block (a dict or a list of dicts) -> {layer: spec}."""
    if attn is None:
        return {}
    out = {}
    for s in ([attn] if isinstance(attn, dict) else list(attn)):
        for key in ("layers", "num_heads"):
            if key not in s:
                raise ValueError(f"attn: {key!r} is required")
        spec = {"num_heads": int(s["num_heads"]),
                "num_kv_heads": int(s.get("num_kv_heads") or s["num_heads"]),
                "qkv_bias": bool(s.get("qkv_bias", False)),
                "window_size": None if s.get("window_size") is None else int(s["window_size"]),
                "rope_theta": float(s.get("rope_theta", 10000.0))}
        for i in s["layers"]:
            if not 0 <= i < n_layers or i in out:
                raise ValueError(f"attn: layer {i} out of range or given twice")
            out[int(i)] = spec
    return out


class FlaBuilder:
    def __init__(self, config, sd):
        mt = config.get("model_type")
        c = dict(FLA_DEFAULTS[mt])
        c.update({k: v for k, v in config.items() if k in c})
        if c["attnres_block_size"] is not None:
            raise ValueError("attnres_block_size is not supported")
        if c["hidden_act"] != "swish":
            raise ValueError("fla's MLP takes hidden_act swish only")
        D, L, V = int(c["hidden_size"]), int(c["num_hidden_layers"]), int(c["vocab_size"])
        eps = float(c["norm_eps"])
        t = Tensors(sd)
        m = Model(mt, D, V, eps, zero_centred=False)
        m.embed = t("model.embeddings.weight", (V, D))
        m.final_norm = t("model.norm.weight", (D,))
        tie = bool(c["tie_word_embeddings"])
        m.head = m.embed if tie else t("lm_head.weight", (V, D))
        m.tied = tie
        tied_copy(t, "lm_head.weight", m, tie)
        I = mlp_width(D, c["hidden_ratio"], c["intermediate_size"])
        specs = attn_specs(c["attn"], L)
        if mt == "gated_deltanet":
            Hk = int(c["num_heads"])
            Hv = int(c["num_v_heads"] or Hk)
            dk = int(c["head_dim"])
            dv = int(dk * float(c["expand_v"]))
            if dv != dk * float(c["expand_v"]) or Hv % Hk:
                raise ValueError(f"gated_deltanet: head_dim {dk} x expand_v {c['expand_v']}, "
                                 f"num_v_heads {Hv} over num_heads {Hk}: not fla's shapes")
        else:
            Hk = Hv = int(c["num_heads"])
            kd, vd = int(D * float(c["expand_k"])), int(D * float(c["expand_v"]))
            if kd % Hk or vd % Hk:
                raise ValueError(f"delta_net: key dim {kd} / value dim {vd} not divisible by num_heads {Hk}")
            dk, dv = kd // Hk, vd // Hk
            if c["qk_norm"] not in ("l2", "sum") or c["qk_activation"] not in ("silu", "relu", "elu", "identity"):
                raise ValueError(f"delta_net: qk_norm {c['qk_norm']!r} / qk_activation {c['qk_activation']!r}")
        K = int(c["conv_size"])
        kd, vd = Hk * dk, Hv * dv
        for i in range(L):
            p = f"model.layers.{i}."
            lay = {"in_norm": t(p + "attn_norm.weight", (D,)), "mlp_norm": t(p + "mlp_norm.weight", (D,)),
                   "gate": t(p + "mlp.gate_proj.weight", (I, D)), "up": t(p + "mlp.up_proj.weight", (I, D)),
                   "down": t(p + "mlp.down_proj.weight", (D, I))}
            a = p + "attn."
            if i in specs:
                s = specs[i]
                Ha, KVa = s["num_heads"], s["num_kv_heads"]
                hd = D // Ha
                lay.update(kind="fla_attn", H=Ha, KV=KVa, hd=hd, theta=s["rope_theta"], window=s["window_size"],
                           q=t(a + "q_proj.weight", (D, D)), k=t(a + "k_proj.weight", (KVa * hd, D)),
                           v=t(a + "v_proj.weight", (KVa * hd, D)), o=t(a + "o_proj.weight", (D, D)))
                if s["qkv_bias"]:
                    lay.update(bq=t(a + "q_proj.bias", (D,)), bk=t(a + "k_proj.bias", (KVa * hd,)),
                               bv=t(a + "v_proj.bias", (KVa * hd,)))
                m.layers.append(lay)
                continue
            gdn = mt == "gated_deltanet"
            lay.update(kind="delta", Hk=Hk, Hv=Hv, dk=dk, dv=dv, K=K, decay=gdn, eps=eps,
                       act="silu" if gdn else c["qk_activation"], qk_norm="l2" if gdn else c["qk_norm"],
                       neg_eigval=bool(c["allow_neg_eigval"]),
                       wq=t(a + "q_proj.weight", (kd, D)), wk=t(a + "k_proj.weight", (kd, D)),
                       wv=t(a + "v_proj.weight", (vd, D)), o=t(a + "o_proj.weight", (D, vd)),
                       onorm=t(a + "o_norm.weight", (dv,)))
            if gdn or c["use_beta"]:
                lay["b"] = t(a + "b_proj.weight", (Hv, D))
            if gdn:
                lay.update(a=t(a + "a_proj.weight", (Hv, D)), A_log=t(a + "A_log", (Hv,)),
                           dt_bias=t(a + "dt_bias", (Hv,)))
                if t.has(a + "D"):  # fla before 12 Mar 2025 kept an unused D [num_heads]
                    t(a + "D", (Hk,))
            if c["use_short_conv"]:
                lay["conv"] = torch.cat([t(a + "q_conv1d.weight", (kd, 1, K)), t(a + "k_conv1d.weight", (kd, 1, K)),
                                         t(a + "v_conv1d.weight", (vd, 1, K))], dim=0)[:, 0, :]
            if c["use_gate"]:
                lay["z"] = t(a + "g_proj.weight", (vd, D))
            m.layers.append(lay)
        m.skipped = t.finish()
        m.dtypes = t.dtypes
        m.rules = {"norms": "w (plain RMSNorm everywhere)", "eps": eps, "tied": tie,
                   "kv_heads_map": "value head h reads key head h // (Hv / Hk)"}
        self.model = m


# --------------------------------------------------------------------------------------------
# The model


class Model:
    def __init__(self, mtype, D, V, eps, zero_centred):
        self.type, self.D, self.V, self.eps = mtype, D, V, eps
        self.zero_centred = zero_centred
        self.layers = []
        self.chunk = None  # set by the self-test: the delta rule in chunks of this size
        self.variants = set()  # misreadings make_fixtures --sensitivity asks for

    def norm(self, x, w, eps=None):
        y = rms(x, self.eps if eps is None else eps)
        return y * ((1.0 + w) if self.zero_centred and "plain-norms" not in self.variants else w)

    def new_state(self):
        st = []
        for L in self.layers:
            if L["kind"] == "delta":
                C = L["Hk"] * L["dk"] * 2 + L["Hv"] * L["dv"]
                st.append({"conv": torch.zeros(L["K"] - 1, C, dtype=DT),
                           "S": torch.zeros(L["Hv"], L["dk"], L["dv"], dtype=DT)})
            else:
                st.append({"k": torch.zeros(0, L["H"], L["hd"], dtype=DT),
                           "v": torch.zeros(0, L["H"], L["hd"], dtype=DT), "pos": 0})
        return st

    # ----------------------------------------------------------------------------------------
    def delta_mixer(self, L, x, st):
        T = x.shape[0]
        Hk, Hv, dk, dv = L["Hk"], L["Hv"], L["dk"], L["dv"]
        kd = Hk * dk
        u = torch.cat([linear(x, L["wq"]), linear(x, L["wk"]), linear(x, L["wv"])], dim=1)
        if "conv" in L:
            u, st["conv"] = conv_step(u, st["conv"], L["conv"])
            if L["act"] == "silu":
                u = silu(u)
            else:  # delta_net: the q/k convs have no activation when qk_activation is not silu
                u = torch.cat([u[:, :2 * kd], silu(u[:, 2 * kd:])], dim=1)
        elif L["act"] == "silu":
            u = silu(u)
        else:
            u = torch.cat([u[:, :2 * kd], silu(u[:, 2 * kd:])], dim=1)
        q, k, v = u[:, :kd].view(T, Hk, dk), u[:, kd:2 * kd].view(T, Hk, dk), u[:, 2 * kd:].view(T, Hv, dv)
        if L["act"] == "relu":
            q, k = torch.relu(q), torch.relu(k)
        elif L["act"] == "elu":
            q, k = torch.nn.functional.elu(q) + 1.0, torch.nn.functional.elu(k) + 1.0
        if L["qk_norm"] == "l2":
            q, k = l2norm(q, L.get("l2eps", 1e-6)), l2norm(k, L.get("l2eps", 1e-6))
        else:
            q, k = sum_norm(q), sum_norm(k)
        q = q * dk ** -0.5
        G = Hv // Hk
        if "tile-heads" in self.variants:  # the misreading: value head h reads key head h mod Hk
            q, k = q.repeat(1, G, 1), k.repeat(1, G, 1)
        else:
            q, k = q.repeat_interleave(G, dim=1), k.repeat_interleave(G, dim=1)
        beta = torch.sigmoid(linear(x, L["b"])) if "b" in L else torch.ones(T, Hv, dtype=DT)
        if L["neg_eigval"]:
            beta = beta * 2.0
        if L["decay"]:
            g = -torch.exp(L["A_log"]) * softplus(linear(x, L["a"]) + L["dt_bias"])
        else:
            g = torch.zeros(T, Hv, dtype=DT)
        if self.chunk:
            o, st["S"] = delta_rule_chunked(q, k, v, g, beta, st["S"], self.chunk)
        else:
            o, st["S"] = delta_rule(q, k, v, g, beta, st["S"])
        o = rms(o, L["eps"]) * ((1.0 + L["onorm"]) if "zc-gated-norm" in self.variants else L["onorm"])
        if "z" in L:
            o = o * silu(linear(x, L["z"]).view(T, Hv, dv))
        return linear(o.reshape(T, Hv * dv), L["o"])

    def qwen_attn(self, L, x, st):
        T = x.shape[0]
        H, KV, hd = L["H"], L["KV"], L["hd"]
        qg = linear(x, L["q"])
        if "split-qgate" in self.variants:  # the misreading: all query rows, then all gate rows
            q, gate = qg[:, :H * hd].reshape(T, H, hd), qg[:, H * hd:]
        else:  # per head: hd query channels, then hd gate channels
            qg = qg.view(T, H, 2 * hd)
            q, gate = qg[..., :hd], qg[..., hd:].reshape(T, H * hd)
        q = self.norm(q, L["q_norm"], L["eps"])
        k = self.norm(linear(x, L["k"]).view(T, KV, hd), L["k_norm"], L["eps"])
        v = linear(x, L["v"]).view(T, KV, hd)
        pos = torch.arange(T) + st["pos"]
        rot = hd if "full-rope" in self.variants else L["rot"]
        q, k = rope_half(q, L["theta"], pos, rot), rope_half(k, L["theta"], pos, rot)
        G = H // KV
        st["k"] = torch.cat([st["k"], k.repeat_interleave(G, dim=1)], dim=0)
        st["v"] = torch.cat([st["v"], v.repeat_interleave(G, dim=1)], dim=0)
        o = attend(q, st["k"], st["v"], st["pos"])
        st["pos"] += T
        o = o.reshape(T, H * hd)
        if "no-attn-gate" not in self.variants:
            o = o * torch.sigmoid(gate)
        return linear(o, L["o"])

    def fla_attn(self, L, x, st):
        T = x.shape[0]
        H, KV, hd = L["H"], L["KV"], L["hd"]
        q = linear(x, L["q"], L.get("bq")).view(T, H, hd)
        k = linear(x, L["k"], L.get("bk")).view(T, KV, hd)
        v = linear(x, L["v"], L.get("bv")).view(T, KV, hd)
        pos = torch.arange(T) + st["pos"]
        q, k = rope_half(q, L["theta"], pos, hd), rope_half(k, L["theta"], pos, hd)
        G = H // KV
        st["k"] = torch.cat([st["k"], k.repeat_interleave(G, dim=1)], dim=0)
        st["v"] = torch.cat([st["v"], v.repeat_interleave(G, dim=1)], dim=0)
        o = attend(q, st["k"], st["v"], st["pos"], L["window"])
        st["pos"] += T
        return linear(o.reshape(T, H * hd), L["o"])

    def forward(self, ids, state=None):
        """(logits [T, V] float64, state after the last id); state continues a previous call."""
        ids = torch.as_tensor(ids, dtype=torch.long)
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= self.V):
            raise ValueError(f"token id out of range [0, {self.V})")
        state = self.new_state() if state is None else state
        x = self.embed[ids]
        for L, st in zip(self.layers, state):
            h = self.norm(x, L["in_norm"])
            mix = {"delta": self.delta_mixer, "qwen_attn": self.qwen_attn, "fla_attn": self.fla_attn}[L["kind"]]
            x = x + mix(L, h, st)
            h = self.norm(x, L["mlp_norm"])
            x = x + linear(silu(linear(h, L["gate"])) * linear(h, L["up"]), L["down"])
        return self.norm(x, self.final_norm) @ self.head.T, state

    def nll(self, ids):
        """(mean NLL of ids[1:] given the prefix, count, logits, state)."""
        logits, state = self.forward(ids)
        if len(ids) < 2:
            return float("nan"), 0, logits, state
        lp = torch.log_softmax(logits[:-1], dim=-1)
        tgt = torch.as_tensor(ids[1:], dtype=torch.long)
        return float(-lp[torch.arange(len(ids) - 1), tgt].mean()), len(ids) - 1, logits, state

    def greedy(self, logits_last, state, n):
        """n ids, each the argmax of the previous logits, fed back one at a time; and the
        smallest top-1/top-2 logit margin met on the way."""
        out, margin = [], math.inf
        last = logits_last
        for _ in range(n):
            top2 = torch.topk(last, 2).values
            margin = min(margin, float(top2[0] - top2[1]))
            nxt = int(torch.argmax(last))
            out.append(nxt)
            logits, state = self.forward([nxt], state)
            last = logits[-1]
        return out, margin

    def describe(self):
        """One letter a layer: D delta rule (G when gated), A softmax attention (W windowed)."""
        def letter(L):
            if L["kind"] == "delta":
                return "G" if L["decay"] else "D"
            if L["kind"] == "fla_attn" and L["window"] is not None:
                return "W"
            return "A"
        return "".join(letter(L) for L in self.layers)


def build_model(config, sd):
    mt = config.get("model_type")
    if mt in ("qwen3_5", "qwen3_5_text"):
        return QwenBuilder(config, sd).model
    if mt in FLA_DEFAULTS:
        return FlaBuilder(config, sd).model
    raise ValueError(f"model_type {mt!r} is not qwen3_5, qwen3_5_text, gated_deltanet or delta_net")


def load_model(model_dir):
    with open(os.path.join(model_dir, "config.json")) as f:
        config = json.load(f)
    sd, path = load_weights(model_dir)
    return build_model(config, sd), path


# --------------------------------------------------------------------------------------------

def check_expected(path):
    """Recomputes every fixture of expected.json (the directories beside it): the mean NLL within
    1e-12 relative, the prefixes' NLLs, the top-5 ids and the greedy ids equal."""
    here = os.path.dirname(os.path.abspath(path))
    with open(path) as f:
        exp = json.load(f)
    ids = parse_ids(open(os.path.join(here, "prompt_ids.txt")).read())
    bad = 0
    for name, e in exp["fixtures"].items():
        m = load_model(os.path.join(here, name))[0]
        got, _, logits, state = m.nll(ids)
        rel = abs(got - e["mean_nll"]) / abs(e["mean_nll"])
        errs = []
        if rel > 1e-12:
            errs.append(f"mean NLL {got:.17g} vs {e['mean_nll']:.17g} (rel {rel:.2g})")
        for n, want in e["mean_nll_prefix"].items():
            pre = m.nll(ids[:int(n)])[0]
            if abs(pre - want) > 1e-12 * abs(want):
                errs.append(f"prefix {n}: {pre:.17g} vs {want:.17g}")
        top = [int(i) for i in torch.topk(logits[-1], 5).indices]
        if top != e["top5_ids"]:
            errs.append(f"top5 {top} vs {e['top5_ids']}")
        greedy, _ = m.greedy(logits[-1], state, len(e["greedy_ids"]))
        if greedy != e["greedy_ids"]:
            errs.append(f"greedy {greedy} vs {e['greedy_ids']}")
        bad += bool(errs)
        print(f"reference: {name}: {got:.17g} (committed {e['mean_nll']:.17g}, rel {rel:.2g})"
              + ("" if not errs else "  <-- " + "; ".join(errs)))
    return 1 if bad else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model_dir", nargs="?")
    ap.add_argument("--tokens", help="comma/space separated ids")
    ap.add_argument("--tokens-file", help="file of ids separated by whitespace or commas")
    ap.add_argument("--greedy", type=int, default=0, help="continue greedily for N ids")
    ap.add_argument("--logits-out", help="write the last position's logits (.npy, else text)")
    ap.add_argument("--top", type=int, default=5)
    ap.add_argument("--self-test", action="store_true")
    ap.add_argument("--check-expected", metavar="EXPECTED_JSON")
    a = ap.parse_args()
    if a.check_expected:
        sys.exit(check_expected(a.check_expected))
    if a.self_test:
        import selftest
        sys.exit(selftest.run())
    if not a.model_dir or not (a.tokens or a.tokens_file):
        ap.error("MODEL_DIR and --tokens/--tokens-file are required")
    ids = parse_ids(a.tokens) if a.tokens else parse_ids(open(a.tokens_file).read())
    model, path = load_model(a.model_dir)
    mean_nll, count, logits, state = model.nll(ids)
    top = torch.topk(logits[-1], min(a.top, model.V))
    out = {"weights": path, "model_type": model.type, "layers": model.describe(),
           "skipped_tensors": model.skipped, "n_tokens": len(ids), "count": count,
           "mean_nll": float(f"{mean_nll:.17g}"), "mean_nll_17g": f"{mean_nll:.17g}",
           "top_ids": [int(i) for i in top.indices], "top_logits": [float(x) for x in top.values]}
    if a.greedy:
        out["greedy_ids"], out["greedy_min_margin"] = model.greedy(logits[-1], state, a.greedy)
    if a.logits_out:
        write_logits(a.logits_out, logits[-1])
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
