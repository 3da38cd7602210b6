#!/usr/bin/env python3
"""Float64 reference of RWKV-7 "Goose" (x070), from BlinkDL's published math.

Our own code, written from reading BlinkDL/RWKV-LM's RWKV-v7 files (rwkv_v7_demo.py,
rwkv_v7_demo_rnn.py, rwkv_v7_demo_fast.py, rwkv_v7_numpy.py, train_temp/src/model.py) and
flash-linear-attention's RWKV-7 (fla/layers/rwkv7.py, fla/models/rwkv7/, utils/convert_from_rwkv7.py);
docs/rwkv7.md says what was read where and where the two disagree. Neither is imported. It is an
oracle, not fast: everything is torch.float64, the state update runs token by token.

It reads both published layouts (checkpoints.py):
  * BlinkDL's .pth (a bare state dict, names like blocks.0.att.w1), FILE.pth or a directory that
    holds exactly one .pth; every size is inferred from the tensors as BlinkDL's demos do;
  * fla-hub's Hugging Face folder (config.json with model_type "rwkv7", model.safetensors or
    shards, fla's names like model.layers.0.attn.w_lora.lora.0.weight).

  /usr/bin/python3 tests/rwkv7/reference.py MODEL --tokens-file ids.txt [--greedy 16]
        [--logits-out F.npy|F.txt] [--lnx-eps E] [--ln-eps E] [--l2 blink|fla] [--decay-scale S]
  /usr/bin/python3 tests/rwkv7/reference.py --self-test
  /usr/bin/python3 tests/rwkv7/reference.py --check-expected tests/rwkv7/expected.json

Output (JSON on stdout): mean_nll over the n-1 predictions of ids[1:] from ids[:-1]
(log-softmax over all vocab logits), the last position's top-5, the greedy continuation, the
sizes inferred and the numeric rules used (epsilons, normalisation form, decay constant).

The rules differ by layout only where the publishers' own code differs (docs/rwkv7.md):
  ln_x (per-head group norm) eps: .pth 64e-5 always (BlinkDL hard-codes it, whatever the head
      size); fla folder head_dim * norm_eps (fla's layer).
  kk normalisation: .pth x / max(|x|, 1e-12) (torch's F.normalize, as BlinkDL); fla folder the
      same when fuse_norm is false, x / sqrt(|x|^2 + 1e-6) (fla's fused l2_norm) when it is true.
  LayerNorm eps: .pth 1e-5 (nn.LayerNorm's default, BlinkDL); fla folder norm_eps.
The options override them (to measure what a reading changes).
"""

import argparse
import collections
import hashlib
import json
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "support"))
from pyref import dumps, parse_ids, write_logits  # noqa: E402
from checkpoints import (  # noqa: E402,F401  (re-exported for the other scripts)
    BLINK_LN_EPS, BLINK_LNX_EPS, DT, EXP_M05, FLA_L2_EPS, LAYER_KEYS, TORCH_NORMALIZE_EPS,
    FormatError, Model, Rules, find_pth, load, load_fla, load_pth)


# --------------------------------------------------------------------------------------------
# Pieces (float64; sequences are [T, ...])

def layer_norm(x, wb, eps):
    """nn.LayerNorm: biased variance over the last axis."""
    mu = x.mean(dim=-1, keepdim=True)
    var = ((x - mu) ** 2).mean(dim=-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + eps) * wb[0] + wb[1]


def group_norm(y, wb, eps):
    """ln_x: nn.GroupNorm(H, C) on y [T, H, N]: each head normalised on its own (biased
    variance), then the per-channel affine."""
    T, H, N = y.shape
    mu = y.mean(dim=-1, keepdim=True)
    var = ((y - mu) ** 2).mean(dim=-1, keepdim=True)
    return ((y - mu) / torch.sqrt(var + eps)).reshape(T, H * N) * wb[0] + wb[1]


def l2_normalize(x, rules):
    """x [..., N] per head. BlinkDL: F.normalize (x / max(|x|, 1e-12)); fla with fuse_norm:
    x / sqrt(|x|^2 + 1e-6)."""
    ss = (x * x).sum(dim=-1, keepdim=True)
    if rules.l2 == "fla":
        return x / torch.sqrt(ss + FLA_L2_EPS)
    return x / torch.clamp(torch.sqrt(ss), min=TORCH_NORMALIZE_EPS)


def decay(z, rules):
    """The per-channel decay in (exp(-e^-0.5), 1) from the LoRA output z = w0 + tanh(xw@w1)@w2.
    Published as w = exp(-exp(-softplus(-z) - 0.5)) (GPT demo, CUDA kernel: the soft clamp to
    (-inf, -0.5)) and as exp(-e^-0.5 * sigmoid(z)) (RNN demo, numpy reference, fla with the
    log-decay -e^-0.5 * sigmoid(z)); the two are equal since exp(-softplus(-z)) = sigmoid(z)."""
    return torch.exp(-rules.decay_scale * torch.sigmoid(z))


def new_state(m):
    """Per layer: the time mix's previous normed input [C], the H matrices S[h] [N (value),
    N (key)] (BlinkDL's orientation; fla keeps the transpose, [K, V]), the channel mix's
    previous normed input [C]."""
    C, H, N = m.n_embd, m.n_head, m.head_size
    return [{"att_x": torch.zeros(C, dtype=DT), "S": torch.zeros(H, N, N, dtype=DT),
             "ffn_x": torch.zeros(C, dtype=DT)} for _ in range(m.n_layer)]


def shifted(x, prev):
    """The previous token's row for every row of x [T, C]; prev for the first."""
    return torch.cat([prev.unsqueeze(0), x[:-1]], dim=0)


def time_mix(m, i, d, x, st, v_first):
    """One layer's attention over x [T, C] (already ln1-normed). Returns the output [T, C] and
    v_first; updates st."""
    T, C = x.shape
    H, N, rules = m.n_head, m.head_size, m.rules
    xx = shifted(x, st["att_x"]) - x                     # token shift: x_{t-1} - x_t
    xr, xw, xk, xv, xa, xg = (x + xx * d[n] for n in ("x_r", "x_w", "x_k", "x_v", "x_a", "x_g"))
    r = xr @ d["Wr"].T
    w = decay(d["w0"] + torch.tanh(xw @ d["w1"]) @ d["w2"], rules)
    k = xk @ d["Wk"].T
    v = xv @ d["Wv"].T
    if i == 0:
        v_first = v                                      # layer 0 stores its v
    else:                                                # value residual, layers > 0
        v = v + (v_first - v) * torch.sigmoid(d["v0"] + (xv @ d["v1"]) @ d["v2"])
    a = torch.sigmoid(d["a0"] + (xa @ d["a1"]) @ d["a2"])   # in-context learning rate
    g = torch.sigmoid(xg @ d["g1"]) @ d["g2"]               # output gate: sigmoid in the middle
    var = m.variants
    if "gate_sigmoid_outside" in var:
        g = torch.sigmoid((xg @ d["g1"]) @ d["g2"])
    kk = l2_normalize((k * d["k_k"]).reshape(T, H, N), rules)
    k_raw = k
    k = k * (1 + (a - 1) * d["k_a"])
    r3, w3, k3, v3, a3 = (t.reshape(T, H, N) for t in (r, w, k, v, a))
    S = st["S"]
    y = torch.empty(T, H, N, dtype=DT)
    wshape = (slice(None), slice(None), None) if "decay_on_value_index" in var else (slice(None), None, slice(None))
    readout = "hji,hj->hi" if "readout_transposed" in var else "hij,hj->hi"
    for t in range(T):
        # S = S diag(w) + (S (-kk)) (kk * a)^T + v k^T, per head; both terms use the old S.
        sa = torch.einsum("hij,hj->hi", S * w3[t][:, None, :] if "sa_after_decay" in var else S, -kk[t])
        S = (S * w3[t][wshape] + sa[:, :, None] * (kk[t] * a3[t])[:, None, :]
             + v3[t][:, :, None] * k3[t][:, None, :])
        y[t] = torch.einsum(readout, S, r3[t])           # y = S r
    st["S"] = S
    st["att_x"] = x[-1].clone()
    if "ln_x_whole_width" in var:
        out = group_norm(y.reshape(T, 1, C), d["lnx"], rules.lnx_eps)
    else:
        out = group_norm(y, d["lnx"], rules.lnx_eps)
    kb = k_raw.reshape(T, H, N) if "bonus_k_before_ka" in var else k3
    bonus = (r3 * kb * d["r_k"]).sum(dim=-1, keepdim=True) * v3     # per head, times v
    out = out + bonus.reshape(T, C)
    return (out * g) @ d["Wo"].T, v_first


def channel_mix(d, x, st):
    xx = shifted(x, st["ffn_x"]) - x
    st["ffn_x"] = x[-1].clone()
    k = torch.relu((x + xx * d["ffn_x_k"]) @ d["ffn_Wk"].T) ** 2
    return k @ d["ffn_Wv"].T


def forward(m, ids, state=None):
    """Logits [T, V] for ids, continuing from state (a fresh zero state when None); the state
    after the last id is returned too (the input state is not modified)."""
    st = [dict(s) for s in state] if state is not None else new_state(m)
    x = m.emb[torch.tensor(ids, dtype=torch.long)]
    if m.ln0 is not None:
        x = layer_norm(x, m.ln0, m.rules.ln_eps)         # ln0: layer 0's, on the embeddings
    v_first = None
    for i, d in enumerate(m.layers):
        dx, v_first = time_mix(m, i, d, layer_norm(x, d["ln1"], m.rules.ln_eps), st[i], v_first)
        x = x + dx
        x = x + channel_mix(d, layer_norm(x, d["ln2"], m.rules.ln_eps), st[i])
    x = layer_norm(x, m.ln_out, m.rules.ln_eps)
    return x @ m.head.T, st


def mean_nll(logits, ids):
    lp = torch.log_softmax(logits[:-1], dim=-1)
    tgt = torch.tensor(ids[1:], dtype=torch.long)
    return float(-lp.gather(1, tgt[:, None]).mean())


def greedy(m, ids, n, state=None):
    """n greedy tokens after ids; also the margin (top-1 minus top-2 logit) of each choice."""
    logits, st = forward(m, ids, state)
    out, margins, last = [], [], logits[-1]
    for _ in range(n):
        top = torch.topk(last, 2)
        out.append(int(top.indices[0]))
        margins.append(float(top.values[0] - top.values[1]))
        logits, st = forward(m, [out[-1]], st)
        last = logits[-1]
    return out, margins


def state_digest(st):
    """sha256 of the state as float64 little-endian: per layer att_x, S (h, i, j), ffn_x."""
    h = hashlib.sha256()
    for s in st:
        for key in ("att_x", "S", "ffn_x"):
            h.update(s[key].contiguous().numpy().astype("<f8").tobytes())
    return h.hexdigest()


def describe(m):
    return {"layout": m.layout, "dtype": m.dtype, "n_layer": m.n_layer, "n_embd": m.n_embd,
            "n_head": m.n_head, "head_size": m.head_size, "vocab": m.vocab, "ffn": m.ffn,
            "lora_ranks": dict(m.ranks), "rules": m.rules.as_dict(), "notes": m.notes}


def evaluate(m, ids, n_greedy=16, prefixes=(2, 17, 64, 200)):
    logits, st = forward(m, ids)
    top = torch.topk(logits[-1], 5)
    cont, margins = greedy(m, ids, n_greedy)
    return {
        "mean_nll": mean_nll(logits, ids),
        "prefix_nll": {str(p): mean_nll(logits[:p], ids[:p]) for p in prefixes if p <= len(ids)},
        "top5_ids": [int(i) for i in top.indices],
        "top5_logits": [float(v) for v in top.values],
        "greedy": cont,
        "greedy_min_margin": min(margins) if margins else None,
        "state_sha256": state_digest(st),
    }, logits


def apply_overrides(m, a):
    if a.lnx_eps is not None:
        m.rules.lnx_eps = a.lnx_eps
    if a.ln_eps is not None:
        m.rules.ln_eps = a.ln_eps
    if a.l2 is not None:
        m.rules.l2 = a.l2
    if a.decay_scale is not None:
        m.rules.decay_scale = a.decay_scale


# --------------------------------------------------------------------------------------------
# Self-test: the pieces against independent forms, the model against itself

def _random_model(seed, C=32, H=2, L=3, V=40, F=48, ranks=(5, 3, 4, 7), layout="pth"):
    g = torch.Generator().manual_seed(seed)

    def rn(*s, std=1.0, mean=0.0):
        return (torch.randn(*s, generator=g, dtype=DT) * std + mean)

    m = Model()
    m.layout, m.dtype = layout, "float64"
    m.n_layer, m.n_embd, m.n_head, m.head_size, m.vocab, m.ffn = L, C, H, C // H, V, F
    m.ranks = dict(zip("wavg", ranks))
    m.emb = rn(V, C)
    m.ln0 = (rn(C, std=0.1, mean=1), rn(C, std=0.1))
    for i in range(L):
        d = {"ln1": (rn(C, std=0.1, mean=1), rn(C, std=0.1)),
             "ln2": (rn(C, std=0.1, mean=1), rn(C, std=0.1)),
             "lnx": (rn(C, std=0.1, mean=1), rn(C, std=0.1))}
        for n in ("x_r", "x_w", "x_k", "x_v", "x_a", "x_g"):
            d[n] = torch.rand(C, generator=g, dtype=DT)
        d["w0"], d["a0"] = rn(C, std=2, mean=-2), rn(C, std=0.5)
        d["v0"] = rn(C, std=0.5, mean=0.5) if i else None
        for k, r in zip("wavg", ranks):
            if k == "v" and i == 0:
                d["v1"] = d["v2"] = None
                continue
            d[k + "1"], d[k + "2"] = rn(C, r, std=C ** -0.5), rn(r, C, std=0.3 * r ** -0.5)
        d["k_k"], d["k_a"] = rn(C, std=0.1, mean=0.7), rn(C, std=0.1, mean=1.0)
        d["r_k"] = rn(H, C // H, std=0.2)
        for n in ("Wr", "Wk", "Wv", "Wo"):
            d[n] = rn(C, C, std=C ** -0.5)
        d["ffn_x_k"] = torch.rand(C, generator=g, dtype=DT)
        d["ffn_Wk"], d["ffn_Wv"] = rn(F, C, std=C ** -0.5), rn(C, F, std=F ** -0.5)
        m.layers.append(d)
    m.ln_out = (rn(C, std=0.1, mean=1), rn(C, std=0.1))
    m.head = rn(V, C, std=2 * C ** -0.5)
    m.rules = Rules(BLINK_LN_EPS, BLINK_LNX_EPS, "blink")
    return m


def _rel(a, b):
    return float((a - b).abs().max() / max(float(b.abs().max()), 1e-300))


def self_test():
    fails = []

    def check(name, err, tol):
        ok = err <= tol
        print(f"{'ok  ' if ok else 'FAIL'} {name}: {err:.3g} (tolerance {tol:g})")
        if not ok:
            fails.append(name)

    g = torch.Generator().manual_seed(7)
    z = torch.randn(1000, generator=g, dtype=DT) * 6
    rules = Rules(BLINK_LN_EPS, BLINK_LNX_EPS, "blink")
    soft = torch.exp(-torch.exp(-torch.nn.functional.softplus(-z) - 0.5))
    check("decay: exp(-e^-0.5 sigmoid(z)) == exp(-exp(-softplus(-z) - 0.5))", _rel(decay(z, rules), soft), 1e-14)
    y = torch.randn(5, 3, 8, generator=g, dtype=DT) * 0.1
    wb = (torch.randn(24, generator=g, dtype=DT), torch.randn(24, generator=g, dtype=DT))
    ref = torch.nn.functional.group_norm(y.reshape(5, 24), 3, wb[0], wb[1], eps=64e-5)
    check("group_norm == torch group_norm (eps 64e-5)", _rel(group_norm(y, wb, 64e-5), ref), 1e-13)
    x = torch.randn(5, 24, generator=g, dtype=DT)
    ref = torch.nn.functional.layer_norm(x, (24,), wb[0], wb[1], eps=1e-5)
    check("layer_norm == torch layer_norm", _rel(layer_norm(x, wb, 1e-5), ref), 1e-13)
    ref = torch.nn.functional.normalize(y, dim=-1, p=2.0)
    check("l2 (blink) == F.normalize", _rel(l2_normalize(y, rules), ref), 1e-14)

    m = _random_model(1)
    ids = [int(t) for t in torch.randint(0, m.vocab, (40,), generator=g)]
    full, st_full = forward(m, ids)
    # Token by token (RNN mode) through the state == the whole sequence at once (GPT mode).
    st, rows = None, []
    for t in ids:
        lg, st = forward(m, [t], st)
        rows.append(lg[0])
    check("RNN mode == GPT mode (logits)", _rel(torch.stack(rows), full), 1e-12)
    check("RNN mode == GPT mode (final S)", _rel(st[-1]["S"], st_full[-1]["S"]), 1e-12)
    a, st = forward(m, ids[:17])
    b, _ = forward(m, ids[17:], st)
    check("prefix then continuation from the state == whole", _rel(torch.cat([a, b]), full), 1e-12)
    # Causality: changing a later id leaves earlier logits alone.
    ids2 = list(ids)
    ids2[30] = (ids2[30] + 1) % m.vocab
    lg2, _ = forward(m, ids2)
    check("causal: logits before the change are equal", _rel(lg2[:30], full[:30]), 0.0)
    check("causal: logits after the change differ", 1.0 if _rel(lg2[30:], full[30:]) == 0 else 0.0, 0.0)
    # Layer 0's v0/v1/v2 are never read: garbage there changes nothing.
    m.layers[0]["v0"] = torch.full((m.n_embd,), float("nan"), dtype=DT)
    lg3, _ = forward(m, ids)
    check("layer 0 ignores v0/v1/v2", _rel(lg3, full), 0.0)
    # The state update against its closed form for a single head, one step from a random S.
    N = 6
    S = torch.randn(1, N, N, generator=g, dtype=DT)
    w, kk, a_, v, k, r = (torch.rand(N, generator=g, dtype=DT) for _ in range(6))
    kk = kk / kk.norm()
    closed = S[0] @ (torch.diag(w) - torch.outer(kk, kk * a_)) + torch.outer(v, k)
    sa = torch.einsum("hij,hj->hi", S, -kk[None])
    step = S * w[None, None, :] + sa[:, :, None] * (kk * a_)[None, None, :] + v[None, :, None] * k[None, None, :]
    check("state update == S (diag(w) - kk (kk*a)^T) + v k^T", _rel(step[0], closed), 1e-14)
    # The loaders: a random model written in both layouts reads back to the same NLL.
    import tempfile
    sys.path.insert(0, HERE)
    import make_fixtures
    with tempfile.TemporaryDirectory() as tmp:
        spec = dict(make_fixtures.SELF_TEST_SPEC)
        sd = make_fixtures.make_pth_state_dict(spec, seed=3)
        pth = os.path.join(tmp, "m.pth")
        torch.save(sd, pth)
        fla = os.path.join(tmp, "fla")
        make_fixtures.write_fla(sd, fla, fuse_norm=False)
        mp, mf = load(pth), load(fla)
        mp.rules = Rules(1e-5, mf.rules.lnx_eps, "blink")
        ids = [(7 * i + 3) % mp.vocab for i in range(30)]
        ref = forward(mp, ids)[0]
        check("pth and fla layouts of one model: same logits", _rel(forward(mf, ids)[0], ref), 1e-12)
        # fla's first layout: the six lerps as one x_x [6, C] (rows r, w, k, v, a, g).
        from pyref import read_safetensors, write_safetensors
        st = read_safetensors(os.path.join(fla, "model.safetensors"))
        for i in range(mp.n_layer):
            a = f"model.layers.{i}.attn."
            st[a + "x_x"] = torch.cat([st.pop(a + n).reshape(1, -1) for n in ("x_r", "x_w", "x_k", "x_v", "x_a", "x_g")])
        write_safetensors(os.path.join(fla, "model.safetensors"), st)
        check("fla's x_x [6, C] layout reads as the six x_*", _rel(forward(load(fla), ids)[0], ref), 1e-12)
        # The loaders refuse what no reading uses, what is missing, and shapes that disagree.
        import json as _json

        def refused(label, path, expect):
            try:
                load(path)
                msg = "(loaded)"
            except FormatError as e:
                msg = str(e)
            check(f"refused: {label}", 0.0 if expect in msg else 1.0, 0.0)

        def pth_with(name, change):
            bad = dict(sd)
            change(bad)
            path = os.path.join(tmp, name + ".pth")
            torch.save(bad, path)
            return path

        refused("an unknown tensor", pth_with("extra", lambda d: d.update({"blocks.0.att.extra": torch.zeros(3)})),
                "tensors no RWKV-7 reading uses: ['blocks.0.att.extra']")
        refused("layer 1 without v0", pth_with("nov0", lambda d: d.pop("blocks.1.att.v0")),
                "missing tensor blocks.1.att.v0")
        refused("a LoRA factor of the wrong shape",
                pth_with("shape", lambda d: d.update({"blocks.1.att.a2": torch.zeros(spec["ranks"][1] + 1, spec["C"])})),
                "blocks.1.att.a2: shape")
        with open(os.path.join(fla, "config.json")) as f:
            cfg = _json.load(f)
        cfg["head_dim"] = spec["C"] // spec["H"] * 2
        with open(os.path.join(fla, "config.json"), "w") as f:
            _json.dump(cfg, f)
        refused("a head_dim that r_k contradicts", fla, "config.json implies")
    print("self-test:", "FAILED " + ", ".join(fails) if fails else "passed")
    return 1 if fails else 0


# --------------------------------------------------------------------------------------------

def check_expected(path, tol=1e-12):
    """Recompute every fixture in expected.json; exit 1 unless each mean NLL is within tol
    relative and the greedy ids equal."""
    with open(path) as f:
        exp = json.load(f)
    root = os.path.dirname(os.path.abspath(path))
    ids = parse_ids(open(os.path.join(root, exp["prompt_file"])).read())
    bad = 0
    for name, e in exp["fixtures"].items():
        m = load(os.path.join(root, e["path"]))
        got, _ = evaluate(m, ids, n_greedy=len(e["greedy"]))
        rel = abs(got["mean_nll"] - e["mean_nll"]) / abs(e["mean_nll"])
        ok = rel <= tol and got["greedy"] == e["greedy"]
        bad += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {name}: mean_nll {got['mean_nll']:.17g} "
              f"(expected {e['mean_nll']:.17g}, rel {rel:.2g}), greedy {'equal' if got['greedy'] == e['greedy'] else 'DIFFERENT'}")
    return 1 if bad else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", nargs="?")
    ap.add_argument("--tokens", help="comma-separated ids")
    ap.add_argument("--tokens-file")
    ap.add_argument("--greedy", type=int, default=16)
    ap.add_argument("--logits-out", help="last position's logits (.npy float64 or text)")
    ap.add_argument("--lnx-eps", type=float)
    ap.add_argument("--ln-eps", type=float)
    ap.add_argument("--l2", choices=("blink", "fla"))
    ap.add_argument("--decay-scale", type=float, help="e.g. 0.606531 as the RNN demo writes it")
    ap.add_argument("--self-test", action="store_true")
    ap.add_argument("--check-expected")
    a = ap.parse_args()
    if a.self_test:
        return self_test()
    if a.check_expected:
        return check_expected(a.check_expected)
    if not a.model:
        ap.error("MODEL is required")
    ids = parse_ids(open(a.tokens_file).read() if a.tokens_file else a.tokens.replace(",", " "))
    m = load(a.model)
    apply_overrides(m, a)
    if max(ids) >= m.vocab or min(ids) < 0:
        raise SystemExit(f"token ids must be in [0, {m.vocab})")
    res, logits = evaluate(m, ids, a.greedy)
    if a.logits_out:
        write_logits(a.logits_out, logits[-1])
    out = collections.OrderedDict(model=describe(m))
    out.update(res)
    print(dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
