#!/usr/bin/env python3
"""Eager PyTorch on CPU at gla-1.3B-100B's or hgrn2-1.3B-100B's exact shape, the way a user
without fla's Triton kernels would run these models: the baseline for recur's benchmark.

  /usr/bin/python3 tests/fla/torch_bench.py --model gla   [--prefill 512 --decode 64 --threads 1,2]
  /usr/bin/python3 tests/fla/torch_bench.py --model hgrn2 [--dtype bf16] [--form recurrent]

Random weights (no file needed; ~5.5 GB in float32, 2.7 GB in bf16). Shapes as the hub's
config.json gives them (docs/fla-models.md): GLA D 2048, 24 layers, 4 heads, key 1024 (dk 256),
value 2048 (dv 512), output gate, MLP 5632, vocab 32000, untied; HGRN2 D 2048, 24 layers,
expand_ratio 128 (16 heads of 128 x 128), lower bounds, MLP 5632, vocab 32000, untied.

Prefill: one forward over the prompt, logits for the last position only, and the decode state
built from it. --form chunk (default) runs the decayed recurrence in chunks of --chunk tokens:
within a chunk the quadratic form with the decay products exp(b_t - b_s) taken pairwise (stable:
every exponent is <= 0), between chunks the state; --form recurrent walks token by token as
fla's naive_recurrent_gla does. Decode: one token at a time, greedy, from that state, full
logits each step. Weights and arithmetic in --dtype (float32: what transformers loads by
default; bf16: the published dtype). Prints JSON.
"""

import argparse
import ctypes
import json
import math
import time

import torch
import torch.nn.functional as Fn

SHAPES = {
    "gla": dict(D=2048, layers=24, heads=4, key=1024, value=2048, inter=5632, vocab=32000),
    "hgrn2": dict(D=2048, layers=24, heads=16, key=2048, value=2048, inter=5632, vocab=32000),
}


def make_weights(a, g, dt):
    s = a.shape
    D, K, Vd, I = s["D"], s["key"], s["value"], s["inter"]

    def r(*shape, std=1.0, mean=0.0):
        return (torch.randn(*shape, generator=g) * std + mean).to(dt)

    layers = []
    for _ in range(s["layers"]):
        L = {"n1": r(D, std=0.1, mean=1.0), "n2": r(D, std=0.1, mean=1.0),
             "gate": r(I, D, std=D ** -0.5), "up": r(I, D, std=D ** -0.5), "down": r(D, I, std=I ** -0.5),
             "q": r(K, D, std=D ** -0.5), "o": r(D, Vd, std=Vd ** -0.5)}
        if a.model == "gla":
            L.update(k=r(K, D, std=D ** -0.5), v=r(Vd, D, std=D ** -0.5), g=r(Vd, D, std=D ** -0.5),
                     gk1=r(16, D, std=D ** -0.5), gk2=r(K, 16, std=0.5), gkb=r(K, std=2.0, mean=1.0),
                     gnorm=r(Vd // s["heads"], std=0.1, mean=1.0))
        else:
            L.update(f=r(K, D, std=2 * D ** -0.5), i=r(D, D, std=D ** -0.5), gnorm=r(D, std=0.1, mean=1.0))
        layers.append(L)
    E = r(s["vocab"], D)
    head = r(s["vocab"], D, std=D ** -0.5)
    lnf = r(D, std=0.1, mean=2.0)
    lower = None
    if a.model == "hgrn2":
        p = torch.softmax(torch.randn(s["layers"], D, generator=g), dim=0)
        lower = (p.cumsum(0) - p[0]).to(dt)
    return E, head, lnf, lower, layers


def rms(x, w, eps=1e-6):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def gates(a, W, li, L, h):
    """(q, k, v, log_a) for a layer: [T, H, dk], [T, H, dk], [T, H, dv], [T, H, dk]."""
    s = a.shape
    T, H = h.shape[0], s["heads"]
    dk, dv = s["key"] // H, s["value"] // H
    if a.model == "gla":
        q, k, v = Fn.linear(h, L["q"]), Fn.linear(h, L["k"]), Fn.linear(h, L["v"])
        log_a = Fn.logsigmoid(Fn.linear(Fn.linear(h, L["gk1"]), L["gk2"], L["gkb"])) / 16
        q = q * dk ** -0.5
    else:
        q, f, v = Fn.silu(Fn.linear(h, L["q"])), Fn.linear(h, L["f"]), Fn.linear(h, L["i"])
        log_a = Fn.logsigmoid(f)
        if li > 0:
            lb = W[3][li]
            log_a = torch.logaddexp(lb.log(), torch.log1p(-lb) + log_a)
        k = 1 - log_a.exp()
        q = q * dk ** -0.5
    return (q.view(T, H, dk), k.view(T, H, dk), v.view(T, H, dv), log_a.view(T, H, dk))


def out_proj(a, L, h, o):
    """o [T, H, dv] -> the layer's output [T, D]."""
    T = o.shape[0]
    if a.model == "gla":
        o = rms(o, L["gnorm"]) * Fn.silu(Fn.linear(h, L["g"]).view(o.shape))
        return Fn.linear(o.reshape(T, -1), L["o"])
    return Fn.linear(rms(o.reshape(T, -1), L["gnorm"]), L["o"])


def recurrence_chunked(q, k, v, log_a, S, C):
    """S [H, dk, dv] in and out; o [T, H, dv]."""
    T = q.shape[0]
    outs = []
    for c0 in range(0, T, C):
        qc, kc, vc = q[c0:c0 + C].transpose(0, 1), k[c0:c0 + C].transpose(0, 1), v[c0:c0 + C].transpose(0, 1)
        b = log_a[c0:c0 + C].transpose(0, 1).cumsum(1)                 # [H, C, dk]
        n = qc.shape[1]
        o = (qc * b.exp()) @ S                                          # the chunks before
        diff = b[:, :, None, :] - b[:, None, :, :]                      # [H, t, s, dk]
        mask = torch.tril(torch.ones(n, n, dtype=torch.bool))
        diff = diff.masked_fill(~mask[None, :, :, None], float("-inf"))
        A = torch.einsum("htc,hsc,htsc->hts", qc, kc, diff.exp())
        o = o + A @ vc
        last = b[:, -1:, :]                                             # [H, 1, dk]
        S = S * last.transpose(1, 2).exp() + (kc * (last - b).exp()).transpose(1, 2) @ vc
        outs.append(o.transpose(0, 1))
    return torch.cat(outs, 0), S


def recurrence_stepwise(q, k, v, log_a, S):
    outs = []
    for t in range(q.shape[0]):
        S = S * log_a[t].exp()[:, :, None] + k[t][:, :, None] * v[t][:, None, :]
        outs.append((q[t][:, :, None] * S).sum(1))
    return torch.stack(outs), S


def forward(a, W, ids, states, last_only):
    E, head, lnf, _, layers = W
    x = E[ids]
    for li, L in enumerate(layers):
        h = rms(x, L["n1"])
        q, k, v, log_a = gates(a, W, li, L, h)
        if a.form == "chunk" and len(ids) > 1:
            o, states[li] = recurrence_chunked(q, k, v, log_a, states[li], a.chunk)
        else:
            o, states[li] = recurrence_stepwise(q, k, v, log_a, states[li])
        x = x + out_proj(a, L, h, o)
        h = rms(x, L["n2"])
        x = x + Fn.linear(Fn.silu(Fn.linear(h, L["gate"])) * Fn.linear(h, L["up"]), L["down"])
    if last_only:
        x = x[-1:]
    return Fn.linear(rms(x, lnf), head)[-1]


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
    ap.add_argument("--model", choices=sorted(SHAPES), default="gla")
    ap.add_argument("--dtype", choices=["f32", "bf16"], default="f32")
    ap.add_argument("--form", choices=["chunk", "recurrent"], default="chunk")
    ap.add_argument("--chunk", type=int, default=64)
    ap.add_argument("--prefill", type=int, default=512)
    ap.add_argument("--decode", type=int, default=64)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--repeats", type=int, default=1, help="timed runs per measurement (best kept)")
    ap.add_argument("--layers", type=int, default=0, help="fewer layers for a quick look (0: the model's)")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    a.shape = dict(SHAPES[a.model])
    if a.layers:
        a.shape["layers"] = a.layers
    dt = torch.float32 if a.dtype == "f32" else torch.bfloat16
    g = torch.Generator().manual_seed(a.seed)
    t0 = time.perf_counter()
    W = make_weights(a, g, dt)
    s = a.shape
    H, dk, dv = s["heads"], s["key"] // s["heads"], s["value"] // s["heads"]
    n_params = W[0].numel() + W[1].numel() + W[2].numel() + sum(t.numel() for L in W[4] for t in L.values())
    ids = torch.randint(0, s["vocab"], (a.prefill,), generator=g)
    out = {"torch": torch.__version__, "blas": blas_library(), "model": a.model, "dtype": a.dtype,
           "form": a.form, "chunk": a.chunk if a.form == "chunk" else None, "params": n_params,
           "init_s": round(time.perf_counter() - t0, 2), "shape": s,
           "state_bytes": s["layers"] * H * dk * dv * torch.finfo(dt).bits // 8,
           "prefill_tokens": a.prefill, "decode_tokens": a.decode, "runs": []}
    with torch.inference_mode():
        for nt in [int(x) for x in a.threads.split(",")]:
            set_threads(nt)
            fresh = lambda: [torch.zeros(H, dk, dv, dtype=dt) for _ in range(s["layers"])]  # noqa: E731
            forward(a, W, ids[:8], fresh(), True)  # warm-up
            best_p, best_d = math.inf, math.inf
            for _ in range(a.repeats):
                states = fresh()
                t = time.perf_counter()
                logits = forward(a, W, ids, states, True)
                best_p = min(best_p, time.perf_counter() - t)
                tok = int(logits.argmax())
                t = time.perf_counter()
                for _ in range(a.decode):
                    tok = int(forward(a, W, torch.tensor([tok]), states, False).argmax())
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
