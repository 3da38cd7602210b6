#!/usr/bin/env python3
"""Float64 reference of Gated DeltaNet language models: Qwen3.5's text model (Hugging Face
layout, hybrid with gated softmax attention) and flash-linear-attention's gated_deltanet and
delta_net (with fla's optional softmax `attn` layers).

Our own code, written from the published sources (transformers' qwen3_5 modelling code, fla's
layers and naive kernels; see README.md, "Formulas"). Neither transformers nor fla is imported.
It is an oracle, not fast: the delta rule runs token by token in torch.float64, the attention
layers over a key/value cache. The readers of the three layouts are in checkpoints.py.

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
from pyref import linear, parse_ids, silu, write_logits  # noqa: E402

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
    """A Model from a config dict and a name -> tensor dict (checkpoints.py reads the layouts)."""
    import checkpoints
    return checkpoints.build_model(config, sd)


def load_model(model_dir):
    """(Model, the weights' path) from a directory with config.json and safetensors."""
    import checkpoints
    return checkpoints.load_model(model_dir)


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
