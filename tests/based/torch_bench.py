#!/usr/bin/env python3
"""Float32 eager PyTorch baseline for Based on CPU, the way a user would run it.

  /usr/bin/python3 tests/based/torch_bench.py [--prefill 512 --decode 64 --threads 1,2]

Random weights at based-360m's exact shape by default (no file needed; ~1.45 GB of float32).
Prefill: one parallel forward over the prompt (Taylor attention in its quadratic feature-map form,
conv as a depthwise Conv1d, the window as a banded causal softmax), logits for the last position
only, and the decode state built from it. Decode: one token at a time, greedy, from that state:
Taylor kv_state [H, dh, 273] / k_state [H, 273], conv state of the last 3 inputs, window KV cache
trimmed to window_size//2 + 1 rotated keys, full logits every step. Prints JSON.
"""

import argparse
import ctypes
import json
import math
import time

import torch
import torch.nn.functional as Fn

F32 = torch.float32


def make_weights(a, g):
    D, Di, Hm, V = a.d_model, 2 * a.d_model, a.n_inner, a.padded_vocab
    HF = a.la_heads * a.feature_dim

    def r(*s, std):
        return torch.randn(*s, generator=g, dtype=F32) * std

    layers = []
    for i in range(a.layers):
        L = {"kind": "swa" if i in a.swa else "la" if i in a.la else "conv",
             "n1": 1 + r(D, std=0.1), "n2": 1 + r(D, std=0.1),
             "fc1": r(2 * Hm, D, std=D ** -0.5), "fc2": r(D, Hm, std=Hm ** -0.5)}
        if L["kind"] == "conv":
            L.update(in_w=r(2 * Di, D, std=D ** -0.5), in_b=r(2 * Di, std=0.1),
                     conv=r(Di, 1, 3, std=0.3), out_w=r(D, Di, std=Di ** -0.5), out_b=r(D, std=0.1))
        elif L["kind"] == "la":
            L.update(q=r(HF, D, std=D ** -0.5), k=r(HF, D, std=D ** -0.5),
                     v=r(D, D, std=D ** -0.5), o=r(D, D, std=D ** -0.5))
        else:
            L.update(qkv=r(3 * D, D, std=D ** -0.5), o=r(D, D, std=D ** -0.5))
        layers.append(L)
    E = r(V, D, std=1.0)
    lnf = (1 + r(D, std=0.1)) * (2 / math.sqrt(D))
    return E, lnf, layers


def rms(x, w, eps=1e-5):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def taylor(x, input_dim):
    rd = math.sqrt(input_dim)
    x2 = (x.unsqueeze(-1) * x.unsqueeze(-2)).flatten(start_dim=-2) / math.sqrt(2)
    return torch.cat([torch.ones_like(x[..., :1]), x / math.sqrt(rd), x2 / rd], dim=-1)


def rope_tables(a, positions):
    dh = a.d_model // a.heads
    inv = 1.0 / (a.rope_base ** (torch.arange(0, dh, 2, dtype=F32) / dh))
    th = positions.to(F32)[:, None] * inv[None]
    return torch.cos(th), torch.sin(th)


def rope(x, cos, sin):  # x [..., T, dh]; NeoX halves
    h = x.shape[-1] // 2
    x1, x2 = x[..., :h], x[..., h:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


def prefill(a, W, ids):
    E, lnf, layers = W
    T, D = len(ids), a.d_model
    H, F, dh = a.la_heads, a.feature_dim, D // a.la_heads
    Hs, dhs = a.heads, D // a.heads
    n_ring = a.window_size // 2 + 1
    cos, sin = rope_tables(a, torch.arange(T))
    i = torch.arange(T)[:, None]
    j = torch.arange(T)[None]
    band = (j <= i) & (j >= i - a.window_size // 2)
    causal = torch.tril(torch.ones(T, T, dtype=F32))
    x = E[ids]
    states = []
    for L in layers:
        h = rms(x, L["n1"])
        if L["kind"] == "conv":
            u = Fn.linear(h, L["in_w"], L["in_b"])
            u1, u2 = u.split(2 * D, dim=-1)
            c = Fn.conv1d(u1.T[None], L["conv"], padding=2, groups=2 * D)[0, :, :T].T
            h = Fn.linear(Fn.silu(c) * u2, L["out_w"], L["out_b"])
            st = torch.zeros(2 * D, 3)
            k = min(3, T)
            st[:, -k:] = u1[-k:].T
            states.append(st)
        elif L["kind"] == "la":
            q = taylor(Fn.linear(h, L["q"]).view(T, H, F).transpose(0, 1), F)
            k = taylor(Fn.linear(h, L["k"]).view(T, H, F).transpose(0, 1), F)
            v = Fn.linear(h, L["v"]).view(T, H, dh).transpose(0, 1)
            A = (q @ k.transpose(1, 2)) * causal
            y = (A @ v) / (A.sum(-1, keepdim=True) + 1e-12)
            h = Fn.linear(y.transpose(0, 1).reshape(T, D), L["o"])
            states.append((torch.einsum("htf,htd->hdf", k, v), k.sum(1)))
        else:
            q, k, v = Fn.linear(h, L["qkv"]).view(T, 3, Hs, dhs).permute(1, 2, 0, 3)
            q, k = rope(q, cos, sin), rope(k, cos, sin)
            s = (q @ k.transpose(1, 2)) * dhs ** -0.5
            p = torch.softmax(s.masked_fill(~band, float("-inf")), dim=-1)
            h = Fn.linear((p @ v).transpose(0, 1).reshape(T, D), L["o"])
            states.append([k[:, -n_ring:].clone(), v[:, -n_ring:].clone()])
        x = x + h
        g = Fn.linear(rms(x, L["n2"]), L["fc1"])
        x = x + Fn.linear(g[:, :a.n_inner] * Fn.silu(g[:, a.n_inner:]), L["fc2"])
    logits = Fn.linear(rms(x[-1:], lnf), E)[0]
    logits[a.vocab:] = float("-inf")
    return logits, states


def decode_step(a, W, states, tok, pos):
    E, lnf, layers = W
    D = a.d_model
    H, F, dh = a.la_heads, a.feature_dim, D // a.la_heads
    Hs, dhs = a.heads, D // a.heads
    n_ring = a.window_size // 2 + 1
    cos, sin = rope_tables(a, torch.tensor([pos]))
    x = E[tok][None]
    for li, L in enumerate(layers):
        h = rms(x, L["n1"])
        if L["kind"] == "conv":
            u = Fn.linear(h, L["in_w"], L["in_b"])[0]
            st = states[li]
            st = torch.roll(st, -1, dims=-1)
            st[:, -1] = u[:2 * D]
            states[li] = st
            c = (st * L["conv"][:, 0]).sum(-1)
            h = Fn.linear((Fn.silu(c) * u[2 * D:])[None], L["out_w"], L["out_b"])
        elif L["kind"] == "la":
            q = taylor(Fn.linear(h, L["q"]).view(H, F), F)
            k = taylor(Fn.linear(h, L["k"]).view(H, F), F)
            v = Fn.linear(h, L["v"]).view(H, dh)
            kv, ks = states[li]
            kv += v[:, :, None] * k[:, None, :]
            ks += k
            y = (kv * q[:, None]).sum(-1) / ((ks * q).sum(-1, keepdim=True) + 1e-12)
            h = Fn.linear(y.reshape(1, D), L["o"])
        else:
            q, k, v = Fn.linear(h, L["qkv"]).view(3, Hs, 1, dhs)
            q, k = rope(q, cos, sin), rope(k, cos, sin)
            kc, vc = states[li]
            kc = torch.cat([kc, k], dim=1)[:, -n_ring:]   # cache trimmed to the window
            vc = torch.cat([vc, v], dim=1)[:, -n_ring:]
            states[li] = [kc, vc]
            p = torch.softmax((q @ kc.transpose(1, 2)) * dhs ** -0.5, dim=-1)
            h = Fn.linear((p @ vc).reshape(1, D), L["o"])
        x = x + h
        g = Fn.linear(rms(x, L["n2"]), L["fc1"])
        x = x + Fn.linear(g[:, :a.n_inner] * Fn.silu(g[:, a.n_inner:]), L["fc2"])
    logits = Fn.linear(rms(x, lnf), E)[0]
    logits[a.vocab:] = float("-inf")
    return logits


def blas_library():
    """Path of the BLAS the process loaded (Debian's torch links libblas.so.3, which is the
    netlib reference BLAS unless OpenBLAS/BLIS is installed as the alternative)."""
    try:
        with open("/proc/self/maps") as f:
            libs = {line.split()[-1] for line in f if "blas" in line.lower() and ".so" in line}
        return sorted(libs)
    except OSError:
        return []


def set_threads(n):
    """torch.set_num_threads, and the same for OpenBLAS if that is the loaded BLAS (torch built
    with BLAS=generic does not pass its thread count on)."""
    torch.set_num_threads(n)
    for lib in blas_library():
        try:
            fn = getattr(ctypes.CDLL(lib), "openblas_set_num_threads", None)
        except OSError:
            fn = None
        if fn is not None:
            fn(n)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prefill", type=int, default=512, help="prompt tokens (parallel forward)")
    ap.add_argument("--decode", type=int, default=64, help="tokens decoded one at a time")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--repeats", type=int, default=1, help="timed runs per measurement (best kept)")
    ap.add_argument("--d-model", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=27)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--la-heads", type=int, default=16)
    ap.add_argument("--feature-dim", type=int, default=16)
    ap.add_argument("--window-size", type=int, default=256)
    ap.add_argument("--n-inner", type=int, default=2048)
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--la-layers", default="1,6,11,16,21")
    ap.add_argument("--swa-layers", default="2,7,12,17,22")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    a.la = {int(x) for x in a.la_layers.split(",") if x}
    a.swa = {int(x) for x in a.swa_layers.split(",") if x}
    a.padded_vocab = (a.vocab + 7) // 8 * 8
    a.rope_base = 10000.0
    g = torch.Generator().manual_seed(a.seed)
    t0 = time.perf_counter()
    W = make_weights(a, g)
    n_params = W[0].numel() + W[1].numel() + sum(
        t.numel() for L in W[2] for t in L.values() if isinstance(t, torch.Tensor))
    ids = torch.randint(0, a.vocab, (a.prefill,), generator=g)
    out = {"torch": torch.__version__, "blas": blas_library(), "dtype": "float32", "params": n_params,
           "init_s": round(time.perf_counter() - t0, 2),
           "shape": {k: getattr(a, k) for k in ("d_model", "layers", "heads", "la_heads",
                                                 "feature_dim", "window_size", "n_inner", "vocab")},
           "prefill_tokens": a.prefill, "decode_tokens": a.decode, "runs": []}
    with torch.inference_mode():
        for nt in [int(x) for x in a.threads.split(",")]:
            set_threads(nt)
            prefill(a, W, ids[:min(16, a.prefill)])  # warm-up
            best_p, best_d = math.inf, math.inf
            for _ in range(a.repeats):
                t = time.perf_counter()
                logits, states = prefill(a, W, ids)
                best_p = min(best_p, time.perf_counter() - t)
                tok, pos = int(logits.argmax()), a.prefill
                t = time.perf_counter()
                for _ in range(a.decode):
                    logits = decode_step(a, W, states, tok, pos)
                    tok, pos = int(logits.argmax()), pos + 1
                best_d = min(best_d, time.perf_counter() - t)
            out["runs"].append({
                "threads": nt,
                "prefill_s": round(best_p, 4),
                "prefill_tok_per_s": round(a.prefill / best_p, 2),
                "decode_s": round(best_d, 4),
                "decode_tok_per_s": round(a.decode / best_d, 2) if a.decode else None,
                "decode_ms_per_tok": round(1000 * best_d / a.decode, 2) if a.decode else None,
            })
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
