#!/usr/bin/env python3
"""Float64 reference of HazyResearch's Based language model (based-360m / based-1b layout).

Written from /work/notes/based_spec.md (our own code, not HazyResearch's). It is an oracle, not
fast: every mixer runs in its parallel (quadratic) form over the whole sequence, in torch.float64.

  python3 tests/based/reference.py MODEL_DIR --tokens 1,2,3 [--logits-out F.npy|F.txt]
  python3 tests/based/reference.py MODEL_DIR --tokens-file ids.txt
  python3 tests/based/reference.py --self-test

Output (JSON on stdout): mean_nll over the n-1 predictions of tokens[1:] from tokens[:-1]; the
log-softmax is taken over the real vocabulary only (logits[:vocab_size]); ids vocab_size..V_pad-1
of the padded embedding are masked (-inf) and never part of the normaliser.

Needs torch (Debian's python3-torch: /usr/bin/python3) and numpy only for .npy output.
"""

import argparse
import json
import math
import os
import re
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from pyref import linear, parse_ids, read_safetensors, rms_norm, silu, write_logits  # noqa: E402

DT = torch.float64

# --------------------------------------------------------------------------------------------
# Loading

def load_state_dict(model_dir):
    """Loads pytorch_model.bin if present, else model.safetensors. Returns (dict, filename)."""
    binp = os.path.join(model_dir, "pytorch_model.bin")
    stp = os.path.join(model_dir, "model.safetensors")
    if os.path.isfile(model_dir):
        path = model_dir
    elif os.path.exists(binp):
        path = binp
    elif os.path.exists(stp):
        path = stp
    else:
        raise FileNotFoundError(f"no pytorch_model.bin or model.safetensors in {model_dir}")
    if path.endswith(".safetensors"):
        sd = read_safetensors(path)
    else:
        try:
            sd = torch.load(path, map_location="cpu", weights_only=True)
        except TypeError:  # torch < 1.13 has no weights_only
            sd = torch.load(path, map_location="cpu")
    return sd, path


def clean_state_dict(sd):
    """Loader rule: strip an optional leading 'model.', drop keys containing 'metrics'."""
    out = {}
    for k, v in sd.items():
        if "metrics" in k:
            continue
        k = re.sub(r"^model\.", "", k)
        out[k] = v
    emb = "transformer.embeddings.word_embeddings.weight"
    if emb not in out and "lm_head.weight" in out:
        out[emb] = out["lm_head.weight"]
    if "lm_head.weight" not in out and emb in out:
        out["lm_head.weight"] = out[emb]
    return out


class Based:
    """The model: float64 copies of the weights plus the shape facts read from config.json."""

    def __init__(self, config, sd):
        c = config
        self.config = c
        sd = clean_state_dict(sd)
        self.w = {k: v.to(DT) for k, v in sd.items()}
        w = self.w
        E = w["transformer.embeddings.word_embeddings.weight"]
        self.V_pad, self.D = E.shape
        self.vocab_size = int(c.get("vocab_size", 50257))
        mult = int(c.get("pad_vocab_size_multiple", 1))  # HazyResearch's getattr default
        want = math.ceil(self.vocab_size / mult) * mult
        if want != self.V_pad:
            raise ValueError(f"embedding has {self.V_pad} rows, config gives {want}")
        if "lm_head.weight" in sd and not torch.equal(w["lm_head.weight"], E):
            raise ValueError("lm_head.weight differs from the embedding (must be tied)")
        if int(c["n_embd"]) != self.D:
            raise ValueError("n_embd does not match the embedding")
        self.n_layer = int(c["n_layer"])
        self.eps = float(c.get("layer_norm_epsilon", 1e-5))
        la = set(c.get("alt_mixer_layers") or [])
        swa = set(c.get("alt_mixer_2_layers") or [])
        am = c.get("alt_mixer") or {}
        am2 = c.get("alt_mixer_2") or {}
        self.la_heads = int(am.get("num_heads", 16))
        self.la_F = int(am.get("feature_dim", 16))
        self.la_input_dim = int((am.get("feature_map") or {}).get("input_dim", self.la_F))
        self.swa_heads = int(c["n_head"])  # sliding_window_additions: num_heads = n_head
        self.window_size = int(am2.get("window_size", 128))
        self.rope_base = float(c.get("rotary_emb_base", 10000.0))
        # HazyResearch: rotary_emb_dim = int(getattr(config, "rotary_emb_fraction", 0.0) * dh).
        self.rope_fraction = float(c.get("rotary_emb_fraction", 0.0))
        if "rotary_emb_fraction" not in c:
            print("warning: config has no rotary_emb_fraction; HazyResearch's default 0.0 means "
                  "no rotary in the window layers", file=sys.stderr)
        self.kinds = []
        for i in range(self.n_layer):
            p = f"transformer.layers.{i}.mixer."
            if i in swa:
                kind = "swa"
                need = p + "Wqkv.weight"
            elif i in la:
                kind = "la"
                need = p + "proj_q.weight"
            else:
                kind = "conv"
                need = p + "in_proj.weight"
            if need not in w:
                raise ValueError(f"layer {i} ({kind}) has no {need}")
            self.kinds.append(kind)
        self._check_shapes()

    def _check_shapes(self):
        w, D = self.w, self.D
        for i, kind in enumerate(self.kinds):
            p = f"transformer.layers.{i}."
            Hm = w[p + "mlp.fc2.weight"].shape[1]
            # GatedMlp builds roundup(n_inner, 256); candle uses n_inner. Both are accepted.
            n_inner = self.config.get("n_inner") or int(8 * D / 3)
            assert Hm in (n_inner, (n_inner + 255) // 256 * 256), (p, Hm, n_inner)
            assert w[p + "mlp.fc1.weight"].shape == (2 * Hm, D), p
            assert w[p + "mlp.fc2.weight"].shape == (D, Hm), p
            assert w[p + "norm1.weight"].shape == (D,) and w[p + "norm2.weight"].shape == (D,)
            m = p + "mixer."
            if kind == "conv":
                Di = w[m + "conv.conv.weight"].shape[0]
                assert w[m + "in_proj.weight"].shape == (2 * Di, D), m
                assert w[m + "out_proj.weight"].shape == (D, Di), m
                assert w[m + "conv.conv.weight"].shape[1] == 1, m
            elif kind == "la":
                HF = self.la_heads * self.la_F
                assert w[m + "proj_q.weight"].shape == (HF, D), m
                assert w[m + "proj_k.weight"].shape == (HF, D), m
                assert w[m + "proj_v.weight"].shape == (D, D), m
                assert w[m + "out_proj.weight"].shape == (D, D), m
                assert D % self.la_heads == 0
            else:
                assert w[m + "Wqkv.weight"].shape == (3 * D, D), m
                assert w[m + "out_proj.weight"].shape == (D, D), m
                assert D % self.swa_heads == 0

    # ----------------------------------------------------------------------------------------
    def forward(self, ids):
        """Logits [T, V_pad] (float64) for a 1-D list of token ids; ids >= vocab_size are -inf."""
        w = self.w
        ids = torch.as_tensor(ids, dtype=torch.long)
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= self.vocab_size):
            raise ValueError("token id out of range")
        x = w["transformer.embeddings.word_embeddings.weight"][ids]  # [T, D] residual (float64)
        for i, kind in enumerate(self.kinds):
            p = f"transformer.layers.{i}."
            h = rms_norm(x, w[p + "norm1.weight"], self.eps)
            m = p + "mixer."
            if kind == "conv":
                h = base_conv(h, w[m + "in_proj.weight"], w.get(m + "in_proj.bias"),
                              w[m + "conv.conv.weight"], w.get(m + "conv.conv.bias"),
                              w[m + "out_proj.weight"], w.get(m + "out_proj.bias"))
            elif kind == "la":
                h = taylor_linear_attention(h, w[m + "proj_q.weight"], w[m + "proj_k.weight"],
                                            w[m + "proj_v.weight"], w[m + "out_proj.weight"],
                                            self.la_heads, self.la_F, self.la_input_dim)
            else:
                h = sliding_window_attention(h, w[m + "Wqkv.weight"], w[m + "out_proj.weight"],
                                             self.swa_heads, self.window_size, self.rope_base,
                                             self.rope_fraction)
            x = x + h
            h = rms_norm(x, w[p + "norm2.weight"], self.eps)
            x = x + swiglu_mlp(h, w[p + "mlp.fc1.weight"], w[p + "mlp.fc2.weight"])
        h = rms_norm(x, w["transformer.ln_f.weight"], self.eps)
        logits = h @ w["lm_head.weight"].T
        logits[:, self.vocab_size:] = -math.inf
        return logits

    def nll(self, ids):
        """(mean NLL over the n-1 predictions, count, logits). log_softmax over logits[:vocab]."""
        logits = self.forward(ids)
        ids_t = torch.as_tensor(ids, dtype=torch.long)
        if len(ids) < 2:
            return float("nan"), 0, logits
        lp = torch.log_softmax(logits[:-1, :self.vocab_size], dim=-1)
        tgt = ids_t[1:]
        nll = -lp[torch.arange(len(tgt)), tgt]
        return float(nll.mean()), int(len(tgt)), logits


    # ----------------------------------------------------------------------------------------
    def decode_logits(self, ids):
        """The same model run one token at a time with recurrent state, as a decoder would:
        Taylor (S, z) running sums, the last K-1 conv inputs, a ring of window//2+1 rotated keys
        and values. Returns logits [T, V_pad]; used by the self-test against forward()."""
        w = self.w
        state = [None] * self.n_layer
        rows = []
        for t, tok in enumerate(ids):
            x = w["transformer.embeddings.word_embeddings.weight"][tok][None]  # [1, D]
            for i, kind in enumerate(self.kinds):
                p = f"transformer.layers.{i}."
                m = p + "mixer."
                h = rms_norm(x, w[p + "norm1.weight"], self.eps)
                if kind == "conv":
                    cw = w[m + "conv.conv.weight"]
                    Di, K = cw.shape[0], cw.shape[2]
                    if state[i] is None:
                        state[i] = torch.zeros(K, Di, dtype=DT)  # oldest first
                    u = linear(h, w[m + "in_proj.weight"], w.get(m + "in_proj.bias"))[0]
                    st = torch.cat([state[i][1:], u[None, :Di]], dim=0)
                    state[i] = st
                    c = (st * cw[:, 0, :].T).sum(0)
                    if w.get(m + "conv.conv.bias") is not None:
                        c = c + w[m + "conv.conv.bias"]
                    h = linear((silu(c) * u[Di:])[None], w[m + "out_proj.weight"],
                               w.get(m + "out_proj.bias"))
                elif kind == "la":
                    H, F, D = self.la_heads, self.la_F, self.D
                    dh = D // H
                    fq = taylor_feature_map(linear(h, w[m + "proj_q.weight"]).view(H, F), self.la_input_dim)
                    fk = taylor_feature_map(linear(h, w[m + "proj_k.weight"]).view(H, F), self.la_input_dim)
                    v = linear(h, w[m + "proj_v.weight"]).view(H, dh)
                    if state[i] is None:
                        Fe = fq.shape[-1]
                        state[i] = (torch.zeros(H, dh, Fe, dtype=DT), torch.zeros(H, Fe, dtype=DT))
                    S, z = state[i]
                    S = S + v[:, :, None] * fk[:, None, :]
                    z = z + fk
                    state[i] = (S, z)
                    y = (S * fq[:, None, :]).sum(-1) / ((z * fq).sum(-1, keepdim=True) + LA_EPS)
                    h = linear(y.reshape(1, D), w[m + "out_proj.weight"])
                else:
                    H, D = self.swa_heads, self.D
                    dh = D // H
                    n = self.window_size // 2 + 1
                    qkv = linear(h, w[m + "Wqkv.weight"]).view(3, H, dh)
                    rot = int(self.rope_fraction * dh)
                    pos = torch.tensor([t])
                    q = rope(qkv[0][:, None], pos, self.rope_base, rot)[:, 0]
                    k = rope(qkv[1][:, None], pos, self.rope_base, rot)[:, 0]
                    if state[i] is None:
                        state[i] = (torch.zeros(H, n, dh, dtype=DT), torch.zeros(H, n, dh, dtype=DT))
                    rk, rv = state[i]
                    rk[:, t % n] = k
                    rv[:, t % n] = qkv[2]
                    valid = min(t + 1, n)
                    slots = [(t - a) % n for a in range(valid - 1, -1, -1)]  # oldest first
                    s = (rk[:, slots] @ q[:, :, None]).squeeze(-1) * dh ** -0.5
                    ctx = (torch.softmax(s, dim=-1)[:, :, None] * rv[:, slots]).sum(1)
                    h = linear(ctx.reshape(1, D), w[m + "out_proj.weight"])
                x = x + h
                h = rms_norm(x, w[p + "norm2.weight"], self.eps)
                x = x + swiglu_mlp(h, w[p + "mlp.fc1.weight"], w[p + "mlp.fc2.weight"])
            h = rms_norm(x, w["transformer.ln_f.weight"], self.eps)
            rows.append((h @ w["lm_head.weight"].T)[0])
        logits = torch.stack(rows)
        logits[:, self.vocab_size:] = -math.inf
        return logits


def load_model(model_dir, weights=None):
    cfg_dir = model_dir if os.path.isdir(model_dir) else os.path.dirname(model_dir)
    with open(os.path.join(cfg_dir, "config.json")) as f:
        config = json.load(f)
    sd, path = load_state_dict(weights or model_dir)
    return Based(config, sd), path


# --------------------------------------------------------------------------------------------
# Layers (float64, whole sequence, x: [T, D])

def swiglu_mlp(x, fc1, fc2):
    Hm = fc2.shape[1]
    y = linear(x, fc1)
    value, gate = y[..., :Hm], y[..., Hm:]
    return linear(value * silu(gate), fc2)


def causal_depthwise_conv(u, weight, bias=None):
    """u [T, C]; weight [C, 1, K] (PyTorch Conv1d tap order, tap K-1 = current input); zeros
    before the start. c[t] = sum_k weight[:, 0, k] * u[t - (K-1) + k]."""
    T, C = u.shape
    K = weight.shape[2]
    padded = torch.cat([torch.zeros(K - 1, C, dtype=u.dtype), u], dim=0)
    out = torch.zeros_like(u)
    for k in range(K):
        out = out + padded[k:k + T] * weight[:, 0, k]
    if bias is not None:
        out = out + bias
    return out


def base_conv(x, in_w, in_b, conv_w, conv_b, out_w, out_b):
    Di = conv_w.shape[0]
    u = linear(x, in_w, in_b)
    u1, u2 = u[:, :Di], u[:, Di:]
    c = causal_depthwise_conv(u1, conv_w, conv_b)
    return linear(silu(c) * u2, out_w, out_b)


def taylor_feature_map(x, input_dim):
    """x [..., F] -> [1, x/sqrt(sqrt(d)), vec(x x^T)/(sqrt(2) sqrt(d))], d = input_dim; length
    1 + F + F*F, outer product full and row-major."""
    rd = math.sqrt(input_dim)
    rrd = math.sqrt(rd)
    outer = (x.unsqueeze(-1) * x.unsqueeze(-2)).flatten(start_dim=-2)
    one = torch.ones(x.shape[:-1] + (1,), dtype=x.dtype)
    return torch.cat([one, x / rrd, outer / (math.sqrt(2.0) * rd)], dim=-1)


LA_EPS = 1e-12


def taylor_attention_core(q, k, v, input_dim):
    """Parallel form. q, k [H, T, F]; v [H, T, dh] -> y [H, T, dh]."""
    fq = taylor_feature_map(q, input_dim)
    fk = taylor_feature_map(k, input_dim)
    T = q.shape[1]
    A = fq @ fk.transpose(-1, -2)  # [H, T, T]
    A = A * torch.tril(torch.ones(T, T, dtype=A.dtype))
    num = A @ v
    den = A.sum(dim=-1, keepdim=True)  # = phi(q_i) . sum_{j<=i} phi(k_j)
    return num / (den + LA_EPS)


def taylor_linear_attention(x, Wq, Wk, Wv, Wo, H, F, input_dim):
    T, D = x.shape
    dh = D // H
    q = linear(x, Wq).view(T, H, F).transpose(0, 1)
    k = linear(x, Wk).view(T, H, F).transpose(0, 1)
    v = linear(x, Wv).view(T, H, dh).transpose(0, 1)
    y = taylor_attention_core(q, k, v, input_dim)  # [H, T, dh]
    return linear(y.transpose(0, 1).reshape(T, D), Wo)


def rope(x, positions, base, rot_dim):
    """NeoX half layout over the first rot_dim dims. x [H, T, dh]; angles in float64."""
    if rot_dim == 0:
        return x
    half = rot_dim // 2
    inv_freq = 1.0 / (base ** (torch.arange(0, half, dtype=DT) * 2.0 / rot_dim))
    theta = positions.to(DT)[:, None] * inv_freq[None, :]  # [T, half]
    cos, sin = torch.cos(theta), torch.sin(theta)
    x1, x2 = x[..., :half], x[..., half:rot_dim]
    r = torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)
    return torch.cat([r, x[..., rot_dim:]], dim=-1)


def window_attention_core(q, k, v, left):
    """q, k, v [H, T, dh] (already rotated). Key j visible to query i iff i-left <= j <= i."""
    T, dh = q.shape[1], q.shape[2]
    s = (q @ k.transpose(-1, -2)) * (dh ** -0.5)
    i = torch.arange(T)[:, None]
    j = torch.arange(T)[None, :]
    visible = (j <= i) & (j >= i - left)
    s = s.masked_fill(~visible, -math.inf)
    return torch.softmax(s, dim=-1) @ v


def sliding_window_attention(x, Wqkv, Wo, H, window_size, base, fraction, offset=0):
    T, D = x.shape
    dh = D // H
    qkv = linear(x, Wqkv).view(T, 3, H, dh)
    q, k, v = (qkv[:, n].transpose(0, 1) for n in range(3))
    pos = torch.arange(offset, offset + T)
    rot = int(fraction * dh)
    q, k = rope(q, pos, base, rot), rope(k, pos, base, rot)
    ctx = window_attention_core(q, k, v, window_size // 2)
    return linear(ctx.transpose(0, 1).reshape(T, D), Wo)


# --------------------------------------------------------------------------------------------
# Self-test: parallel forms against recurrent / looped ones


def _taylor_recurrent(q, k, v, input_dim):
    H, T, F = q.shape
    dh = v.shape[2]
    Fe = 1 + F + F * F
    S = torch.zeros(H, dh, Fe, dtype=DT)
    z = torch.zeros(H, Fe, dtype=DT)
    out = torch.zeros(H, T, dh, dtype=DT)
    for t in range(T):
        fq = taylor_feature_map(q[:, t], input_dim)
        fk = taylor_feature_map(k[:, t], input_dim)
        S = S + v[:, t, :, None] * fk[:, None, :]   # add the current token before reading
        z = z + fk
        num = (S * fq[:, None, :]).sum(-1)
        den = (z * fq).sum(-1, keepdim=True)
        out[:, t] = num / (den + LA_EPS)
    return out


def _window_ring(q, k, v, left):
    H, T, dh = q.shape
    n = left + 1
    ring_k = torch.zeros(H, n, dh, dtype=DT)
    ring_v = torch.zeros(H, n, v.shape[2], dtype=DT)
    out = torch.zeros(H, T, v.shape[2], dtype=DT)
    for t in range(T):
        ring_k[:, t % n] = k[:, t]
        ring_v[:, t % n] = v[:, t]
        valid = min(t + 1, n)
        slots = [(t - a) % n for a in range(valid)]  # newest .. oldest
        K, Vv = ring_k[:, slots], ring_v[:, slots]
        s = (K @ q[:, t, :, None]).squeeze(-1) * dh ** -0.5
        p = torch.softmax(s, dim=-1)
        out[:, t] = (p[:, :, None] * Vv).sum(1)
    return out


def _conv_loop(u, weight, bias):
    T, C = u.shape
    K = weight.shape[2]
    out = torch.zeros_like(u)
    for t in range(T):
        for ch in range(C):
            acc = 0.0 if bias is None else float(bias[ch])
            for kk in range(K):
                src = t - (K - 1) + kk
                if src >= 0:
                    acc += float(weight[ch, 0, kk]) * float(u[src, ch])
            out[t, ch] = acc
    return out


def self_test():
    g = torch.Generator().manual_seed(1234)
    results = {}
    H, T, F, dh = 3, 40, 8, 5
    q = torch.randn(H, T, F, generator=g, dtype=DT)
    k = torch.randn(H, T, F, generator=g, dtype=DT)
    v = torch.randn(H, T, dh, generator=g, dtype=DT)
    par = taylor_attention_core(q, k, v, F)
    rec = _taylor_recurrent(q, k, v, F)
    err = float((par - rec).abs().max() / rec.abs().max().clamp(min=1.0))
    results["taylor_parallel_vs_recurrent_max_err"] = err
    # kernel identity phi(q).phi(k) = 1 + s + s^2/2, s = q.k/sqrt(d)
    s = (q * k).sum(-1) / math.sqrt(F)
    kern = (taylor_feature_map(q, F) * taylor_feature_map(k, F)).sum(-1)
    results["taylor_kernel_identity_max_err"] = float(
        ((kern - (1 + s + s * s / 2)).abs() / kern.abs()).max())
    for left in (0, 3, 8, 64):
        qq = rope(q[..., :4].repeat(1, 1, 2), torch.arange(T), 10000.0, 8)
        kk = rope(k[..., :4].repeat(1, 1, 2), torch.arange(T), 10000.0, 8)
        par = window_attention_core(qq, kk, v, left)
        ring = _window_ring(qq, kk, v, left)
        results[f"window_band_vs_ring_left{left}_max_err"] = float((par - ring).abs().max())
    # rope preserves norms and relative positions
    x = torch.randn(2, T, 8, generator=g, dtype=DT)
    rx = rope(x, torch.arange(T), 10000.0, 8)
    results["rope_norm_err"] = float((rx.norm(dim=-1) - x.norm(dim=-1)).abs().max())
    u = torch.randn(T, 6, generator=g, dtype=DT)
    cw = torch.randn(6, 1, 3, generator=g, dtype=DT)
    cb = torch.randn(6, generator=g, dtype=DT)
    for name, b in (("nobias", None), ("bias", cb)):
        ref = _conv_loop(u, cw, b)
        results[f"conv_vs_loop_{name}_max_err"] = float(
            (causal_depthwise_conv(u, cw, b) - ref).abs().max())
    # torch's own Conv1d (padding K-1, first T outputs) agrees on tap order
    tconv = torch.nn.functional.conv1d(u.T[None], cw, cb, padding=2, groups=6)[0, :, :T].T
    results["conv_vs_torch_conv1d_max_err"] = float((causal_depthwise_conv(u, cw, cb) - tconv).abs().max())
    # whole model: parallel forward == token-by-token recurrent decode (random tiny model with
    # a padded vocabulary, a conv bias, every mixer kind, sequences longer than the window)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import make_model
    cfg, w32 = make_model.build(["--d-model", "32", "--layers", "6", "--heads", "2",
                                 "--la-heads", "4", "--feature-dim", "4", "--window-size", "10",
                                 "--vocab", "93", "--conv-bias", "--seed", "7"])
    model = Based(cfg, {"model." + k: v for k, v in w32.items()})
    ids = torch.randint(0, 93, (37,), generator=g).tolist()
    par = model.forward(ids)[:, :93]
    rec = model.decode_logits(ids)[:, :93]
    results["model_parallel_vs_decode_max_err"] = float((par - rec).abs().max() / par.abs().max())
    tol = 1e-12
    ok = all(v <= tol for v in results.values())
    results["tolerance"] = tol
    results["ok"] = ok
    return results


# --------------------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model_dir", nargs="?")
    ap.add_argument("--tokens", help="comma/space separated ids")
    ap.add_argument("--tokens-file", help="file of ids separated by whitespace or commas")
    ap.add_argument("--weights", help="weights file to use instead of the directory's default "
                    "(pytorch_model.bin first, then model.safetensors)")
    ap.add_argument("--logits-out", help="write the last position's logits over the real "
                    "vocabulary (vocab_size float64 values; .npy, else text, one per line)")
    ap.add_argument("--top", type=int, default=5, help="top-k of the last logits to print")
    ap.add_argument("--self-test", action="store_true")
    a = ap.parse_args()
    if a.self_test:
        r = self_test()
        print(json.dumps(r, indent=1))
        sys.exit(0 if r["ok"] else 1)
    if not a.model_dir or not (a.tokens or a.tokens_file):
        ap.error("MODEL_DIR and --tokens/--tokens-file are required")
    ids = parse_ids(a.tokens) if a.tokens else parse_ids(open(a.tokens_file).read())
    model, path = load_model(a.model_dir, a.weights)
    mean_nll, count, logits = model.nll(ids)
    last = logits[-1, :model.vocab_size]
    top = torch.topk(last, min(a.top, model.vocab_size))
    out = {
        "weights": path,
        "n_tokens": len(ids),
        "count": count,
        "mean_nll": float(f"{mean_nll:.17g}"),
        "mean_nll_17g": f"{mean_nll:.17g}",
        "top_ids": [int(i) for i in top.indices],
        "top_logits": [float(x) for x in top.values],
        "layers": "".join({"conv": "C", "la": "L", "swa": "W"}[k] for k in model.kinds),
    }
    if a.logits_out:
        write_logits(a.logits_out, last)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
