#!/usr/bin/env python3
"""Regenerates the committed fla fixtures, tests/fla/expected.json and expected_nll.txt.

  /usr/bin/python3 tests/fla/make_fixtures.py          (from anywhere; ~20 s)
  /usr/bin/python3 tests/fla/make_fixtures.py --check  (recompute, compare with the committed files)

The prompt (prompt_ids.txt) is the first 300 bytes of models/kjv/heldout.txt, one id per byte:
the fixtures' vocabulary is 300, and no tokenizer is involved. Each fixture directory is written
by make_model.py (config.json, model.safetensors); reference.py's mean NLL over the prompt goes
to expected.json (with the last position's top-5 and the NLLs of a few prefixes) and, one
"name value" per line with 17 significant digits, to expected_nll.txt. Deterministic: seeded
weights, a fixed writer, float64 arithmetic in a fixed order.
"""

import argparse
import os
import subprocess
import sys
import tempfile

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from pyref import dumps  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import reference  # noqa: E402

BASE = ["--hidden", "64", "--vocab", "300"]
GLA = BASE + ["--type", "gla", "--layers", "2", "--heads", "2", "--intermediate-size", "64"]
HGRN2 = BASE + ["--type", "hgrn2", "--layers", "3", "--expand-ratio", "16", "--intermediate-size", "64"]
FIXTURES = [
    # name, make_model arguments, what it covers
    ("gla", GLA + ["--old-config", "--seed", "1"],
     "GLA as gla-1.3B-100B's config.json is written (rms_norm_eps, no norm_eps, fused_chunk)"),
    ("gla-conv", GLA + ["--short-conv", "--no-fuse-norm", "--seed", "2"],
     "short convolutions on q, k, v (silu), fuse_norm false: the gate's norm named g_norm"),
    ("gla-gqa", BASE + ["--type", "gla", "--layers", "2", "--heads", "4", "--kv-heads", "2",
                        "--expand-k", "1", "--clamp-min", "-0.05", "--intermediate-size", "64",
                        "--seed", "3"],
     "grouped kv heads (4 query heads, 2 kv heads), expand_k 1, clamp_min -0.05"),
    ("gla-nogate", GLA + ["--no-output-gate", "--feature-map", "relu", "--tie", "--seed", "4"],
     "use_output_gate false, feature_map relu (as fla's gla_7B.json), tied embeddings"),
    ("retnet", BASE + ["--type", "retnet", "--layers", "2", "--heads", "4", "--intermediate-size", "64",
                       "--seed", "5"],
     "RetNet: 4 heads (decays 1-2^-5 .. 1-2^-8), rotary over dk 16, expand_v 2"),
    ("retnet-bf16", BASE + ["--type", "retnet", "--layers", "2", "--heads", "2", "--kv-heads", "1",
                            "--tie", "--dtype", "bf16", "--seed", "6"],
     "RetNet in bf16, grouped kv heads, tied, the MLP width rule (hidden_ratio 2: 256)"),
    ("hgrn2", HGRN2 + ["--seed", "7"], "HGRN2 with lower bounds, 4 heads of 16"),
    ("hgrn2-nolb", HGRN2 + ["--layers", "2", "--no-lower-bound", "--short-conv", "--seed", "8"],
     "HGRN2 without lower bounds, short convolutions (no activation)"),
    ("gla-hybrid", GLA + ["--layers", "3", "--attn-layers", "1", "--attn-heads", "4",
                          "--attn-kv-heads", "2", "--seed", "9"],
     "GLA with full softmax attention at layer 1 (attn as a dict, 4 heads, 2 kv heads)"),
    ("gla-hybrid-window", GLA + ["--layers", "3", "--attn-layers", "2", "--attn-heads", "2",
                                 "--attn-window", "16", "--qkv-bias", "--attn-rope-theta", "500000",
                                 "--attn-list", "--seed", "10"],
     "GLA with windowed attention at layer 2 (attn as a list, window 16, qkv_bias, rope_theta 5e5)"),
    ("hgrn2-hybrid", HGRN2 + ["--attn-layers", "1", "--attn-heads", "4", "--attn-window", "32",
                              "--seed", "11"],
     "HGRN2 with windowed attention at layer 1 (its lower-bound row still counts)"),
    ("gla-bf16", GLA + ["--old-config", "--dtype", "bf16", "--seed", "1"], "gla's weights in bf16"),
    ("hgrn2-bf16", HGRN2 + ["--dtype", "bf16", "--seed", "7"], "hgrn2's weights in bf16"),
]
PREFIXES = [2, 17, 64, 200]

def prompt_ids():
    with open(os.path.join(ROOT, "models", "kjv", "heldout.txt"), "rb") as f:
        return list(f.read(300))


def generate(out_root):
    ids = prompt_ids()
    out = {
        "about": "fla fixtures: reference.py (float64) on each directory; mean_nll is the mean over "
                 "the n-1 predictions of ids[1:] from ids[:-1]; top5 = the last position's 5 "
                 "largest logits; rotary angles in float64",
        "torch": torch.__version__,
        "prompt": "the first 300 bytes of models/kjv/heldout.txt, one id per byte",
        "fixtures": {},
    }
    for name, args, what in FIXTURES:
        d = os.path.join(out_root, name)
        subprocess.run([sys.executable, os.path.join(HERE, "make_model.py"), d] + args, check=True)
        model, _ = reference.load_model(d)
        mean_nll, count, logits = model.nll(ids)
        top = torch.topk(logits[-1], 5)
        out["fixtures"][name] = {
            "what": what,
            "make_model_args": args,
            "layers": model.describe(),
            "files": {f: os.path.getsize(os.path.join(d, f)) for f in sorted(os.listdir(d))},
            "count": count,
            "mean_nll": mean_nll,
            "top5_ids": [int(i) for i in top.indices],
            "top5_logits": [float(v) for v in top.values],
            "mean_nll_prefix": {str(n): model.nll(ids[:n])[0] for n in PREFIXES},
        }
        print(f"{name:18s} {model.describe():4s} {mean_nll:.17g}", file=sys.stderr)
    nll_txt = "".join(f"{n} {format(e['mean_nll'], '.17g')}\n" for n, e in out["fixtures"].items())
    return ids, dumps(out) + "\n", nll_txt


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true",
                    help="write into a temporary directory and compare with the committed files")
    a = ap.parse_args()
    if a.check:
        with tempfile.TemporaryDirectory() as tmp:
            ids, exp_json, nll_txt = generate(tmp)
            bad = []
            for name, _, _ in FIXTURES:
                for f in ("config.json", "model.safetensors"):
                    with open(os.path.join(tmp, name, f), "rb") as x, open(os.path.join(HERE, name, f), "rb") as y:
                        if x.read() != y.read():
                            bad.append(f"{name}/{f}")
        for f, text in (("expected.json", exp_json), ("expected_nll.txt", nll_txt),
                        ("prompt_ids.txt", "".join(f"{i}\n" for i in ids))):
            with open(os.path.join(HERE, f)) as y:
                if y.read() != text:
                    bad.append(f)
        if bad:
            print("make_fixtures --check: differ from the committed files: " + ", ".join(bad), file=sys.stderr)
            sys.exit(1)
        print("make_fixtures --check: every fixture, expected.json and expected_nll.txt regenerate "
              "byte for byte", file=sys.stderr)
        return
    ids, exp_json, nll_txt = generate(HERE)
    with open(os.path.join(HERE, "prompt_ids.txt"), "w") as f:
        f.write("".join(f"{i}\n" for i in ids))
    with open(os.path.join(HERE, "expected.json"), "w") as f:
        f.write(exp_json)
    with open(os.path.join(HERE, "expected_nll.txt"), "w") as f:
        f.write(nll_txt)


if __name__ == "__main__":
    main()
