#!/usr/bin/env python3
"""Float64 reference of flash-linear-attention's GLA, RetNet and HGRN2 language models and the
softmax attention layers of their `attn` block (hybrids).

Our own code, written from fla's sources as docs/fla-models.md describes them; it does not
import fla (which needs Triton and a GPU). It is an oracle, not fast: every recurrence runs
token by token in torch.float64, the attention layers in their quadratic masked form.

  /usr/bin/python3 tests/fla/reference.py MODEL_DIR --tokens 1,2,3 [--logits-out F.npy|F.txt]
  /usr/bin/python3 tests/fla/reference.py MODEL_DIR --tokens-file ids.txt
  /usr/bin/python3 tests/fla/reference.py --self-test
  /usr/bin/python3 tests/fla/reference.py --check-expected tests/fla/expected_nll.txt
      (recompute every fixture named there over prompt_ids.txt beside it; exit 1 unless each
      mean NLL is within 1e-12 relative of the committed one)

Output (JSON on stdout): mean_nll over the n-1 predictions of tokens[1:] from tokens[:-1]
(log-softmax over all vocab_size logits), the last position's top ids and logits.

--fp32-rope computes the rotary angles in float32 as fla does (position and inverse frequency
in float32, their product rounded to float32); by default they are float64.
"""

import argparse
import json
import math
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from pyref import linear, parse_ids, read_safetensors, rms_norm, silu, write_logits  # noqa: E402

DT = torch.float64

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


# --------------------------------------------------------------------------------------------
# Pieces (float64; sequences are [T, ...])

def activation(name, x):
    """fla's ACT2FN entries that a feature map or the gate may name."""
    if name in ("swish", "silu"):
        return silu(x)
    if name == "relu":
        return torch.relu(x)
    if name == "sigmoid":
        return torch.sigmoid(x)
    if name == "logsigmoid":
        return torch.nn.functional.logsigmoid(x)
    if name == "sqrelu":
        return torch.relu(x) ** 2
    if name == "gelu":  # fla's fast_gelu_impl: the tanh approximation
        return 0.5 * x * (1.0 + torch.tanh(0.7978845608028654 * x * (1.0 + 0.044715 * x * x)))
    raise ValueError(f"unsupported activation {name!r}")

def causal_conv(u, weight, bias=None):
    """Depthwise causal conv. u [T, C], weight [C, 1, K]; tap K-1 is the current token."""
    T, C = u.shape
    K = weight.shape[2]
    padded = torch.cat([torch.zeros(K - 1, C, dtype=u.dtype), u], dim=0)
    out = torch.zeros_like(u)
    for j in range(K):
        out = out + padded[j:j + T] * weight[:, 0, j]
    return out + bias if bias is not None else out


FP32_ROPE = False


def rope(x, base, positions):
    """x [T, H, d]; the pairs (j, j + d/2) rotated by pos * base^(-2j/d) (not interleaved)."""
    d = x.shape[-1]
    half = d // 2
    if FP32_ROPE:
        inv = 1.0 / (float(base) ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
        ang = torch.outer(positions.to(torch.float32), inv).to(DT)
    else:
        inv = 1.0 / (float(base) ** (torch.arange(0, d, 2, dtype=DT) / d))
        ang = torch.outer(positions.to(DT), inv)
    cos, sin = torch.cos(ang)[:, None, :], torch.sin(ang)[:, None, :]
    x1, x2 = x[..., :half], x[..., half:2 * half]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin, x[..., 2 * half:]], dim=-1)


def decayed_recurrence(q, k, v, log_a):
    """S_t = diag(exp(log_a_t)) S_{t-1} + k_t v_tᵀ, o_t = q_tᵀ S_t, per head, token by token.
    q, k, log_a [T, H, dk]; v [T, H, dv]; log_a may also be [H] (a fixed decay per head)."""
    T, H, dk = q.shape
    dv = v.shape[2]
    S = torch.zeros(H, dk, dv, dtype=DT)
    out = torch.zeros(T, H, dv, dtype=DT)
    fixed = log_a.dim() == 1
    if fixed:
        a = torch.exp(log_a)[:, None, None]
    for t in range(T):
        decay = a if fixed else torch.exp(log_a[t])[:, :, None]
        S = S * decay + k[t][:, :, None] * v[t][:, None, :]
        out[t] = (q[t][:, :, None] * S).sum(dim=1)
    return out


def softmax_attention(q, k, v, window):
    """q [T, H, d], k, v [T, H, d] (kv heads already repeated); causal, and when window is set a
    query sees its own and the window-1 previous keys. Scores scaled by d^-1/2."""
    T, H, d = q.shape
    s = torch.einsum("ihd,jhd->hij", q, k) * d ** -0.5
    i = torch.arange(T)[:, None]
    j = torch.arange(T)[None, :]
    visible = j <= i
    if window is not None:
        visible = visible & (j > i - window)
    s = s.masked_fill(~visible, -math.inf)
    return torch.einsum("hij,jhd->ihd", torch.softmax(s, dim=-1), v)


def mlp_width(D, hidden_ratio, intermediate_size):
    """GatedMLP's rule: intermediate_size, else int(D * ratio * 2/3) rounded up to 256."""
    if intermediate_size is not None:
        return int(intermediate_size)
    ratio = 4 if hidden_ratio is None else hidden_ratio
    width = int(D * ratio * 2 / 3)
    return 256 * ((width + 255) // 256)


# --------------------------------------------------------------------------------------------
# The model

MODEL_DEFAULTS = {
    # fla's config defaults (the constructor's keyword defaults), per model_type.
    "gla": dict(hidden_size=2048, expand_k=0.5, expand_v=1.0, hidden_ratio=4, intermediate_size=None,
                num_hidden_layers=24, num_heads=4, num_kv_heads=None, feature_map=None,
                use_short_conv=False, conv_size=4, use_output_gate=True, clamp_min=None,
                hidden_act="swish", elementwise_affine=True, norm_eps=1e-6, attn=None,
                tie_word_embeddings=False, fuse_norm=True, vocab_size=32000, attnres_block_size=None),
    "retnet": dict(hidden_size=2048, expand_k=1.0, expand_v=2.0, hidden_ratio=2, intermediate_size=None,
                   num_hidden_layers=24, num_heads=8, num_kv_heads=None, feature_map=None,
                   use_output_gate=True, hidden_act="swish", elementwise_affine=True, norm_eps=1e-6,
                   attn=None, tie_word_embeddings=False, fuse_norm=True, vocab_size=32000,
                   attnres_block_size=None),
    "hgrn2": dict(hidden_size=2048, num_hidden_layers=24, num_heads=None, expand_ratio=128,
                  use_short_conv=False, conv_size=4, use_lower_bound=True, hidden_ratio=4,
                  intermediate_size=None, hidden_act="swish", elementwise_affine=True, norm_eps=1e-6,
                  attn=None, tie_word_embeddings=False, fuse_norm=True, vocab_size=32000,
                  attnres_block_size=None),
}


def attn_specs(attn, n_layers):
    """The `attn` block (a dict or a list of dicts) -> {layer: normalized spec}."""
    if attn is None:
        return {}
    specs = [attn] if isinstance(attn, dict) else list(attn)
    out = {}
    for s in specs:
        for key in ("layers", "num_heads"):
            if key not in s:
                raise ValueError(f"attn: {key!r} is required")
        spec = {
            "num_heads": int(s["num_heads"]),
            "num_kv_heads": int(s.get("num_kv_heads") or s["num_heads"]),
            "qkv_bias": bool(s.get("qkv_bias", False)),
            "window_size": None if s.get("window_size") is None else int(s["window_size"]),
            "rope_theta": float(s.get("rope_theta", 10000.0)),
        }
        for i in s["layers"]:
            if not 0 <= i < n_layers or i in out:
                raise ValueError(f"attn: layer {i} out of range or given twice")
            out[int(i)] = spec
    return out


class FlaModel:
    def __init__(self, config, sd):
        mt = config.get("model_type")
        if mt not in MODEL_DEFAULTS:
            raise ValueError(f"model_type {mt!r} is not gla, retnet or hgrn2")
        c = dict(MODEL_DEFAULTS[mt])
        c.update({k: v for k, v in config.items() if k in c})
        if c["attnres_block_size"] is not None:
            raise ValueError("attnres_block_size is not supported")
        if c["hidden_act"] != "swish":
            raise ValueError("fla's MLP takes hidden_act swish only")
        self.type, self.c = mt, c
        self.w = {k: v.to(DT) for k, v in sd.items()}
        self.used = set()
        self.D = int(c["hidden_size"])
        self.L = int(c["num_hidden_layers"])
        self.V = int(c["vocab_size"])
        self.eps = float(c["norm_eps"])
        self.I = mlp_width(self.D, c["hidden_ratio"], c["intermediate_size"])
        self.attn = attn_specs(c["attn"], self.L)
        self.embed = self.t("model.embeddings.weight", (self.V, self.D))
        if c["tie_word_embeddings"]:
            self.head = self.embed
            if "lm_head.weight" in self.w:  # some writers keep the tied copy
                assert torch.equal(self.t("lm_head.weight", (self.V, self.D)), self.embed)
        else:
            self.head = self.t("lm_head.weight", (self.V, self.D))
        self.final_norm = self.t("model.norm.weight", (self.D,))
        if mt == "hgrn2" and c["use_lower_bound"]:
            lb = self.t("model.lower_bounds", (self.L, self.D))
            p = torch.softmax(lb, dim=0)
            self.lower_bounds = p.cumsum(0) - p[0]
        else:
            self.lower_bounds = None
        self.layers = [self._layer(i) for i in range(self.L)]
        unused = sorted(set(self.w) - self.used)
        if unused:
            raise ValueError(f"tensors not used by this configuration: {unused}")

    def t(self, name, shape, optional=False):
        if name not in self.w:
            if optional:
                return None
            raise ValueError(f"missing tensor {name}")
        x = self.w[name]
        if tuple(x.shape) != tuple(shape):
            raise ValueError(f"{name} has shape {tuple(x.shape)}, expected {tuple(shape)}")
        self.used.add(name)
        return x

    def _layer(self, i):
        c, D, p = self.c, self.D, f"model.layers.{i}."
        L = {"attn_norm": self.t(p + "attn_norm.weight", (D,)),
             "mlp_norm": self.t(p + "mlp_norm.weight", (D,)),
             "gate": self.t(p + "mlp.gate_proj.weight", (self.I, D)),
             "up": self.t(p + "mlp.up_proj.weight", (self.I, D)),
             "down": self.t(p + "mlp.down_proj.weight", (D, self.I))}
        a = p + "attn."
        if i in self.attn:
            s = self.attn[i]
            Ha, Hkv = s["num_heads"], s["num_kv_heads"]
            hd = D // Ha
            kv = Hkv * hd
            L.update(kind="attn", spec=s, hd=hd,
                     q=self.t(a + "q_proj.weight", (D, D)), k=self.t(a + "k_proj.weight", (kv, D)),
                     v=self.t(a + "v_proj.weight", (kv, D)), o=self.t(a + "o_proj.weight", (D, D)))
            if s["qkv_bias"]:
                L.update(bq=self.t(a + "q_proj.bias", (D,)), bk=self.t(a + "k_proj.bias", (kv,)),
                         bv=self.t(a + "v_proj.bias", (kv,)))
            return L
        if self.type in ("gla", "retnet"):
            H = int(c["num_heads"])
            Hkv = int(c["num_kv_heads"] or H)
            G = H // Hkv
            kd, vd = int(D * c["expand_k"]), int(D * c["expand_v"])
            dk, dv = kd // H, vd // H
            L.update(kind=self.type, H=H, Hkv=Hkv, G=G, dk=dk, dv=dv,
                     q=self.t(a + "q_proj.weight", (kd, D)), k=self.t(a + "k_proj.weight", (kd // G, D)),
                     v=self.t(a + "v_proj.weight", (vd // G, D)), o=self.t(a + "o_proj.weight", (D, vd)))
            gated = bool(c["use_output_gate"])
            L["g"] = self.t(a + "g_proj.weight", (vd, D)) if gated else None
            fused = gated and c["hidden_act"] == "swish" and c["fuse_norm"]
            L["gnorm"] = (self.t(a + ("g_norm_swish_gate.weight" if fused else "g_norm.weight"), (dv,))
                          if c["elementwise_affine"] else None)
            if self.type == "gla":
                L.update(gk1=self.t(a + "gk_proj.0.weight", (16, D)),
                         gk2=self.t(a + "gk_proj.1.weight", (kd // G, 16)),
                         gkb=self.t(a + "gk_proj.1.bias", (kd // G,)))
                if c["use_short_conv"]:
                    K = int(c["conv_size"])
                    L.update(cq=self.t(a + "q_conv1d.weight", (kd, 1, K)),
                             ck=self.t(a + "k_conv1d.weight", (kd // G, 1, K)),
                             cv=self.t(a + "v_conv1d.weight", (vd // G, 1, K)))
            return L
        # hgrn2
        e = int(c["expand_ratio"]) if c["expand_ratio"] is not None else D // int(c["num_heads"])
        H = D // e
        fd = H * e
        L.update(kind="hgrn2", H=H, e=e, dv=D // H,
                 q=self.t(a + "q_proj.weight", (fd, D)), f=self.t(a + "f_proj.weight", (fd, D)),
                 i=self.t(a + "i_proj.weight", (D, D)), o=self.t(a + "o_proj.weight", (D, D)),
                 gnorm=self.t(a + "g_norm.weight", (D,)) if c["elementwise_affine"] else None)
        if c["use_short_conv"]:
            K = int(c["conv_size"])
            L.update(cq=self.t(a + "q_conv1d.weight", (fd, 1, K)),
                     cf=self.t(a + "f_conv1d.weight", (fd, 1, K)),
                     ci=self.t(a + "i_conv1d.weight", (D, 1, K)))
        return L

    # ----------------------------------------------------------------------------------------
    def mixer(self, i, L, x):
        T = x.shape[0]
        pos = torch.arange(T)
        kind = L["kind"]
        if kind == "attn":
            s, hd = L["spec"], L["hd"]
            Ha, Hkv = s["num_heads"], s["num_kv_heads"]
            q = linear(x, L["q"], L.get("bq")).view(T, Ha, hd)
            k = linear(x, L["k"], L.get("bk")).view(T, Hkv, hd)
            v = linear(x, L["v"], L.get("bv")).view(T, Hkv, hd)
            q, k = rope(q, s["rope_theta"], pos), rope(k, s["rope_theta"], pos)
            G = Ha // Hkv
            k, v = k.repeat_interleave(G, dim=1), v.repeat_interleave(G, dim=1)
            o = softmax_attention(q, k, v, s["window_size"])
            return linear(o.reshape(T, Ha * hd), L["o"])
        c = self.c
        if kind in ("gla", "retnet"):
            H, Hkv, G, dk, dv = L["H"], L["Hkv"], L["G"], L["dk"], L["dv"]
            q, k, v = linear(x, L["q"]), linear(x, L["k"]), linear(x, L["v"])
            if kind == "gla" and c["use_short_conv"]:
                q, k, v = silu(causal_conv(q, L["cq"])), silu(causal_conv(k, L["ck"])), silu(causal_conv(v, L["cv"]))
            q = q.view(T, H, dk)
            k = k.view(T, Hkv, dk).repeat_interleave(G, dim=1)
            v = v.view(T, Hkv, dv).repeat_interleave(G, dim=1)
            if kind == "gla":
                gk = linear(linear(x, L["gk1"]), L["gk2"], L["gkb"]).view(T, Hkv, dk).repeat_interleave(G, dim=1)
                log_a = torch.nn.functional.logsigmoid(gk) / 16.0
                if c["clamp_min"] is not None:
                    log_a = torch.clamp_min(log_a, float(c["clamp_min"]))
                if c["feature_map"] is not None:
                    q, k = activation(c["feature_map"], q), activation(c["feature_map"], k)
            else:
                if c["feature_map"] is not None:
                    q, k = activation(c["feature_map"], q), activation(c["feature_map"], k)
                q, k = rope(q, 10000.0, pos), rope(k, 10000.0, pos)
                h = torch.arange(H, dtype=DT)
                log_a = torch.log(1.0 - 2.0 ** (-5.0 - h))
            o = decayed_recurrence(q * dk ** -0.5, k, v, log_a)  # [T, H, dv]
            o = rms_norm(o, L["gnorm"], self.eps)
            if L["g"] is not None:
                g = linear(x, L["g"]).view(T, H, dv)
                o = o * activation(c["hidden_act"], g)
            return linear(o.reshape(T, H * dv), L["o"])
        # hgrn2
        H, e, dv = L["H"], L["e"], L["dv"]
        q, f, inp = linear(x, L["q"]), linear(x, L["f"]), linear(x, L["i"])
        if c["use_short_conv"]:
            q, f, inp = causal_conv(q, L["cq"]), causal_conv(f, L["cf"]), causal_conv(inp, L["ci"])
        q = silu(q)
        log_a = torch.nn.functional.logsigmoid(f)
        if self.lower_bounds is not None and i > 0:
            lb = self.lower_bounds[i]
            log_a = torch.logaddexp(torch.log(lb), torch.log1p(-lb) + log_a)
        k = 1.0 - torch.exp(log_a)
        o = decayed_recurrence(q.view(T, H, e) * e ** -0.5, k.view(T, H, e), inp.view(T, H, dv),
                               log_a.view(T, H, e))
        return linear(rms_norm(o.reshape(T, H * dv), L["gnorm"], self.eps), L["o"])

    def forward(self, ids):
        """Logits [T, vocab_size] (float64) for a list of ids."""
        ids = torch.as_tensor(ids, dtype=torch.long)
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= self.V):
            raise ValueError("token id out of range")
        x = self.embed[ids]
        for i, L in enumerate(self.layers):
            x = x + self.mixer(i, L, rms_norm(x, L["attn_norm"], self.eps))
            h = rms_norm(x, L["mlp_norm"], self.eps)
            x = x + linear(silu(linear(h, L["gate"])) * linear(h, L["up"]), L["down"])
        return rms_norm(x, self.final_norm, self.eps) @ self.head.T

    def nll(self, ids):
        """(mean NLL of ids[1:] given the prefix, count, logits)."""
        logits = self.forward(ids)
        if len(ids) < 2:
            return float("nan"), 0, logits
        lp = torch.log_softmax(logits[:-1], dim=-1)
        tgt = torch.as_tensor(ids[1:], dtype=torch.long)
        nll = -lp[torch.arange(len(ids) - 1), tgt]
        return float(nll.mean()), len(ids) - 1, logits

    def describe(self):
        return "".join("A" if L["kind"] == "attn" and L["spec"]["window_size"] is None else
                       "W" if L["kind"] == "attn" else
                       {"gla": "G", "retnet": "R", "hgrn2": "H"}[L["kind"]] for L in self.layers)


def load_model(model_dir):
    with open(os.path.join(model_dir, "config.json")) as f:
        config = json.load(f)
    sd, path = load_weights(model_dir)
    return FlaModel(config, sd), path


# --------------------------------------------------------------------------------------------
# Self-test: the token-by-token forms against closed (parallel) forms computed independently


def self_test():
    g = torch.Generator().manual_seed(4321)
    r = {}
    T, H, dk, dv = 23, 3, 5, 4
    q = torch.randn(T, H, dk, generator=g, dtype=DT)
    k = torch.randn(T, H, dk, generator=g, dtype=DT)
    v = torch.randn(T, H, dv, generator=g, dtype=DT)
    log_a = -torch.rand(T, H, dk, generator=g, dtype=DT)
    # o_i = sum_{j<=i} sum_c q_ic k_jc exp(sum_{j<m<=i} log_a_mc) v_j
    cum = torch.cumsum(log_a, dim=0)
    par = torch.zeros(T, H, dv, dtype=DT)
    for i in range(T):
        for j in range(i + 1):
            w = (q[i] * k[j] * torch.exp(cum[i] - cum[j])).sum(-1)  # [H]
            par[i] += w[:, None] * v[j]
    rec = decayed_recurrence(q, k, v, log_a)
    r["gla_recurrent_vs_closed"] = float((rec - par).abs().max() / par.abs().max())
    # RetNet: o_i = sum_{j<=i} gamma_h^(i-j) (q_i . k_j) v_j
    gam = 1.0 - 2.0 ** (-5.0 - torch.arange(H, dtype=DT))
    n = torch.arange(T, dtype=DT)
    dec = gam[:, None, None] ** (n[:, None] - n[None, :]).clamp(min=0) * (n[:, None] >= n[None, :])
    par = torch.einsum("hij,ihd,jhd,jhe->ihe", dec, q, k, v)
    rec = decayed_recurrence(q, k, v, torch.log(gam))
    r["retention_recurrent_vs_closed"] = float((rec - par).abs().max() / par.abs().max())
    # HGRN2's lower bound in fla's log form is log(lb + (1 - lb) sigmoid(f))
    f = torch.randn(50, generator=g, dtype=DT) * 3
    lb = torch.rand(50, generator=g, dtype=DT)
    lhs = torch.logaddexp(torch.log(lb), torch.log1p(-lb) + torch.nn.functional.logsigmoid(f))
    r["lower_bound_identity"] = float((lhs - torch.log(lb + (1 - lb) * torch.sigmoid(f))).abs().max())
    # windowed attention (masked, quadratic) against a ring of the last W keys
    d = 6
    qa = torch.randn(T, H, d, generator=g, dtype=DT)
    ka = torch.randn(T, H, d, generator=g, dtype=DT)
    va = torch.randn(T, H, d, generator=g, dtype=DT)
    for W in (1, 4, 100):
        out = softmax_attention(qa, ka, va, W)
        ring = torch.zeros_like(out)
        for t in range(T):
            lo = max(0, t - W + 1)
            s = torch.einsum("hd,jhd->hj", qa[t], ka[lo:t + 1]) * d ** -0.5
            ring[t] = torch.einsum("hj,jhd->hd", torch.softmax(s, -1), va[lo:t + 1])
        r[f"window{W}_masked_vs_ring"] = float((out - ring).abs().max())
    r["full_vs_window_longer_than_sequence"] = float(
        (softmax_attention(qa, ka, va, None) - softmax_attention(qa, ka, va, T + 5)).abs().max())
    # rope: a rotation (norms kept), and q_i . k_j depends only on i - j
    x = torch.randn(T, H, 8, generator=g, dtype=DT)
    pos = torch.arange(T)
    rx = rope(x, 10000.0, pos)
    r["rope_norm"] = float((rx.norm(dim=-1) - x.norm(dim=-1)).abs().max())
    a0, b0 = x[3, 0], x[7, 1]
    s1 = (rope(a0[None, None], 500.0, torch.tensor([5]))[0, 0] * rope(b0[None, None], 500.0, torch.tensor([2]))[0, 0]).sum()
    s2 = (rope(a0[None, None], 500.0, torch.tensor([13]))[0, 0] * rope(b0[None, None], 500.0, torch.tensor([10]))[0, 0]).sum()
    r["rope_relative"] = float((s1 - s2).abs())
    # the causal conv agrees with torch's Conv1d (padding K-1, first T outputs)
    u = torch.randn(T, 6, generator=g, dtype=DT)
    cw = torch.randn(6, 1, 4, generator=g, dtype=DT)
    tc = torch.nn.functional.conv1d(u.T[None], cw, None, padding=3, groups=6)[0, :, :T].T
    r["conv_vs_torch_conv1d"] = float((causal_conv(u, cw) - tc).abs().max())
    # whole models: causal (a prefix's logits are the first rows of the whole sequence's)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import make_model
    ids = torch.randint(0, 97, (40,), generator=g).tolist()
    for name, argv in [
        ("gla", ["--type", "gla", "--layers", "3", "--short-conv", "--kv-heads", "1",
                 "--attn-layers", "1", "--attn-window", "7", "--qkv-bias"]),
        ("retnet", ["--type", "retnet", "--layers", "2", "--heads", "4"]),
        ("hgrn2", ["--type", "hgrn2", "--layers", "3", "--expand-ratio", "8", "--short-conv",
                   "--attn-layers", "2", "--attn-heads", "4", "--attn-kv-heads", "2"]),
    ]:
        cfg, w = make_model.build(argv + ["--vocab", "97", "--hidden", "32", "--seed", "3"])
        m = FlaModel(cfg, w)
        full = m.forward(ids)
        pre = m.forward(ids[:17])
        r[f"{name}_causal"] = float((full[:17] - pre).abs().max() / full.abs().max())
    r["mlp_width_rule"] = float(abs(mlp_width(2048, 4, None) - 5632) + abs(mlp_width(2048, 2, None) - 2816)
                                + abs(mlp_width(64, 4, None) - 256) + abs(mlp_width(64, 4, 96) - 96))
    tol = 1e-12
    r["tolerance"] = tol
    r["ok"] = all(v <= tol for k, v in r.items() if k != "tolerance")
    return r


# --------------------------------------------------------------------------------------------

def check_expected(path):
    """Recomputes each "name value" line of path (fixture directories beside it)."""
    here = os.path.dirname(os.path.abspath(path))
    ids = parse_ids(open(os.path.join(here, "prompt_ids.txt")).read())
    bad = 0
    for line in open(path):
        name, want = line.split()
        got = load_model(os.path.join(here, name))[0].nll(ids)[0]
        rel = abs(got - float(want)) / abs(float(want))
        ok = rel <= 1e-12
        bad += not ok
        print(f"reference: {name}: {got:.17g}, committed {want}, relative difference {rel:.2g}"
              + ("" if ok else "  <-- more than 1e-12"))
    return 1 if bad else 0


def main():
    global FP32_ROPE
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model_dir", nargs="?")
    ap.add_argument("--tokens", help="comma/space separated ids")
    ap.add_argument("--tokens-file", help="file of ids separated by whitespace or commas")
    ap.add_argument("--logits-out", help="write the last position's logits (.npy, else text)")
    ap.add_argument("--top", type=int, default=5)
    ap.add_argument("--fp32-rope", action="store_true", help="rotary angles in float32, as fla")
    ap.add_argument("--self-test", action="store_true")
    ap.add_argument("--check-expected", metavar="EXPECTED_NLL_TXT")
    a = ap.parse_args()
    if a.check_expected:
        sys.exit(check_expected(a.check_expected))
    if a.self_test:
        r = self_test()
        print(json.dumps(r, indent=1))
        sys.exit(0 if r["ok"] else 1)
    if not a.model_dir or not (a.tokens or a.tokens_file):
        ap.error("MODEL_DIR and --tokens/--tokens-file are required")
    FP32_ROPE = a.fp32_rope
    ids = parse_ids(a.tokens) if a.tokens else parse_ids(open(a.tokens_file).read())
    model, path = load_model(a.model_dir)
    mean_nll, count, logits = model.nll(ids)
    top = torch.topk(logits[-1], min(a.top, model.V))
    out = {
        "weights": path,
        "model_type": model.type,
        "layers": model.describe(),
        "n_tokens": len(ids),
        "count": count,
        "mean_nll": float(f"{mean_nll:.17g}"),
        "mean_nll_17g": f"{mean_nll:.17g}",
        "top_ids": [int(i) for i in top.indices],
        "top_logits": [float(x) for x in top.values],
    }
    if a.logits_out:
        write_logits(a.logits_out, logits[-1])
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
