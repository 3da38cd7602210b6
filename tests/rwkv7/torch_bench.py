#!/usr/bin/env python3
"""Eager PyTorch on CPU at RWKV-7's published 0.4B and 1.5B shapes, the way a user without
BlinkDL's CUDA kernels runs the model: the baseline for recur's benchmark (issue 34).

  /usr/bin/python3 tests/rwkv7/torch_bench.py --shape 0.4b [--dtype bf16] [--prefill 512 --decode 64 --threads 1,2]
  /usr/bin/python3 tests/rwkv7/torch_bench.py --shape 1.5b --layers 2     (a quick look)
  /usr/bin/python3 tests/rwkv7/torch_bench.py --self-check   (its forward against reference.py)

Random weights (no file needed). Shapes as BlinkDL publishes them (docs/rwkv7.md): 0.4B = 24
layers of 1024, 1.5B = 24 of 2048, head size 64, FFN 4x, vocab 65,536, LoRA ranks w/a/v/g
64/64/32/128 (0.4B) and 96/96/64/256 (1.5B).

The arithmetic is BlinkDL's demos' (rwkv_v7_demo_fast.py without its CUDA kernel): weights and
activations in --dtype (float32, or bfloat16 as published), the decay and the state S in
float32. Prefill is GPT mode: every projection, LoRA and the channel mix batched over the
prompt, the state update walked token by token (the demo's "cuda-free method"), logits for the
last position only. Decode: one token at a time, greedy, full logits each step. Prints JSON:
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
    "0.4b": dict(L=24, C=1024, N=64, F=4096, V=65536, ranks=(64, 64, 32, 128)),
    "1.5b": dict(L=24, C=2048, N=64, F=8192, V=65536, ranks=(96, 96, 64, 256)),
}
E05 = math.exp(-0.5)


def make_weights(s, g, dt):
    C, F, V = s["C"], s["F"], s["V"]
    H = C // s["N"]
    rw, ra, rv, rg = s["ranks"]

    def r(*shape, std=1.0, mean=0.0):
        return (torch.randn(*shape, generator=g) * std + mean).to(dt)

    def u(*shape, lo=0.0, hi=1.0):
        return (torch.rand(*shape, generator=g) * (hi - lo) + lo).to(dt)

    layers = []
    for i in range(s["L"]):
        d = {n: (r(C, std=0.1, mean=1.0), r(C, std=0.1)) for n in ("ln1", "ln2", "lnx")}
        d.update({n: u(C) for n in ("x_r", "x_w", "x_k", "x_v", "x_a", "x_g", "ffn_x_k")})
        d["w0"] = u(C, lo=-6.0, hi=1.5).float()      # kept float32, as the RNN demo does
        d["w1"], d["w2"] = r(C, rw, std=C ** -0.5), r(rw, C, std=0.5 * rw ** -0.5)
        d["a0"], d["a1"], d["a2"] = r(C, std=0.7), r(C, ra, std=C ** -0.5), r(ra, C, std=0.5 * ra ** -0.5)
        d["v0"], d["v1"], d["v2"] = r(C, std=0.5, mean=0.5), r(C, rv, std=C ** -0.5), r(rv, C, std=0.5 * rv ** -0.5)
        d["g1"], d["g2"] = r(C, rg, std=C ** -0.5), r(rg, C, std=1.5 * rg ** -0.5)
        d["k_k"], d["k_a"], d["r_k"] = u(C, lo=0.5, hi=0.9), u(C, lo=0.8, hi=1.2), r(H, s["N"], std=0.2)
        # [in, out], as rwkv_v7_demo_fast.py transposes them on load (x @ W)
        for n in ("Wr", "Wk", "Wv", "Wo"):
            d[n] = r(C, C, std=C ** -0.5)
        d["ffn_Wk"], d["ffn_Wv"] = r(C, F, std=C ** -0.5), r(F, C, std=0.5 * F ** -0.5)
        layers.append(d)
    emb = r(V, C)
    return {"emb": emb, "layers": layers, "ln_out": (r(C, std=0.1, mean=1.0), r(C, std=0.1)),
            "head": r(C, V, std=3.0 * C ** -0.5)}


def new_state(s, dt):
    C, N = s["C"], s["N"]
    return [{"att_x": torch.zeros(C, dtype=dt), "S": torch.zeros(C // N, N, N),
             "ffn_x": torch.zeros(C, dtype=dt)} for _ in range(s["L"])]


def ln(x, wb):
    return Fn.layer_norm(x, (x.shape[-1],), wb[0], wb[1], eps=1e-5)


def time_mix(i, d, x, st, v_first, N):
    T, C = x.shape
    H = C // N
    xx = torch.cat([st["att_x"].unsqueeze(0), x[:-1]]) - x
    st["att_x"] = x[-1].clone()
    xr, xw, xk, xv, xa, xg = (x + xx * d[n] for n in ("x_r", "x_w", "x_k", "x_v", "x_a", "x_g"))
    r, k, v = xr @ d["Wr"], xk @ d["Wk"], xv @ d["Wv"]
    w = torch.exp(-E05 * torch.sigmoid(d["w0"] + (torch.tanh(xw @ d["w1"]) @ d["w2"]).float()))
    a = torch.sigmoid(d["a0"] + (xa @ d["a1"]) @ d["a2"])
    g = torch.sigmoid(xg @ d["g1"]) @ d["g2"]
    kk = Fn.normalize((k * d["k_k"]).view(T, H, N), dim=-1, p=2.0).view(T, C)
    k = k * (1 + (a - 1) * d["k_a"])
    if i == 0:
        v_first = v
    else:
        v = v + (v_first - v) * torch.sigmoid(d["v0"] + (xv @ d["v1"]) @ d["v2"])
    S = st["S"]
    y = torch.empty(T, H, N)
    rf, kf, vf, kkf, kaf = r.float(), k.float(), v.float(), kk.float(), (kk * a).float()
    for t in range(T):
        ab = (-kkf[t]).view(H, N, 1) @ kaf[t].view(H, 1, N)
        S = S * w[t].view(H, 1, N) + S @ ab + vf[t].view(H, N, 1) @ kf[t].view(H, 1, N)
        y[t] = (S @ rf[t].view(H, N, 1)).view(H, N)
    st["S"] = S
    o = Fn.group_norm(y.view(T, C).to(x.dtype), H, d["lnx"][0], d["lnx"][1], eps=64e-5)
    o = o + ((r * k * d["r_k"].view(C)).view(T, H, N).sum(-1, keepdim=True) * v.view(T, H, N)).view(T, C)
    return (o * g) @ d["Wo"], v_first


def forward(W, ids, st, N):
    x = W["emb"][ids]                  # ln0 is folded into the embedding (the RNN demo does so)
    v_first = None
    for i, d in enumerate(W["layers"]):
        dx, v_first = time_mix(i, d, ln(x, d["ln1"]), st[i], v_first, N)
        x = x + dx
        h = ln(x, d["ln2"])
        hh = torch.cat([st[i]["ffn_x"].unsqueeze(0), h[:-1]]) - h
        st[i]["ffn_x"] = h[-1].clone()
        x = x + torch.relu((h + hh * d["ffn_x_k"]) @ d["ffn_Wk"]) ** 2 @ d["ffn_Wv"]
    return ln(x[-1], W["ln_out"]) @ W["head"]


def self_check():
    """This benchmark's forward (float32) against reference.py (float64) at a tiny shape: the
    last logits after a 40-token prefill and after 5 decode steps, within 1e-5 relative."""
    import os
    import sys
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, here)
    import reference
    s = dict(L=2, C=128, N=32, F=256, V=300, ranks=(8, 8, 4, 16))
    W = make_weights(s, torch.Generator().manual_seed(5), torch.float32)
    m = reference.Model()
    m.layout, m.n_layer, m.n_embd, m.n_head, m.head_size = "pth", s["L"], s["C"], s["C"] // s["N"], s["N"]
    m.vocab, m.ffn, m.ranks = s["V"], s["F"], dict(zip("wavg", s["ranks"]))
    m.rules = reference.Rules(reference.BLINK_LN_EPS, reference.BLINK_LNX_EPS, "blink")
    f64 = lambda t: t.double()  # noqa: E731
    m.emb, m.ln0 = f64(W["emb"]), None            # the benchmark folds ln0 into the embedding
    m.ln_out, m.head = tuple(map(f64, W["ln_out"])), f64(W["head"]).T.contiguous()
    for i, d in enumerate(W["layers"]):
        e = {k: (tuple(map(f64, v)) if isinstance(v, tuple) else f64(v)) for k, v in d.items()}
        for n in ("Wr", "Wk", "Wv", "Wo", "ffn_Wk", "ffn_Wv"):
            e[n] = e[n].T.contiguous()             # reference.py keeps [out, in]
        if i == 0:
            e["v0"] = e["v1"] = e["v2"] = None
        m.layers.append(e)
    ids = [int(t) for t in torch.randint(0, s["V"], (40,), generator=torch.Generator().manual_seed(6))]
    st = new_state(s, torch.float32)
    ours = [forward(W, torch.tensor(ids), st, s["N"])]
    ref_logits, ref_st = reference.forward(m, ids)
    refs = [ref_logits[-1]]
    tok = int(ours[-1].argmax())
    for _ in range(5):
        ours.append(forward(W, torch.tensor([tok]), st, s["N"]))
        lg, ref_st = reference.forward(m, [tok], ref_st)
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
    ap.add_argument("--shape", choices=sorted(SHAPES), default="0.4b")
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
    tensors = [W["emb"], W["head"], *W["ln_out"]]
    for d in W["layers"]:
        tensors += [t for v in d.values() for t in (v if isinstance(v, tuple) else (v,))]
    n_params = sum(t.numel() for t in tensors)
    ids = torch.randint(0, s["V"], (a.prefill,), generator=g)
    C, N = s["C"], s["N"]
    out = {"torch": torch.__version__, "blas": blas_library(), "shape": a.shape, "dtype": a.dtype,
           "config": {k: (list(v) if isinstance(v, tuple) else v) for k, v in s.items()},
           "params": n_params, "weight_bytes": sum(t.numel() * t.element_size() for t in tensors),
           "init_s": round(time.perf_counter() - t0, 2),
           "state_bytes": s["L"] * (2 * C * torch.finfo(dt).bits // 8 + C * N * 4),
           "prefill_tokens": a.prefill, "decode_tokens": a.decode, "runs": []}
    with torch.inference_mode():
        for nt in [int(x) for x in a.threads.split(",")]:
            set_threads(nt)
            forward(W, ids[:8], new_state(s, dt), N)  # warm-up
            best_p, best_d = math.inf, math.inf
            for _ in range(a.repeats):
                st = new_state(s, dt)
                t = time.perf_counter()
                logits = forward(W, ids, st, N)
                best_p = min(best_p, time.perf_counter() - t)
                tok = int(logits.argmax())
                t = time.perf_counter()
                for _ in range(a.decode):
                    tok = int(forward(W, torch.tensor([tok]), st, N).argmax())
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
