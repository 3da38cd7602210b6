"""reference.py --self-test: the pieces against independent forms, whole models against
themselves (state continuation, chunked delta rule, causality), the two layouts of one model,
and the reader's refusals. Prints one line per check; exit status 1 if any fails."""

import collections
import json
import math

import torch

import make_model
import reference as R

DT = torch.float64


def mrope_angles(pos_thw, inv, section):
    """transformers' interleaved mrope for Qwen3.5: frequency j takes its position from row
    (t, h, w) = j mod 3 while j < 3 section[row], else from t. pos_thw [3, T], inv [n]."""
    ang = pos_thw.to(DT)[:, :, None] * inv[None, None, :]  # [3, T, n]
    out = ang[0].clone()
    for row in (1, 2):
        idx = list(range(row, 3 * section[row], 3))
        out[:, idx] = ang[row][:, idx]
    return out


def rel(a, b):
    return float((a - b).abs().max() / max(float(b.abs().max()), 1e-300))


class Checks:
    def __init__(self):
        self.failed = 0

    def close(self, label, value, tol):
        ok = value <= tol
        self.failed += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {label}: {value:.3g} (tolerance {tol:g})")

    def differ(self, label, value, floor):
        ok = value > floor
        self.failed += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {label}: {value:.3g} (must exceed {floor:g})")

    def refused(self, label, fn, words):
        try:
            fn()
        except ValueError as e:
            ok = words in str(e)
            self.failed += not ok
            print(f"{'ok  ' if ok else 'FAIL'} refused: {label}: {e}")
            return
        self.failed += 1
        print(f"FAIL refused: {label}: accepted")


def qwen_to_fla(cfg, w):
    """A linear-only Qwen3.5 text model (qwen3_5_text) in fla's gated_deltanet layout: the same
    model (the block norms' (1 + w) becomes fla's w, in float64 so that the sum is exact)."""
    w = {k: v.to(DT) for k, v in w.items()}
    D, Hk, Hv = cfg["hidden_size"], cfg["linear_num_key_heads"], cfg["linear_num_value_heads"]
    dk, dv = cfg["linear_key_head_dim"], cfg["linear_value_head_dim"]
    kd = Hk * dk
    fc = {"model_type": "gated_deltanet", "hidden_size": D, "num_hidden_layers": cfg["num_hidden_layers"],
          "vocab_size": cfg["vocab_size"], "num_heads": Hk, "num_v_heads": Hv, "head_dim": dk,
          "expand_v": dv / dk, "use_gate": True, "use_short_conv": True,
          "conv_size": cfg["linear_conv_kernel_dim"], "norm_eps": cfg["rms_norm_eps"],
          "intermediate_size": cfg["intermediate_size"], "tie_word_embeddings": cfg["tie_word_embeddings"]}
    o = collections.OrderedDict()
    o["model.embeddings.weight"] = w["model.embed_tokens.weight"]
    o["model.norm.weight"] = 1.0 + w["model.norm.weight"]
    if "lm_head.weight" in w:
        o["lm_head.weight"] = w["lm_head.weight"]
    for i in range(cfg["num_hidden_layers"]):
        p, f = f"model.layers.{i}.", f"model.layers.{i}.attn."
        a = p + "linear_attn."
        o[p + "attn_norm.weight"] = 1.0 + w[p + "input_layernorm.weight"]
        o[p + "mlp_norm.weight"] = 1.0 + w[p + "post_attention_layernorm.weight"]
        for n in ("gate_proj", "up_proj", "down_proj"):
            o[p + f"mlp.{n}.weight"] = w[p + f"mlp.{n}.weight"]
        qkv, conv = w[a + "in_proj_qkv.weight"], w[a + "conv1d.weight"]
        for n, sl in (("q", slice(0, kd)), ("k", slice(kd, 2 * kd)), ("v", slice(2 * kd, None))):
            o[f + f"{n}_proj.weight"] = qkv[sl]
            o[f + f"{n}_conv1d.weight"] = conv[sl]
        for src, dst in (("in_proj_z.weight", "g_proj.weight"), ("in_proj_b.weight", "b_proj.weight"),
                         ("in_proj_a.weight", "a_proj.weight"), ("A_log", "A_log"), ("dt_bias", "dt_bias"),
                         ("norm.weight", "o_norm.weight"), ("out_proj.weight", "o_proj.weight")):
            o[f + dst] = w[a + src]
    return fc, o


def pieces(c):
    g = torch.Generator().manual_seed(1234)
    T, H, dk, dv = 37, 3, 5, 4
    q = R.l2norm(torch.randn(T, H, dk, generator=g, dtype=DT)) * dk ** -0.5
    k = R.l2norm(torch.randn(T, H, dk, generator=g, dtype=DT))
    v = torch.randn(T, H, dv, generator=g, dtype=DT)
    gl = -torch.rand(T, H, generator=g, dtype=DT) * 2
    beta = torch.rand(T, H, generator=g, dtype=DT) * 2  # up to 2: allow_neg_eigval's range
    S0 = torch.randn(H, dk, dv, generator=g, dtype=DT)
    o_ref, S_ref = R.delta_rule(q, k, v, gl, beta, S0)
    # the update as a matrix product: S_t = (I - beta k k^T) e^g S_{t-1} + beta k v^T
    S = S0.clone()
    o_mat = torch.zeros_like(o_ref)
    eye = torch.eye(dk, dtype=DT)
    for t in range(T):
        for h in range(H):
            kk = k[t, h][:, None]
            S[h] = (eye - beta[t, h] * kk @ kk.T) @ (math.exp(float(gl[t, h])) * S[h]) + beta[t, h] * kk @ v[t, h][None, :]
            o_mat[t, h] = S[h].T @ q[t, h]
    c.close("delta rule == S (I - beta k k^T) e^g + beta k v^T (outputs)", rel(o_ref, o_mat), 1e-13)
    c.close("delta rule == the matrix form (final state)", rel(S_ref, S), 1e-13)
    for chunk in (1, 4, 16, 64):
        o_c, S_c = R.delta_rule_chunked(q, k, v, gl, beta, S0, chunk)
        c.close(f"chunked (WY/UT form, chunk {chunk}) == token by token (outputs)", rel(o_c, o_ref), 1e-12)
        c.close(f"chunked (chunk {chunk}) == token by token (final state)", rel(S_c, S_ref), 1e-12)
    # conv: torch's Conv1d, and continuing from the buffer
    C, K = 7, 4
    u = torch.randn(T, C, generator=g, dtype=DT)
    w = torch.randn(C, K, generator=g, dtype=DT)
    tc = torch.nn.functional.conv1d(u.T[None], w[:, None, :], None, padding=K - 1, groups=C)[0, :, :T].T
    whole, _ = R.conv_step(u, torch.zeros(K - 1, C, dtype=DT), w)
    c.close("causal conv == torch Conv1d (padding K-1, first T outputs)", rel(whole, tc), 1e-15)
    buf = torch.zeros(K - 1, C, dtype=DT)
    parts = []
    for a, b in ((0, 1), (1, 3), (3, 20), (20, T)):
        y, buf = R.conv_step(u[a:b], buf, w)
        parts.append(y)
    c.close("causal conv in pieces (1, 2, 17, 17 tokens) == whole", rel(torch.cat(parts), whole), 0)
    x = torch.linspace(-19.5, 19.5, 301, dtype=DT)
    c.close("softplus == torch softplus below its threshold 20", rel(R.softplus(x), torch.nn.functional.softplus(x)), 1e-15)
    # rotary: a rotation of the first rot channels only, relative
    xr = torch.randn(T, 2, 16, generator=g, dtype=DT)
    pos = torch.arange(T)
    y = R.rope_half(xr, 1e4, pos, 8)
    c.close("partial rope leaves channels rot.. unchanged", float((y[..., 8:] - xr[..., 8:]).abs().max()), 0)
    c.close("partial rope keeps the norm of the rotated part",
            float((y[..., :8].norm(dim=-1) - xr[..., :8].norm(dim=-1)).abs().max()), 1e-13)
    a0, b0 = xr[3, 0][None, None], xr[9, 1][None, None]
    s1 = (R.rope_half(a0, 1e7, torch.tensor([5]), 8) * R.rope_half(b0, 1e7, torch.tensor([2]), 8)).sum()
    s2 = (R.rope_half(a0, 1e7, torch.tensor([40]), 8) * R.rope_half(b0, 1e7, torch.tensor([37]), 8)).sum()
    c.close("rope: q_i . k_j depends on i - j only", float((s1 - s2).abs()), 1e-13)
    # mrope with text-only positions (t = h = w) is plain rope; with distinct rows it is not
    rot = 64
    inv = 1.0 / (1e7 ** (torch.arange(0, rot, 2, dtype=DT) / rot))
    p1 = torch.arange(50)
    plain = torch.outer(p1.to(DT), inv)
    c.close("interleaved mrope (section 11, 11, 10) with t = h = w positions == plain rope angles",
            float((mrope_angles(torch.stack([p1, p1, p1]), inv, [11, 11, 10]) - plain).abs().max()), 0)
    c.differ("interleaved mrope with distinct t, h, w rows differs from plain rope",
             float((mrope_angles(torch.stack([p1, p1 // 2, p1 % 7]), inv, [11, 11, 10]) - plain).abs().max()), 1e-3)


SPECS = {
    "qwen hybrid": {"kind": "qwen35", "layers": "LLLF", "seed": 11, "intermediate": 32},
    "qwen dk 24, tied": {"kind": "qwen35", "layers": "LFL", "dk": 24, "dv": 8, "Hv": 2, "tie": True, "seed": 12,
                         "intermediate": 32},
    "fla gdn + attn": {"kind": "gated_deltanet", "layers": 3, "v_heads": 4, "expand_v": 2.0, "seed": 13,
                       "attn": {"layers": [2], "num_heads": 4, "num_kv_heads": 2, "window_size": 9}},
    "fla gdn plain": {"kind": "gated_deltanet", "layers": 2, "use_gate": False, "short_conv": False,
                      "neg_eigval": True, "with_D": True, "seed": 14},
    "fla delta_net relu/sum": {"kind": "delta_net", "layers": 2, "qk_activation": "relu", "qk_norm": "sum",
                               "use_gate": True, "seed": 15},
    "fla delta_net elu, no conv, no beta": {"kind": "delta_net", "layers": 2, "qk_activation": "elu",
                                            "short_conv": False, "use_beta": False, "seed": 16},
}


def whole_models(c):
    g = torch.Generator().manual_seed(99)
    ids = torch.randint(0, 300, (70,), generator=g).tolist()
    for name, spec in SPECS.items():
        cfg, w = make_model.build(spec)
        m = R.build_model(cfg, w)
        full, _ = m.forward(ids)
        st = None
        parts = []
        for a, b in ((0, 1), (1, 2), (2, 5), (5, 33), (33, 34), (34, 70)):
            y, st = m.forward(ids[a:b], st)
            parts.append(y)
        c.close(f"{name}: pieces of 1, 1, 3, 28, 1, 36 ids continuing the state == whole", rel(torch.cat(parts), full), 1e-13)
        m.chunk = 16
        chunked, _ = m.forward(ids)
        m.chunk = None
        c.close(f"{name}: delta rule in chunks of 16 == token by token (logits)", rel(chunked, full), 1e-12)
        alt = list(ids)
        alt[40] = (alt[40] + 1) % 300
        other, _ = m.forward(alt)
        c.close(f"{name}: causal, logits before a changed id are equal", float((other[:40] - full[:40]).abs().max()), 0)
        c.differ(f"{name}: logits after a changed id differ", float((other[40:] - full[40:]).abs().max()), 1e-6)


def layouts(c):
    spec = {"kind": "qwen35", "layers": "LLL", "multimodal": False, "extras": False, "Hk": 2, "Hv": 4, "dv": 8,
            "seed": 21, "intermediate": 32}
    cfg, w = make_model.build(spec)
    ids = list(range(40, 140, 3))
    a, _ = R.build_model(cfg, w).forward(ids)
    fc, fw = qwen_to_fla(cfg, w)
    b, _ = R.build_model(fc, fw).forward(ids)
    c.close("a linear-only Qwen3.5 and its fla gated_deltanet conversion give the same logits", rel(a, b), 1e-13)
    mm_cfg, mm_w = make_model.build(dict(spec, multimodal=True, extras=True))
    mm, _ = R.build_model(mm_cfg, mm_w).forward(ids)
    c.close("the multimodal layout of the same weights gives the same logits", rel(mm, a), 0)


def refusals(c):
    spec = {"kind": "qwen35", "layers": "LLLF", "seed": 31, "intermediate": 32}
    cfg, w = make_model.build(spec)
    m = R.build_model(cfg, w)
    c.differ("qwen: visual and mtp tensors are skipped by name (count)", len(m.skipped), 0)

    def with_(cfg2=None, **tensors):
        w2 = collections.OrderedDict(w)
        for k, v in tensors.items():
            if v is None:
                w2.pop(k.replace("__", "."))
            else:
                w2[k.replace("__", ".")] = v
        return lambda: R.build_model(cfg2 or cfg, w2)

    c.refused("an unknown tensor", with_(**{"model__language_model__layers__0__linear_attn__extra": torch.zeros(2)}),
              "does not use")
    c.refused("a missing tensor", with_(**{"model__language_model__layers__1__linear_attn__A_log": None}), "missing")
    c.refused("a misshapen conv", with_(**{"model__language_model__layers__0__linear_attn__conv1d__weight":
                                            torch.zeros(128, 1, 3)}), "shape")
    bad = json.loads(json.dumps(cfg))
    bad["tie_word_embeddings"] = True
    c.refused("tie_word_embeddings differing between the top and text_config", with_(bad), "tie_word_embeddings")
    bad = json.loads(json.dumps(cfg))
    bad["text_config"]["rope_parameters"]["rope_type"] = "yarn"
    c.refused("rope_type yarn", with_(bad), "rope_type")
    bad = json.loads(json.dumps(cfg))
    bad["text_config"]["linear_num_value_heads"] = 3
    c.refused("value heads not a multiple of key heads", with_(bad), "multiple")
    tcfg, tw = make_model.build(dict(spec, tie=True))
    tw2 = collections.OrderedDict(tw)
    tw2["lm_head.weight"] = tw["model.language_model.embed_tokens.weight"].clone()
    R.build_model(tcfg, tw2)
    c.close("tied: an lm_head.weight equal to the embedding is accepted (and used by nothing)", 0.0, 0)
    tw2["lm_head.weight"] = tw2["lm_head.weight"] * 1.5
    c.refused("tied: an lm_head.weight that differs from the embedding", lambda: R.build_model(tcfg, tw2),
              "differs")
    fcfg, fw = make_model.build({"kind": "gated_deltanet", "layers": 1, "with_D": True, "seed": 32})
    R.build_model(fcfg, fw)
    fw2 = collections.OrderedDict(fw)
    fw2["model.layers.0.attn.D"] = torch.ones(3)
    c.refused("fla: attn.D of the wrong shape", lambda: R.build_model(fcfg, fw2), "shape")


def run():
    c = Checks()
    pieces(c)
    whole_models(c)
    layouts(c)
    refusals(c)
    print("self-test: " + ("passed" if not c.failed else f"{c.failed} FAILED"))
    return 1 if c.failed else 0
