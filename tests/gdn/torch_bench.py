#!/usr/bin/env python3
"""Eager PyTorch on CPU at Qwen3.5-0.8B's and Qwen3.5-2B's text shapes, the way transformers
runs the model without fla's or causal-conv1d's kernels: the baseline for recur's benchmark.

  /usr/bin/python3 tests/gdn/torch_bench.py --shape 0.8b [--dtype bf16] [--prefill 512 --decode 64 --threads 1,2]
  /usr/bin/python3 tests/gdn/torch_bench.py --shape 2b --layers 4        (a quick look)
  /usr/bin/python3 tests/gdn/torch_bench.py --self-check   (its forward against reference.py)

Random weights (no file needed). The shapes are the text_config of the Hub's config.json files
as third-party readers quote them (we could not read the Hub itself here): 0.8B = 24 layers of
1024 (18 Gated DeltaNet + 6 gated attention, 3:1), MLP 3584; 2B = 24 layers of 2048, MLP 6144;
both: linear attention 16 key and 16 value heads of 128, conv kernel 4; attention 8 heads over 2
kv heads of 256, rotary on 64 dims (partial_rotary_factor 0.25), rope_theta 1e7; vocab 248320,
tied embeddings. Check them against the real config.json before quoting figures.

The arithmetic follows transformers' Qwen3_5 eager path: weights and activations in --dtype,
the delta rule in float32 (transformers casts q, k, v, beta and g to float32 there); prefill
runs the delta rule in chunks of 64 (the UT/WY form, as torch_chunk_gated_delta_rule) and the
attention as one masked softmax, logits for the last position only; decode steps one token at a
time (the recurrent form, a key/value cache), greedy, full logits each step. Prints JSON:
tokens/s per thread count, the parameter count, the weights' and the state's bytes.
"""

import argparse
import ctypes
import json
import math
import time

import torch
import torch.nn.functional as Fn

SHAPES = {
    "0.8b": dict(L=24, D=1024, I=3584, V=248320, Hk=16, Hv=16, dk=128, dv=128, K=4, H=8, KV=2, hd=256,
                 rot=64, theta=1e7, interval=4),
    "2b": dict(L=24, D=2048, I=6144, V=248320, Hk=16, Hv=16, dk=128, dv=128, K=4, H=8, KV=2, hd=256,
               rot=64, theta=1e7, interval=4),
}
EPS = 1e-6
CHUNK = 64


def is_full(s, i):
    return (i + 1) % s["interval"] == 0


def make_weights(s, g, dt):
    D, I, V = s["D"], s["I"], s["V"]
    kd, vd = s["Hk"] * s["dk"], s["Hv"] * s["dv"]
    H, KV, hd = s["H"], s["KV"], s["hd"]

    def r(*shape, std=1.0, mean=0.0):
        return (torch.randn(*shape, generator=g) * std + mean).to(dt)

    layers = []
    for i in range(s["L"]):
        d = {"in_norm": r(D, std=0.1), "mlp_norm": r(D, std=0.1),
             "gate": r(I, D, std=D ** -0.5), "up": r(I, D, std=D ** -0.5), "down": r(D, I, std=I ** -0.5)}
        if is_full(s, i):
            d.update(q=r(2 * H * hd, D, std=D ** -0.5), k=r(KV * hd, D, std=D ** -0.5),
                     v=r(KV * hd, D, std=D ** -0.5), o=r(D, H * hd, std=(H * hd) ** -0.5),
                     q_norm=r(hd, std=0.1), k_norm=r(hd, std=0.1))
        else:
            Hv = s["Hv"]
            dtv = torch.exp(torch.rand(Hv, generator=g) * (math.log(0.1) - math.log(1e-3)) + math.log(1e-3))
            d.update(qkv=r(2 * kd + vd, D, std=D ** -0.5), z=r(vd, D, std=D ** -0.5),
                     b=r(Hv, D, std=1.5 * D ** -0.5), a=r(Hv, D, std=0.5 * D ** -0.5),
                     conv=r(2 * kd + vd, s["K"], std=0.5),
                     A_log=(torch.rand(Hv, generator=g) * (math.log(16) - math.log(0.5)) + math.log(0.5)).to(dt),
                     dt_bias=(dtv + torch.log(-torch.expm1(-dtv))).to(dt),
                     norm=r(s["dv"], std=0.1, mean=1.0), out=r(D, vd, std=vd ** -0.5))
        layers.append(d)
    return {"emb": r(V, D), "norm": r(D, std=0.1), "layers": layers}


def new_state(s, dt):
    st = []
    for i in range(s["L"]):
        if is_full(s, i):
            st.append({"k": torch.zeros(1, s["KV"], 0, s["hd"], dtype=dt), "v": torch.zeros(1, s["KV"], 0, s["hd"], dtype=dt),
                       "pos": 0})
        else:
            C = 2 * s["Hk"] * s["dk"] + s["Hv"] * s["dv"]
            st.append({"conv": torch.zeros(s["K"] - 1, C, dtype=dt),
                       "S": torch.zeros(s["Hv"], s["dk"], s["dv"], dtype=torch.float32)})
    return st


def norm_zc(x, w):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS) * (1.0 + w.float())).to(x.dtype)


def chunked_rule(q, k, v, g, beta, S):
    """q, k [H, T, dk] (normalised, q scaled), v [H, T, dv], g, beta [H, T], S [H, dk, dv], all
    float32: the delta rule in chunks of 64 (the UT transform within a chunk, the state between)."""
    H, T, _ = q.shape
    out = torch.empty(H, T, v.shape[2])
    for a in range(0, T, CHUNK):
        b = min(T, a + CHUNK)
        n = b - a
        qc, kc, vc, bc = q[:, a:b], k[:, a:b], v[:, a:b], beta[:, a:b]
        c = torch.cumsum(g[:, a:b], dim=1)
        mask = torch.tril(torch.ones(n, n, dtype=torch.bool))
        dec = torch.exp((c[:, :, None] - c[:, None, :]).masked_fill(~mask, -math.inf))
        A = (bc[:, :, None] * dec * (kc @ kc.transpose(1, 2))).tril(-1)
        rhs = bc[:, :, None] * (vc - torch.exp(c)[:, :, None] * (kc @ S))
        U = torch.linalg.solve_triangular(torch.eye(n) + A, rhs, upper=False, unitriangular=True)
        out[:, a:b] = torch.exp(c)[:, :, None] * (qc @ S) + (dec * (qc @ kc.transpose(1, 2))) @ U
        S = torch.exp(c[:, -1])[:, None, None] * S + (kc * torch.exp(c[:, -1:] - c)[:, :, None]).transpose(1, 2) @ U
    return out, S


def step_rule(q, k, v, g, beta, S):
    """One token: q, k [H, dk], v [H, dv], g, beta [H] (float32)."""
    S = S * torch.exp(g)[:, None, None]
    u = beta[:, None] * (v - torch.einsum("hk,hkv->hv", k, S))
    S = S + k[:, :, None] * u[:, None, :]
    return torch.einsum("hk,hkv->hv", q, S), S


def gdn(s, d, x, st):
    T = x.shape[0]
    Hk, Hv, dk, dv, K = s["Hk"], s["Hv"], s["dk"], s["dv"], s["K"]
    kd = Hk * dk
    u = Fn.linear(x, d["qkv"])
    full = torch.cat([st["conv"], u], dim=0)
    st["conv"] = full[-(K - 1):].clone()
    u = Fn.silu(Fn.conv1d(full.T[None], d["conv"][:, None, :], groups=full.shape[1])[0].T)
    q = u[:, :kd].reshape(T, Hk, dk).float()
    k = u[:, kd:2 * kd].reshape(T, Hk, dk).float()
    v = u[:, 2 * kd:].reshape(T, Hv, dv).float()
    q = q * torch.rsqrt((q * q).sum(-1, keepdim=True) + 1e-6) * dk ** -0.5
    k = k * torch.rsqrt((k * k).sum(-1, keepdim=True) + 1e-6)
    if Hv != Hk:
        q, k = q.repeat_interleave(Hv // Hk, dim=1), k.repeat_interleave(Hv // Hk, dim=1)
    beta = torch.sigmoid(Fn.linear(x, d["b"]).float())
    g = -torch.exp(d["A_log"].float()) * Fn.softplus(Fn.linear(x, d["a"]).float() + d["dt_bias"].float())
    if T == 1:
        o, st["S"] = step_rule(q[0], k[0], v[0], g[0], beta[0], st["S"])
        o = o[None]
    else:
        o, st["S"] = chunked_rule(q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), g.T, beta.T, st["S"])
        o = o.transpose(0, 1)
    o = o * torch.rsqrt(o.pow(2).mean(-1, keepdim=True) + EPS) * d["norm"].float()
    o = (o * Fn.silu(Fn.linear(x, d["z"]).reshape(T, Hv, dv).float())).to(x.dtype)
    return Fn.linear(o.reshape(T, Hv * dv), d["out"])


def rope(x, pos, s):
    rot = s["rot"]
    inv = 1.0 / (s["theta"] ** (torch.arange(0, rot, 2, dtype=torch.float32) / rot))
    ang = pos.float()[:, None] * inv[None, :]
    cos, sin = torch.cat([ang.cos()] * 2, -1).to(x.dtype), torch.cat([ang.sin()] * 2, -1).to(x.dtype)
    xr, xp = x[..., :rot], x[..., rot:]
    half = torch.cat([-xr[..., rot // 2:], xr[..., :rot // 2]], dim=-1)
    return torch.cat([xr * cos + half * sin, xp], dim=-1)


def attention(s, d, x, st):
    T = x.shape[0]
    H, KV, hd = s["H"], s["KV"], s["hd"]
    qg = Fn.linear(x, d["q"]).view(T, H, 2 * hd)
    q, gate = qg[..., :hd], qg[..., hd:].reshape(T, H * hd)
    q = norm_zc(q, d["q_norm"]).transpose(0, 1)[None]                       # [1, H, T, hd]
    k = norm_zc(Fn.linear(x, d["k"]).view(T, KV, hd), d["k_norm"]).transpose(0, 1)[None]
    v = Fn.linear(x, d["v"]).view(T, KV, hd).transpose(0, 1)[None]
    pos = torch.arange(T) + st["pos"]
    q, k = rope(q, pos, s), rope(k, pos, s)
    st["k"], st["v"] = torch.cat([st["k"], k], dim=2), torch.cat([st["v"], v], dim=2)
    kk = st["k"].repeat_interleave(H // KV, dim=1)
    vv = st["v"].repeat_interleave(H // KV, dim=1)
    sc = (q @ kk.transpose(2, 3)) * hd ** -0.5
    if T > 1:
        n = kk.shape[2]
        vis = torch.arange(n)[None, :] <= (torch.arange(T) + st["pos"])[:, None]
        sc = sc.masked_fill(~vis, -math.inf)
    st["pos"] += T
    o = (torch.softmax(sc.float(), dim=-1).to(x.dtype) @ vv)[0].transpose(0, 1).reshape(T, H * hd)
    return Fn.linear(o * torch.sigmoid(gate), d["o"])


def forward(s, W, ids, st, all_logits=False):
    x = W["emb"][ids]
    for i, d in enumerate(W["layers"]):
        h = norm_zc(x, d["in_norm"])
        x = x + (attention if is_full(s, i) else gdn)(s, d, h, st[i])
        h = norm_zc(x, d["mlp_norm"])
        x = x + Fn.linear(Fn.silu(Fn.linear(h, d["gate"])) * Fn.linear(h, d["up"]), d["down"])
    x = norm_zc(x if all_logits else x[-1:], W["norm"])
    return Fn.linear(x, W["emb"])


def self_check():
    """This benchmark's forward (float32) against reference.py (float64) at a tiny shape with
    70 prompt ids (two chunks, the second partial): the last logits after the prefill and after
    5 decode steps, within 1e-5 relative."""
    import os
    import sys
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, here)
    import make_model
    import reference
    s = dict(L=4, D=64, I=96, V=300, Hk=2, Hv=4, dk=16, dv=16, K=4, H=2, KV=1, hd=32, rot=8, theta=1e7, interval=4)
    spec = {"kind": "qwen35", "layers": "LLLF", "multimodal": False, "extras": False, "tie": True,
            "Hk": 2, "Hv": 4, "dk": 16, "dv": 16, "heads": 2, "kv_heads": 1, "head_dim": 32,
            "intermediate": 96, "gain": 2.0, "seed": 8}
    cfg, w = make_model.build(spec)
    ref = reference.build_model(cfg, w)
    W = {"emb": w["model.embed_tokens.weight"], "norm": w["model.norm.weight"], "layers": []}
    for i in range(4):
        p = f"model.layers.{i}."
        d = {"in_norm": w[p + "input_layernorm.weight"], "mlp_norm": w[p + "post_attention_layernorm.weight"],
             "gate": w[p + "mlp.gate_proj.weight"], "up": w[p + "mlp.up_proj.weight"], "down": w[p + "mlp.down_proj.weight"]}
        if is_full(s, i):
            a = p + "self_attn."
            d.update({n: w[a + f"{n}_proj.weight"] for n in "qkvo"})
            d.update(q_norm=w[a + "q_norm.weight"], k_norm=w[a + "k_norm.weight"])
        else:
            a = p + "linear_attn."
            d.update(qkv=w[a + "in_proj_qkv.weight"], z=w[a + "in_proj_z.weight"], b=w[a + "in_proj_b.weight"],
                     a=w[a + "in_proj_a.weight"], conv=w[a + "conv1d.weight"][:, 0, :], A_log=w[a + "A_log"],
                     dt_bias=w[a + "dt_bias"], norm=w[a + "norm.weight"], out=w[a + "out_proj.weight"])
        W["layers"].append(d)
    ids = [int(t) for t in torch.randint(0, 300, (70,), generator=torch.Generator().manual_seed(6))]
    st = new_state(s, torch.float32)
    ours = [forward(s, W, torch.tensor(ids), st)[-1]]
    lg, rst = ref.forward(ids)
    refs = [lg[-1]]
    tok = int(ours[-1].argmax())
    for _ in range(5):
        ours.append(forward(s, W, torch.tensor([tok]), st)[-1])
        lg, rst = ref.forward([tok], rst)
        refs.append(lg[-1])
        tok = int(ours[-1].argmax())
    err = max(float((o.double() - r).abs().max() / r.abs().max()) for o, r in zip(ours, refs))
    print(f"torch_bench forward (float32) against reference.py (float64): {err:.3g} "
          f"({'ok' if err < 1e-5 else 'FAIL'}, tolerance 1e-5)")
    return 0 if err < 1e-5 else 1


def blas_library():
    try:
        with open("/proc/self/maps") as f:
            return sorted({line.split()[-1] for line in f if "blas" in line.lower() and ".so" in line})
    except OSError:
        return []


def set_threads(n):
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
    ap.add_argument("--shape", choices=sorted(SHAPES), default="0.8b")
    ap.add_argument("--dtype", choices=["f32", "bf16"], default="f32")
    ap.add_argument("--prefill", type=int, default=512)
    ap.add_argument("--decode", type=int, default=64)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--repeats", type=int, default=1, help="timed runs per measurement (best kept)")
    ap.add_argument("--layers", type=int, default=0, help="fewer layers for a quick look (0: the model's)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--self-check", action="store_true", help="compare with reference.py at a tiny shape")
    a = ap.parse_args()
    if a.self_check:
        raise SystemExit(self_check())
    s = dict(SHAPES[a.shape])
    if a.layers:
        s["L"] = a.layers
    dt = torch.float32 if a.dtype == "f32" else torch.bfloat16
    g = torch.Generator().manual_seed(a.seed)
    t0 = time.perf_counter()
    W = make_weights(s, g, dt)
    tensors = [W["emb"], W["norm"]] + [t for d in W["layers"] for t in d.values()]
    ids = torch.randint(0, s["V"], (a.prefill,), generator=g)
    n_lin = sum(not is_full(s, i) for i in range(s["L"]))
    conv_ch = 2 * s["Hk"] * s["dk"] + s["Hv"] * s["dv"]
    out = {"torch": torch.__version__, "blas": blas_library(), "shape": a.shape, "dtype": a.dtype, "config": s,
           "params": sum(t.numel() for t in tensors),
           "weight_bytes": sum(t.numel() * t.element_size() for t in tensors),
           "init_s": round(time.perf_counter() - t0, 2),
           "recurrent_state_bytes": n_lin * (s["Hv"] * s["dk"] * s["dv"] * 4 + (s["K"] - 1) * conv_ch * torch.finfo(dt).bits // 8),
           "kv_cache_bytes_per_token": (s["L"] - n_lin) * 2 * s["KV"] * s["hd"] * torch.finfo(dt).bits // 8,
           "prefill_tokens": a.prefill, "decode_tokens": a.decode, "runs": []}
    with torch.inference_mode():
        for nt in [int(x) for x in a.threads.split(",")]:
            set_threads(nt)
            forward(s, W, ids[:8], new_state(s, dt))  # warm-up
            best_p, best_d = math.inf, math.inf
            for _ in range(a.repeats):
                st = new_state(s, dt)
                t = time.perf_counter()
                logits = forward(s, W, ids, st)
                best_p = min(best_p, time.perf_counter() - t)
                tok = int(logits[-1].argmax())
                t = time.perf_counter()
                for _ in range(a.decode):
                    tok = int(forward(s, W, torch.tensor([tok]), st)[-1].argmax())
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
