#!/usr/bin/env python3
"""LFM2 / LFM2.5 (dense) in float64, written from the published model code (transformers'
models/lfm2/modeling_lfm2.py and configuration_lfm2.py), without importing it.

    x = embed_tokens[ids]
    per layer: x = x + mixer(operator_norm(x)); x = x + w2(silu(w1(h)) * w3(h)), h = ffn_norm(x)
      conv layer: B, C, xc = chunks of in_proj(h) (in that order); y = C * causal_conv(B * xc);
                  out_proj(y), the depthwise convolution of conv_L_cache taps (zeros before the
                  start), in_proj / conv / out_proj with biases when conv_bias
      attention:  q, k per head through RMSNorm (q_layernorm, k_layernorm), rotary over the whole
                  head (rotate_half), grouped kv heads, softmax(q k^T / sqrt(d)) v, out_proj
    logits = lm_head(embedding_norm(x))      (transformers' "embedding_norm" is the final norm)

Both config forms, read as transformers reads them: layer_types, else full_attn_idxs (neither:
every layer attention); block_ff_dim over intermediate_size; tie_embedding over
tie_word_embeddings (default true); rope_parameters' rope_theta, else rope_theta, else theta
(default 1e6); head_dim, else hidden_size / num_attention_heads; the MLP width int(2 I / 3), then
with a multiplier int(m * that) rounded up to block_multiple_of.

    reference.py MODEL_DIR --ids FILE            mean NLL and 16 greedy ids
    reference.py --self-test
    reference.py --check-expected tests/lfm2/expected.json
Run with Debian's torch: /usr/bin/python3.
"""

import json
import math
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
from pyref import parse_ids, read_safetensors  # noqa: E402

DT = torch.float64
LOGIT_POSITIONS = [0, 1, 17, 64, 200, 299]


def mlp_width(cfg):
    width = cfg.get("block_ff_dim", cfg.get("intermediate_size", 12288))
    if cfg.get("block_auto_adjust_ff_dim", True):
        width = int(2 * width / 3)
        mult = cfg.get("block_ffn_dim_multiplier", 1.0)
        if mult is not None:
            m = cfg.get("block_multiple_of", 256)
            width = int(mult * width)
            width = m * ((width + m - 1) // m)
    return width


def layer_types(cfg):
    n = cfg["num_hidden_layers"]
    if cfg.get("layer_types") is not None:
        return list(cfg["layer_types"])
    idx = cfg.get("full_attn_idxs")
    idx = list(range(n)) if idx is None else idx
    return ["full_attention" if i in idx else "conv" for i in range(n)]


def rope_theta(cfg):
    rp = cfg.get("rope_parameters")
    if isinstance(rp, dict) and "rope_theta" in rp:
        return float(rp["rope_theta"])
    return float(cfg.get("theta", cfg.get("rope_theta", 1000000.0)))


class Model:
    def __init__(self, cfg, sd):
        self.cfg = cfg
        self.D = cfg["hidden_size"]
        self.H = cfg["num_attention_heads"]
        self.Hkv = cfg["num_key_value_heads"]
        self.d = cfg.get("head_dim", self.D // self.H)
        self.eps = cfg.get("norm_eps", 1e-5)
        self.L = cfg.get("conv_L_cache", 3)
        self.bias = cfg.get("conv_bias", False)
        self.types = layer_types(cfg)
        self.theta = rope_theta(cfg)
        self.I = mlp_width(cfg)
        self.tied = cfg.get("tie_embedding", cfg.get("tie_word_embeddings", True))
        used = set()

        def take(name, shape):
            t = sd[name]
            if list(t.shape) != list(shape):
                raise ValueError(f"{name}: shape {list(t.shape)}, expected {list(shape)}")
            used.add(name)
            return t.to(DT)

        D, V, I, d = self.D, cfg["vocab_size"], self.I, self.d
        self.emb = take("model.embed_tokens.weight", [V, D])
        self.layers = []
        for i, kind in enumerate(self.types):
            p = f"model.layers.{i}."
            l = {"kind": kind, "op_norm": take(p + "operator_norm.weight", [D]),
                 "ffn_norm": take(p + "ffn_norm.weight", [D]),
                 "w1": take(p + "feed_forward.w1.weight", [I, D]),
                 "w3": take(p + "feed_forward.w3.weight", [I, D]),
                 "w2": take(p + "feed_forward.w2.weight", [D, I])}
            if kind == "full_attention":
                a = p + "self_attn."
                l.update(q=take(a + "q_proj.weight", [self.H * d, D]),
                         k=take(a + "k_proj.weight", [self.Hkv * d, D]),
                         v=take(a + "v_proj.weight", [self.Hkv * d, D]),
                         o=take(a + "out_proj.weight", [D, self.H * d]),
                         qn=take(a + "q_layernorm.weight", [d]),
                         kn=take(a + "k_layernorm.weight", [d]))
            elif kind == "conv":
                a = p + "conv."
                l.update(inp=take(a + "in_proj.weight", [3 * D, D]),
                         conv=take(a + "conv.weight", [D, 1, self.L])[:, 0, :],
                         out=take(a + "out_proj.weight", [D, D]))
                if self.bias:
                    l.update(inp_b=take(a + "in_proj.bias", [3 * D]),
                             conv_b=take(a + "conv.bias", [D]),
                             out_b=take(a + "out_proj.bias", [D]))
            else:
                raise ValueError(f"layer {i}: type {kind}")
            self.layers.append(l)
        self.final_norm = take("model.embedding_norm.weight", [D])
        if self.tied:
            self.head = self.emb
            used.add("lm_head.weight")  # a tied checkpoint may store it as well
        else:
            self.head = take("lm_head.weight", [V, D])
        extra = sorted(set(sd) - used)
        if extra:
            raise ValueError(f"unused tensors: {extra}")

    def rms(self, x, w):
        return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + self.eps) * w

    def conv(self, l, h):
        T, D = h.shape
        bcx = h @ l["inp"].T + (l["inp_b"] if self.bias else 0)
        B, C, x = bcx[:, :D], bcx[:, D:2 * D], bcx[:, 2 * D:]
        bx = B * x
        y = torch.zeros(T, D, dtype=DT)
        for j in range(self.L):  # tap j multiplies the input L-1-j tokens back
            back = self.L - 1 - j
            if back < T:
                y[back:] += l["conv"][:, j] * bx[:T - back]
        if self.bias:
            y = y + l["conv_b"]
        return (C * y) @ l["out"].T + (l["out_b"] if self.bias else 0)

    def rotary(self, x):
        T, d = x.shape[0], self.d
        inv = self.theta ** (-torch.arange(0, d, 2, dtype=DT) / d)
        ang = torch.arange(T, dtype=DT)[:, None] * inv[None, :]
        cos, sin = torch.cat([ang.cos()] * 2, -1), torch.cat([ang.sin()] * 2, -1)
        half = torch.cat([-x[..., d // 2:], x[..., :d // 2]], -1)
        return x * cos[:, None, :] + half * sin[:, None, :]

    def attention(self, l, h):
        T, d = h.shape[0], self.d
        q = self.rms((h @ l["q"].T).view(T, self.H, d), l["qn"])
        k = self.rms((h @ l["k"].T).view(T, self.Hkv, d), l["kn"])
        v = (h @ l["v"].T).view(T, self.Hkv, d)
        q, k = self.rotary(q), self.rotary(k)
        g = self.H // self.Hkv
        k, v = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
        s = torch.einsum("thd,shd->hts", q, k) / math.sqrt(d)
        s = s.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), 1), float("-inf"))
        o = torch.einsum("hts,shd->thd", torch.softmax(s, -1), v).reshape(T, self.H * d)
        return o @ l["o"].T

    def forward(self, ids):
        x = self.emb[torch.tensor(ids)]
        for l in self.layers:
            h = self.rms(x, l["op_norm"])
            x = x + (self.attention(l, h) if l["kind"] == "full_attention" else self.conv(l, h))
            h = self.rms(x, l["ffn_norm"])
            g = h @ l["w1"].T
            x = x + (g * torch.sigmoid(g) * (h @ l["w3"].T)) @ l["w2"].T
        return self.rms(x, self.final_norm) @ self.head.T


def load(model_dir):
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    if cfg.get("model_type") != "lfm2":
        raise ValueError(f"model_type {cfg.get('model_type')}")
    return Model(cfg, read_safetensors(os.path.join(model_dir, "model.safetensors")))


def evaluate(m, ids, n_greedy=16):
    logits = m.forward(ids)
    lp = torch.log_softmax(logits, -1)
    nll = -lp[torch.arange(len(ids) - 1), torch.tensor(ids[1:])]
    out = {"mean_nll": float(nll.mean()),
           "logits": {str(p): logits[p].tolist() for p in LOGIT_POSITIONS if p < len(ids)}}
    seq, greedy, margin = list(ids), [], float("inf")
    last = logits[-1]
    for _ in range(n_greedy):
        top = torch.topk(last, 2).values
        margin = min(margin, float(top[0] - top[1]))
        nxt = int(torch.argmax(last))
        greedy.append(nxt)
        seq.append(nxt)
        last = m.forward(seq)[-1]
    out["greedy_ids"], out["greedy_min_margin"] = greedy, margin
    return out


def self_test():
    # The MLP widths of published shapes: block_ff_dim 12288 -> 8192 (LFM2-1.2B), 6656 -> 4608
    # (the 350M models); an exact third; no multiplier: no rounding; no adjustment.
    base = {"block_auto_adjust_ff_dim": True, "block_ffn_dim_multiplier": 1.0, "block_multiple_of": 256}
    assert mlp_width(dict(base, block_ff_dim=12288)) == 8192
    assert mlp_width(dict(base, intermediate_size=6656)) == 4608
    assert mlp_width(dict(base, block_ff_dim=10752)) == 7168
    assert mlp_width(dict(base, intermediate_size=100, block_ffn_dim_multiplier=None)) == 66
    assert mlp_width(dict(base, intermediate_size=100, block_auto_adjust_ff_dim=False)) == 100
    assert layer_types({"num_hidden_layers": 3, "full_attn_idxs": None}) == ["full_attention"] * 3
    assert rope_theta({"rope_theta": 5.0, "rope_parameters": {"rope_theta": 7.0}}) == 7.0
    # The convolution is causal: a change at token t changes no output before t.
    torch.manual_seed(0)
    D, L = 8, 3
    m = Model.__new__(Model)
    m.D, m.L, m.bias = D, L, False
    l = {"inp": torch.randn(3 * D, D, dtype=DT), "conv": torch.randn(D, L, dtype=DT),
         "out": torch.randn(D, D, dtype=DT)}
    h = torch.randn(10, D, dtype=DT)
    h2 = h.clone()
    h2[6] += 1
    a, b = m.conv(l, h), m.conv(l, h2)
    assert torch.equal(a[:6], b[:6]) and not torch.equal(a[6], b[6])
    # ... and token t sees exactly L taps: tokens t - L + 1 .. t.
    h3 = h.clone()
    h3[3] += 1
    c = m.conv(l, h3)
    assert torch.equal(a[6:], c[6:]) and not torch.equal(a[5], c[5])
    print("lfm2 reference: self-test passed")


def check_expected(path):
    with open(path) as f:
        exp = json.load(f)
    base = os.path.dirname(os.path.abspath(path))
    ids = parse_ids(open(os.path.join(base, exp["prompt_file"])).read())
    bad = 0
    for name, want in exp["fixtures"].items():
        m = load(os.path.join(base, name))
        got = evaluate(m, ids, n_greedy=0)
        # The greedy ids in one causal pass over prompt + ids: each must be the argmax after the
        # ids before it (what 16 passes, one per id, would find).
        seq = ids + want["greedy_ids"]
        last = m.forward(seq)[len(ids) - 1:-1]
        greedy = [int(i) for i in torch.argmax(last, -1)]
        differ = [what for what, same in (("mean NLL", got["mean_nll"] == want["mean_nll"]),
                                          ("greedy ids", greedy == want["greedy_ids"]),
                                          ("logits", got["logits"] == want["logits"])) if not same]
        print(f"{name}: mean NLL {got['mean_nll']!r}, " +
              ("ok" if not differ else "DIFFERS from expected.json in: " + ", ".join(differ)))
        bad += bool(differ)
    if bad:
        sys.exit(f"{bad} fixture(s) differ from {path}")


def main(argv):
    if argv[:1] == ["--self-test"]:
        return self_test()
    if argv[:1] == ["--check-expected"]:
        return check_expected(argv[1])
    if len(argv) == 3 and argv[1] == "--ids":
        r = evaluate(load(argv[0]), parse_ids(open(argv[2]).read()))
        print(json.dumps({"mean_nll": r["mean_nll"], "greedy_ids": r["greedy_ids"]}))
        return None
    sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
