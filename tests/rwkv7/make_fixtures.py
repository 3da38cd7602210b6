#!/usr/bin/env python3
"""Writes the committed RWKV-7 fixtures and tests/rwkv7/expected.json.

  /usr/bin/python3 tests/rwkv7/make_fixtures.py            (from anywhere; ~30 s)
  /usr/bin/python3 tests/rwkv7/make_fixtures.py --check    (regenerate into a temporary
        directory; exit 1 unless every file is byte for byte the committed one)
  /usr/bin/python3 tests/rwkv7/make_fixtures.py --sensitivity
        (how much each misreading moves each fixture's mean NLL; prints a table)

Random-weight checkpoints, made here (no weights are downloaded):
  * BlinkDL's layout: torch.save of a bare state dict (what BlinkDL publishes), in float32,
    bfloat16 and float16, names and shapes as in docs/rwkv7.md, [1, 1, C] vectors;
  * fla-hub's layout: config.json + model.safetensors, converted from one of the .pth files
    with the mapping of fla's utils/convert_from_rwkv7.py (our own code, not fla's).
Weights are drawn in float32 from a seeded torch.Generator in one fixed order and then cast, so
one seed gives a model and its bf16 / f16 roundings. The prompt (prompt_ids.txt) is the first
300 bytes of models/kjv/heldout.txt, one id per byte (all below 128; the vocab is 128).
expected.json holds, per fixture, reference.py's float64 mean NLL (17 digits) and the other
figures of reference.evaluate, with the layout's own rules.
"""

import argparse
import collections
import filecmp
import json
import os
import sys
import tempfile

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
from pyref import dumps, write_safetensors  # noqa: E402

DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}
TORCH_DTYPE = {"f32": "float32", "bf16": "bfloat16", "f16": "float16"}

# C width, H heads, L layers, F FFN width, V vocab, ranks (w, a, v, g)
SMALL = dict(C=32, H=2, L=3, F=64, V=128, ranks=(5, 3, 1, 7))
ONE_HEAD = dict(C=64, H=1, L=2, F=96, V=128, ranks=(7, 5, 3, 9))
SELF_TEST_SPEC = dict(C=32, H=2, L=2, F=48, V=40, ranks=(5, 3, 4, 7))

# name -> (kind, spec, seed, dtype, options). A .pth is written from the spec; an fla folder
# is converted from the .pth named in options["from"].
FIXTURES = collections.OrderedDict([
    ("h2x16-f32.pth", ("pth", SMALL, 1, "f32", {"order": "published"})),
    ("h2x16-bf16.pth", ("pth", SMALL, 1, "bf16", {"order": "published"})),
    ("h2x16-f16.pth", ("pth", SMALL, 1, "f16", {"order": "published"})),
    ("h1x64-bf16.pth", ("pth", ONE_HEAD, 2, "bf16", {"order": "training", "layer0_v": True})),
    ("h2x16-fla", ("fla", None, None, None, {"from": "h2x16-f32.pth", "fuse_norm": False})),
    ("h1x64-fla-bf16", ("fla", None, None, None, {"from": "h1x64-bf16.pth", "fuse_norm": True,
                                                   "stale_num_heads": True})),
    ("h2x16-fla-xx-bf16", ("fla", None, None, None, {"from": "h2x16-bf16.pth", "fuse_norm": True,
                                                      "x_x": True})),
])

COVERS = {
    "h2x16-f32.pth": "2 heads of 16, 3 layers, float32, the published key order, layer 0 without "
                     "v0/v1/v2, LoRA ranks w5 a3 v1 g7, FFN 64 (2x)",
    "h2x16-bf16.pth": "h2x16-f32's weights rounded to bfloat16",
    "h2x16-f16.pth": "h2x16-f32's weights rounded to float16",
    "h1x64-bf16.pth": "1 head of 64, 2 layers, bfloat16, the training code's key order (an "
                      "OrderedDict) with layer 0's unused v0/v1/v2 present, ranks w7 a5 v3 g9, FFN 96 (1.5x)",
    "h2x16-fla": "h2x16-f32.pth in fla-hub's layout, fuse_norm false (F.normalize), num_heads null; "
                 "head_dim 16 makes fla's ln_x eps 16e-5 where BlinkDL's is 64e-5",
    "h1x64-fla-bf16": "h1x64-bf16.pth in fla-hub's layout, bfloat16, fuse_norm true (fla's l2_norm "
                      "with eps 1e-6), a stale num_heads (32) as fla's converter leaves it",
    "h2x16-fla-xx-bf16": "h2x16-bf16.pth in fla's first layout (Jan-Apr 2025): the six lerps as one "
                         "attn.x_x [6, C], a config.json of that time (no value_dim, use_l2warp, "
                         "fuse_linear_cross_entropy), fuse_norm true",
}
PREFIXES = [2, 17, 64, 200]
N_GREEDY = 16

ATT_VECS = ("x_r", "x_w", "x_k", "x_v", "x_a", "x_g")


def draw(spec, seed):
    """All weights of one model, float32, in one fixed order: {name: tensor} with BlinkDL's
    names and shapes, layer 0's v0/v1/v2 included (the training code has them)."""
    C, H, L, F, V = spec["C"], spec["H"], spec["L"], spec["F"], spec["V"]
    N = C // H
    rw, ra, rv, rg = spec["ranks"]
    g = torch.Generator().manual_seed(seed)

    def rn(*shape, std=1.0, mean=0.0):
        return torch.randn(*shape, generator=g, dtype=torch.float32) * std + mean

    def un(*shape, lo=0.0, hi=1.0):
        return torch.rand(*shape, generator=g, dtype=torch.float32) * (hi - lo) + lo

    w = {"emb.weight": rn(V, C)}
    for i in range(L):
        p, a, f = f"blocks.{i}.", f"blocks.{i}.att.", f"blocks.{i}.ffn."
        for n in ("ln1", "ln2") + (("ln0",) if i == 0 else ()):
            w[p + n + ".weight"], w[p + n + ".bias"] = rn(C, std=0.1, mean=1.0), rn(C, std=0.1)
        for n in ATT_VECS:
            w[a + n] = un(1, 1, C)
        # decays exp(-e^-0.5 sigmoid(w0 + ...)) between about 0.62 and 0.9985
        w[a + "w1"], w[a + "w2"], w[a + "w0"] = rn(C, rw, std=C ** -0.5), rn(rw, C, std=0.5 * rw ** -0.5), un(1, 1, C, lo=-6.0, hi=1.5)
        w[a + "a1"], w[a + "a2"], w[a + "a0"] = rn(C, ra, std=C ** -0.5), rn(ra, C, std=0.5 * ra ** -0.5), rn(1, 1, C, std=0.7)
        w[a + "v1"], w[a + "v2"], w[a + "v0"] = rn(C, rv, std=C ** -0.5), rn(rv, C, std=0.5 * rv ** -0.5), rn(1, 1, C, std=0.5, mean=0.5)
        w[a + "g1"], w[a + "g2"] = rn(C, rg, std=C ** -0.5), rn(rg, C, std=1.5 * rg ** -0.5)
        w[a + "k_k"], w[a + "k_a"] = un(1, 1, C, lo=0.5, hi=0.9), un(1, 1, C, lo=0.8, hi=1.2)
        w[a + "r_k"] = rn(H, N, std=0.2)
        # a small receptance keeps y = S r near unit scale, so ln_x's eps is visible
        w[a + "receptance.weight"] = rn(C, C, std=0.05 * C ** -0.5)
        w[a + "key.weight"], w[a + "value.weight"] = rn(C, C, std=C ** -0.5), rn(C, C, std=C ** -0.5)
        w[a + "output.weight"] = rn(C, C, std=0.5 * C ** -0.5)
        w[a + "ln_x.weight"], w[a + "ln_x.bias"] = rn(C, std=0.1, mean=1.0), rn(C, std=0.1)
        w[f + "x_k"] = un(1, 1, C)
        w[f + "key.weight"], w[f + "value.weight"] = rn(F, C, std=C ** -0.5), rn(C, F, std=0.5 * F ** -0.5)
    w["ln_out.weight"], w["ln_out.bias"] = rn(C, std=0.1, mean=1.0), rn(C, std=0.1)
    w["head.weight"] = rn(V, C, std=3.0 * C ** -0.5)
    return w


def published_order(L):
    """The order of BlinkDL's published files, as rwkv_v7_numpy.py's positional reading of each
    block's att tensors implies (x_r..x_g, w0, r_k, w1, w2, a1, a2, a0, g1, g2, v2, v1, v0, k_k,
    k_a, receptance, key, value, output, ln_x); layer 0 has no v0/v1/v2."""
    names = ["emb.weight", "blocks.0.ln0.weight", "blocks.0.ln0.bias"]
    for i in range(L):
        p, a = f"blocks.{i}.", f"blocks.{i}.att."
        names += [p + "ln1.weight", p + "ln1.bias", p + "ln2.weight", p + "ln2.bias"]
        names += [a + n for n in ATT_VECS + ("w0", "r_k", "w1", "w2", "a1", "a2", "a0", "g1", "g2")]
        if i > 0:
            names += [a + "v2", a + "v1", a + "v0"]
        names += [a + n for n in ("k_k", "k_a", "receptance.weight", "key.weight", "value.weight",
                                  "output.weight", "ln_x.weight", "ln_x.bias")]
        names += [p + "ffn.x_k", p + "ffn.key.weight", p + "ffn.value.weight"]
    return names + ["ln_out.weight", "ln_out.bias", "head.weight"]


def training_order(L):
    """A module's state_dict() order in train_temp/src/model.py (ln1, ln2, then ln0; the LoRA
    as w1 w2 w0, a1 a2 a0, v1 v2 v0, g1 g2), layer 0's v0/v1/v2 included."""
    names = ["emb.weight"]
    for i in range(L):
        p, a = f"blocks.{i}.", f"blocks.{i}.att."
        names += [p + "ln1.weight", p + "ln1.bias", p + "ln2.weight", p + "ln2.bias"]
        if i == 0:
            names += [p + "ln0.weight", p + "ln0.bias"]
        names += [a + n for n in ATT_VECS + ("w1", "w2", "w0", "a1", "a2", "a0", "v1", "v2", "v0",
                                             "g1", "g2", "k_k", "k_a", "r_k", "receptance.weight",
                                             "key.weight", "value.weight", "output.weight",
                                             "ln_x.weight", "ln_x.bias")]
        names += [p + "ffn.x_k", p + "ffn.key.weight", p + "ffn.value.weight"]
    return names + ["ln_out.weight", "ln_out.bias", "head.weight"]


def make_pth_state_dict(spec, seed, dtype="f32", order="published", layer0_v=False):
    w = draw(spec, seed)
    names = published_order(spec["L"]) if order == "published" else training_order(spec["L"])
    if not layer0_v:
        names = [n for n in names if n not in ("blocks.0.att.v0", "blocks.0.att.v1", "blocks.0.att.v2")]
    elif order == "published":
        names += ["blocks.0.att.v0", "blocks.0.att.v1", "blocks.0.att.v2"]
    sd = collections.OrderedDict() if order == "training" else {}
    for n in names:
        sd[n] = w[n].to(DTYPES[dtype]).contiguous()
    return sd


def to_fla_name(name):
    """BlinkDL name -> (fla name, transpose?), None for layer 0's unused v0/v1/v2; the mapping
    of fla's utils/convert_from_rwkv7.py."""
    top = {"emb.weight": "model.embeddings.weight", "ln_out.weight": "model.norm.weight",
           "ln_out.bias": "model.norm.bias", "head.weight": "lm_head.weight"}
    if name in top:
        return top[name], False
    if name in ("blocks.0.att.v0", "blocks.0.att.v1", "blocks.0.att.v2"):
        return None, False
    parts = name.split(".")
    assert parts[0] == "blocks", name
    block = {"att": "attn", "ffn": "ffn", "ln0": "pre_norm", "ln1": "attn_norm", "ln2": "ffn_norm"}[parts[2]]
    rest = parts[3:]
    transpose = False
    if block == "attn" and len(rest) == 1 and len(rest[0]) == 2 and rest[0][0] in "wavg" and rest[0][1] in "012":
        kind, num = rest[0]
        rest = [f"{kind}_lora", "lora"] + {"0": ["2", "bias"], "1": ["0", "weight"], "2": ["2", "weight"]}[num]
        transpose = num in "12"
    elif block == "attn" and rest[0] in ("receptance", "key", "value", "output", "ln_x"):
        rest = [{"receptance": "r_proj", "key": "k_proj", "value": "v_proj", "output": "o_proj",
                 "ln_x": "g_norm"}[rest[0]]] + rest[1:]
    return ".".join(["model", "layers", parts[1], block] + rest), transpose


def fla_tensors(sd, x_x=False):
    """The fla-layout tensors of a BlinkDL state dict: renamed, LoRA factors transposed, [1, 1, C]
    squeezed to [C] except the six attention lerps (fla keeps x_r..x_g as [1, 1, C]). With x_x,
    fla's first layout: the six lerps as rows r, w, k, v, a, g of one attn.x_x [6, C]."""
    out = {}
    for name, t in sd.items():
        new, transpose = to_fla_name(name)
        if new is None:
            continue
        if transpose:
            t = t.t()
        if t.dim() == 3 and ".attn.x_" not in new:
            t = t.reshape(-1)
        # a fresh row-major tensor: .contiguous() keeps the stride of a size-1 dimension
        out[new] = torch.empty(t.shape, dtype=t.dtype).copy_(t)
    if x_x:
        for prefix in sorted({n[:-len("x_r")] for n in out if n.endswith(".attn.x_r")}):
            rows = [out.pop(prefix + n).reshape(1, -1) for n in ATT_VECS]
            out[prefix + "x_x"] = torch.cat(rows).contiguous()
    return out


def write_fla(sd, out_dir, fuse_norm=False, stale_num_heads=False, x_x=False):
    """config.json (fields as fla's RWKV7Config writes them; sizes from the tensors, as the
    converter reads them) and model.safetensors."""
    os.makedirs(out_dir, exist_ok=True)
    C = sd["emb.weight"].shape[1]
    H, N = sd["blocks.0.att.r_k"].shape
    F = sd["blocks.0.ffn.key.weight"].shape[0]
    L = 0
    while f"blocks.{L}.ffn.key.weight" in sd:
        L += 1
    dtype = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}[sd["emb.weight"].dtype]
    cfg = {
        "a_low_rank_dim": sd["blocks.0.att.a1"].shape[1],
        "architectures": ["RWKV7ForCausalLM"],
        "attn": None,
        "attn_mode": "chunk",
        "bos_token_id": 1,
        "decay_low_rank_dim": sd["blocks.0.att.w1"].shape[1],
        "eos_token_id": 2,
        "fuse_cross_entropy": True,
        "fuse_linear_cross_entropy": False,
        "fuse_norm": fuse_norm,
        "gate_low_rank_dim": sd["blocks.0.att.g1"].shape[1],
        "head_dim": N,
        "hidden_act": "sqrelu",
        "hidden_ratio": F / C,
        "hidden_size": C,
        "initializer_range": 0.02,
        "intermediate_size": F,
        "max_position_embeddings": 2048,
        "model_type": "rwkv7",
        "norm_bias": True,
        "norm_eps": 1e-05,
        "norm_first": True,
        # fla's converter builds RWKV7Config() (hidden_size 2048, head_dim 64: num_heads 32) and
        # then sets hidden_size, leaving num_heads stale; the layer ignores it (head_dim wins).
        "num_heads": 2048 // 64 if stale_num_heads else None,
        "num_hidden_layers": L,
        "tie_word_embeddings": False,
        "torch_dtype": dtype,
        "transformers_version": "4.56.1",
        "use_cache": True,
        "use_l2warp": True,
        "v_low_rank_dim": sd["blocks.1.att.v1"].shape[1] if L > 1 else 32,
        "value_dim": [C] * L,
        "vocab_size": sd["emb.weight"].shape[0],
    }
    if x_x:
        # as configs were written then (fla-hub/rwkv7-1.5B-world's, transformers 4.48)
        for k in ("value_dim", "use_l2warp", "fuse_linear_cross_entropy"):
            del cfg[k]
        cfg["transformers_version"] = "4.48.1"
        cfg["_attn_implementation_autoset"] = True
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        f.write(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    write_safetensors(os.path.join(out_dir, "model.safetensors"), fla_tensors(sd, x_x), {"format": "pt"})


def prompt_ids():
    with open(os.path.join(ROOT, "models", "kjv", "heldout.txt"), "rb") as f:
        return list(f.read(300))


def write_all(out_root):
    sys.path.insert(0, HERE)
    import reference
    ids = prompt_ids()
    with open(os.path.join(out_root, "prompt_ids.txt"), "w") as f:
        f.write("".join(f"{i}\n" for i in ids))
    sds = {}
    for name, (kind, spec, seed, dtype, opt) in FIXTURES.items():
        path = os.path.join(out_root, name)
        if kind == "pth":
            sd = make_pth_state_dict(spec, seed, dtype, opt["order"], opt.get("layer0_v", False))
            sds[name] = sd
            # torch.save names the archive's folder after the file; save through a buffer so
            # the bytes do not depend on where the file is written ("archive/...").
            import io
            buf = io.BytesIO()
            torch.save(sd, buf)
            with open(path, "wb") as f:
                f.write(buf.getvalue())
        else:
            write_fla(sds[opt["from"]], path, opt["fuse_norm"], opt.get("stale_num_heads", False),
                      opt.get("x_x", False))
    exp = collections.OrderedDict()
    exp["about"] = ("RWKV-7 fixtures: reference.py (float64) with each layout's own rules; mean_nll "
                    "is the mean over the n-1 predictions of ids[1:] from ids[:-1]; greedy = "
                    f"{N_GREEDY} argmax tokens after the prompt (greedy_min_margin = the smallest "
                    "top-1 minus top-2 logit among them); state_sha256 = sha256 of the state after "
                    "the prompt as float64 (per layer att_x, S[h][i][j] with i the value index, ffn_x)")
    exp["prompt_file"] = "prompt_ids.txt"
    exp["fixtures"] = collections.OrderedDict()
    for name, (kind, spec, seed, dtype, opt) in FIXTURES.items():
        path = os.path.join(out_root, name)
        m = reference.load(path)
        res, _ = reference.evaluate(m, ids, N_GREEDY, PREFIXES)
        e = collections.OrderedDict(path=name, covers=COVERS[name], model=reference.describe(m))
        if kind == "pth":
            e["made_by"] = {"spec": {k: (list(v) if isinstance(v, tuple) else v) for k, v in spec.items()},
                            "seed": seed, "dtype": dtype, "order": opt["order"],
                            "layer0_v": opt.get("layer0_v", False)}
        else:
            e["made_by"] = {"converted_from": opt["from"], "fuse_norm": opt["fuse_norm"],
                            "stale_num_heads": opt.get("stale_num_heads", False),
                            "x_x": opt.get("x_x", False)}
        e["bytes"] = sum(os.path.getsize(os.path.join(dp, fn)) for dp, _, fns in os.walk(path)
                         for fn in fns) if os.path.isdir(path) else os.path.getsize(path)
        e.update(res)
        exp["fixtures"][name] = e
    with open(os.path.join(out_root, "expected.json"), "w") as f:
        f.write(dumps(exp) + "\n")
    with open(os.path.join(out_root, "expected_nll.txt"), "w") as f:
        for name, e in exp["fixtures"].items():
            f.write(f"{name} {e['mean_nll']:.17g}\n")


OUTPUTS = ["prompt_ids.txt", "expected.json", "expected_nll.txt"]


def output_files(root):
    files = list(OUTPUTS)
    for name, (kind, *_r) in FIXTURES.items():
        files += [name] if kind == "pth" else [os.path.join(name, "config.json"),
                                               os.path.join(name, "model.safetensors")]
    return files


def check():
    with tempfile.TemporaryDirectory() as tmp:
        write_all(tmp)
        bad = [f for f in output_files(tmp)
               if not os.path.exists(os.path.join(HERE, f))
               or not filecmp.cmp(os.path.join(tmp, f), os.path.join(HERE, f), shallow=False)]
    for f in bad:
        print("differs:", f)
    print("check:", "FAILED" if bad else "every file regenerates byte for byte")
    return 1 if bad else 0


def sensitivity():
    """Relative change of each fixture's mean NLL when one detail is read another way."""
    sys.path.insert(0, HERE)
    import reference
    ids = prompt_ids()
    changes = [
        ("ln_x eps 64e-5 -> head_size * 1e-5", lambda m: setattr(m.rules, "lnx_eps", m.head_size * 1e-5)),
        ("ln_x eps -> 1e-5 (nn.GroupNorm default)", lambda m: setattr(m.rules, "lnx_eps", 1e-5)),
        ("kk normalisation blink <-> fla fused (eps 1e-6)",
         lambda m: setattr(m.rules, "l2", "fla" if m.rules.l2 == "blink" else "blink")),
        ("decay constant exp(-0.5) -> 0.606531", lambda m: setattr(m.rules, "decay_scale", 0.606531)),
        ("no value residual (v_first ignored)", lambda m: [d.update(v0=torch.full_like(d["v0"], -1e9)) for d in m.layers[1:]]),
        ("ln0 left out", lambda m: setattr(m, "ln0", None)),
        ("bonus r_k term left out", lambda m: [d.update(r_k=torch.zeros_like(d["r_k"])) for d in m.layers]),
        ("k not adjusted by k_a (k_a = 0)", lambda m: [d.update(k_a=torch.zeros_like(d["k_a"])) for d in m.layers]),
        ("a fixed at 1 (no in-context rate)", lambda m: [d.update(a0=torch.full_like(d["a0"], 1e9)) for d in m.layers]),
        ("decay applied along the value index of S", lambda m: m.variants.add("decay_on_value_index")),
        ("read-out y = S^T r", lambda m: m.variants.add("readout_transposed")),
        ("sa = S(-kk) taken after the decay", lambda m: m.variants.add("sa_after_decay")),
        ("bonus with k before the k_a adjustment", lambda m: m.variants.add("bonus_k_before_ka")),
        ("gate as sigmoid(xg @ g1 @ g2)", lambda m: m.variants.add("gate_sigmoid_outside")),
        ("ln_x over all C channels, not per head", lambda m: m.variants.add("ln_x_whole_width")),
    ]
    print("| change | " + " | ".join(FIXTURES) + " |")
    print("|---|" + "---|" * len(FIXTURES))
    base = {}
    for name in FIXTURES:
        base[name] = reference.mean_nll(reference.forward(reference.load(os.path.join(HERE, name)), ids)[0], ids)
    for label, fn in changes:
        row = []
        for name in FIXTURES:
            m = reference.load(os.path.join(HERE, name))
            fn(m)
            v = reference.mean_nll(reference.forward(m, ids)[0], ids)
            row.append(f"{abs(v - base[name]) / base[name]:.2g}")
        print(f"| {label} | " + " | ".join(row) + " |")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--sensitivity", action="store_true")
    a = ap.parse_args()
    if a.check:
        return check()
    if a.sensitivity:
        return sensitivity()
    write_all(HERE)
    for f in output_files(HERE):
        print(f, os.path.getsize(os.path.join(HERE, f)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
