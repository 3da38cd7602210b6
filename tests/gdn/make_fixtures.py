#!/usr/bin/env python3
"""Regenerates the committed Gated DeltaNet fixtures, prompt_ids.txt, expected.json and
expected_nll.txt.

  /usr/bin/python3 tests/gdn/make_fixtures.py              (from anywhere; ~30 s)
  /usr/bin/python3 tests/gdn/make_fixtures.py --check      (regenerate into a temporary directory
                                                            and compare byte for byte)
  /usr/bin/python3 tests/gdn/make_fixtures.py --sensitivity  (how far each misreading moves the NLLs)

The prompt is the first 300 bytes of models/kjv/heldout.txt, one id per byte (the fixtures'
vocabulary is 300; no tokenizer). Each fixture directory is written by make_model.py from a spec
below; reference.py (float64) gives the mean NLL over the prompt, the NLLs of four prefixes, the
last position's top-5 and 16 greedy ids continued from the state after the prompt.
Deterministic: seeded weights, a fixed writer, float64 arithmetic in a fixed order.
"""

import argparse
import os
import sys
import tempfile

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
sys.path.insert(0, HERE)
from pyref import dumps  # noqa: E402
import make_model  # noqa: E402
import reference  # noqa: E402

FIXTURES = [
    # name, make_model spec, what it covers
    ("qwen35-hybrid",
     {"kind": "qwen35", "layers": "LLLF", "Hk": 2, "Hv": 4, "dk": 16, "dv": 16, "heads": 2,
      "kv_heads": 1, "head_dim": 32, "intermediate": 48, "seed": 1},
     "Qwen3.5 as the Hub ships it: multimodal config.json (qwen3_5, text_config, vision_config), "
     "tensors under model.language_model., skipped model.visual.* and mtp.* tensors; layers "
     "linear x3 + full (3:1); 2 key heads over 4 value heads (dk = dv = 16); attention 2 heads "
     "over 1 kv head, head_dim 32, rotary on 8 dims, rope_theta 1e7; untied; float32"),
    ("qwen35-hybrid-tied-bf16",
     {"kind": "qwen35", "layers": "LFLF", "Hk": 2, "Hv": 2, "dk": 24, "dv": 32, "heads": 4,
      "kv_heads": 2, "head_dim": 16, "rope_theta": 10000.0, "tie": True, "dtype": "bf16",
      "intermediate": 48, "gain": 4.0, "seed": 9},
     "Qwen3.5, tied embeddings (no lm_head.weight), bfloat16; layer_types linear, full, linear, "
     "full; dk 24 (not a multiple of 16) with dv 32, equal key and value heads; attention 4 heads "
     "over 2 kv heads, head_dim 16, rotary on 4 dims, rope_theta 1e4"),
    ("qwen35-gdn",
     {"kind": "qwen35", "layers": "LLL", "Hk": 1, "Hv": 4, "dk": 32, "dv": 16, "multimodal": False,
      "extras": False, "seed": 7},
     "Qwen3.5's text-only layout (model_type qwen3_5_text, tensors under model.), only "
     "linear_attention layers; 1 key head of 32 over 4 value heads of 16"),
    ("fla-gdn",
     {"kind": "gated_deltanet", "layers": 3, "heads": 2, "v_heads": 4, "head_dim": 16,
      "expand_v": 2.0, "attn": {"layers": [1], "num_heads": 4, "num_kv_heads": 2}, "seed": 4},
     "fla gated_deltanet: short convolutions on q, k, v separately, output gate (g_proj, "
     "FusedRMSNormGated); 2 key heads of 16 over 4 value heads of 32 (num_v_heads, expand_v 2); "
     "fla's softmax attention at layer 1 (4 heads over 2 kv heads, rotary on all 16 dims)"),
    ("fla-gdn-plain",
     {"kind": "gated_deltanet", "layers": 2, "heads": 2, "head_dim": 24, "expand_v": 1.0,
      "use_gate": False, "short_conv": False, "neg_eigval": True, "with_D": True,
      "old_config": True, "tie": True, "gain": 4.0, "seed": 5},
     "fla gated_deltanet of early 2025: config without num_v_heads, the unused attn.D tensor; "
     "use_short_conv false (q, k, v = silu(proj)), use_gate false (o_norm only), "
     "allow_neg_eigval true (beta = 2 sigmoid(b)); head_dim 24; tied"),
    ("fla-deltanet",
     {"kind": "delta_net", "layers": 2, "heads": 2, "expand_k": 0.5, "expand_v": 1.0,
      "use_gate": False, "seed": 6},
     "fla delta_net with its defaults (no decay, silu + l2 on q and k, beta, short convolutions, "
     "no output gate): 2 heads, dk 16, dv 32"),
    ("qwen35-hub-mixed",
     {"kind": "qwen35", "layers": "LLLF", "Hk": 2, "Hv": 4, "dk": 16, "dv": 32, "heads": 4,
      "kv_heads": 1, "head_dim": 16, "tie": True, "dtype": "bf16", "intermediate": 48,
      "f32_tensors": ["linear_attn.A_log", "linear_attn.norm.weight"], "gain": 4.0, "seed": 10},
     "Qwen3.5 as the 0.8B/2B checkpoints are stored: multimodal, tied, bfloat16 except "
     "linear_attn.A_log and linear_attn.norm.weight in float32 (mixed dtypes in one file); "
     "2 key heads of 16 over 4 value heads of 32; attention 4 heads over 1 kv head, head_dim 16"),
    ("qwen35-sharded",
     {"kind": "qwen35", "layers": "LLF", "Hk": 1, "Hv": 2, "dk": 16, "dv": 16, "heads": 2,
      "kv_heads": 2, "head_dim": 16, "intermediate": 32, "dtype": "bf16", "shards": 3, "seed": 11},
     "Qwen3.5 in three safetensors shards with model.safetensors.index.json (the larger "
     "checkpoints' form; the vision and mtp tensors in the last shard), bfloat16, untied; "
     "layers linear, linear, full; 1 key head over 2 value heads of 16; attention 2 heads, 2 kv "
     "heads (no grouping), head_dim 16"),
]
PREFIXES = [2, 17, 64, 200]
GREEDY = 16


def prompt_ids():
    with open(os.path.join(ROOT, "models", "kjv", "heldout.txt"), "rb") as f:
        return list(f.read(300))


def evaluate(model, ids):
    mean_nll, count, logits, state = model.nll(ids)
    top = torch.topk(logits[-1], 5)
    greedy, margin = model.greedy(logits[-1], state, GREEDY)
    return {"count": count, "mean_nll": mean_nll,
            "mean_nll_prefix": {str(n): model.nll(ids[:n])[0] for n in PREFIXES},
            "top5_ids": [int(i) for i in top.indices], "top5_logits": [float(v) for v in top.values],
            "greedy_ids": greedy, "greedy_min_margin": margin}


def generate(out_root, names=None):
    ids = prompt_ids()
    out = {
        "about": "Gated DeltaNet fixtures: reference.py (float64) on each directory; mean_nll is the "
                 "mean over the n-1 predictions of ids[1:] from ids[:-1]; top5 = the last position's "
                 "5 largest logits; greedy_ids = 16 argmax ids fed back one at a time after the "
                 "prompt, greedy_min_margin the smallest top-1/top-2 logit gap among them",
        "torch": torch.__version__,
        "prompt": "the first 300 bytes of models/kjv/heldout.txt, one id per byte",
        "fixtures": {},
    }
    for name, spec, what in FIXTURES:
        if names and name not in names:
            continue
        d = os.path.join(out_root, name)
        make_model.write(d, spec)
        model, _ = reference.load_model(d)
        e = {"what": what, "spec": spec, "layers": model.describe(), "dtypes": model.dtypes,
             "rules": model.rules, "skipped_tensors": model.skipped,
             "files": {f: os.path.getsize(os.path.join(d, f)) for f in sorted(os.listdir(d))}}
        e.update(evaluate(model, ids))
        out["fixtures"][name] = e
        print(f"{name:24s} {model.describe():5s} {e['mean_nll']:.17g}  margin {e['greedy_min_margin']:.3g}",
              file=sys.stderr)
    nll_txt = "".join(f"{n} {format(e['mean_nll'], '.17g')}\n" for n, e in out["fixtures"].items())
    return ids, dumps(out) + "\n", nll_txt


# --------------------------------------------------------------------------------------------
# Sensitivity: each misreading the reference can be told to make, per fixture

VARIANTS = [
    ("value head h reads key head h mod Hk (tiled, llama.cpp's reordered layout read as HF's)", "tile-heads"),
    ("norms read as plain w instead of (1 + w) (Qwen only)", "plain-norms"),
    ("no sigmoid output gate in Qwen's attention", "no-attn-gate"),
    ("Qwen's q_proj read as all query rows then all gate rows (not per head)", "split-qgate"),
    ("rotary over the whole head_dim (partial_rotary_factor ignored)", "full-rope"),
    ("the gated output norm read as (1 + w)", "zc-gated-norm"),
]


def sensitivity():
    ids = prompt_ids()
    with tempfile.TemporaryDirectory() as tmp:
        rows = []
        base = {}
        models = {}
        for name, spec, _ in FIXTURES:
            make_model.write(os.path.join(tmp, name), spec)
            models[name] = reference.load_model(os.path.join(tmp, name))[0]
            base[name] = models[name].nll(ids)[0]
        for label, v in VARIANTS:
            row = [label]
            for name, _, _ in FIXTURES:
                m = models[name]
                m.variants = {v}
                row.append(f"{abs(m.nll(ids)[0] - base[name]) / base[name]:.2g}")
                m.variants = set()
            rows.append(row)
        # numeric details, by editing the loaded model
        for label, kind, edit in [
            ("l2norm eps 1e-6 -> 0", "delta", lambda L: L.update(l2eps=0.0)),
            ("gated norm eps -> 1e-5", "delta", lambda L: L.update(eps=1e-5)),
            ("no decay (g = 0)", "delta", lambda L: L.update(decay=False)),
            ("beta not doubled (allow_neg_eigval ignored)", "delta", lambda L: L.update(neg_eigval=False)),
            ("rope_theta 1e7 <-> 1e4 (Qwen attention)", "qwen_attn",
             lambda L: L.update(theta=1e4 if L["theta"] > 1e5 else 1e7)),
        ]:
            row = [label]
            for name, _, _ in FIXTURES:
                m = reference.load_model(os.path.join(tmp, name))[0]
                for L in m.layers:
                    if L["kind"] == kind:
                        edit(L)
                row.append(f"{abs(m.nll(ids)[0] - base[name]) / base[name]:.2g}")
            rows.append(row)
    print("| change | " + " | ".join(n for n, _, _ in FIXTURES) + " |")
    print("|---|" + "---|" * len(FIXTURES))
    for r in rows:
        print("| " + " | ".join(r) + " |")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true",
                    help="write into a temporary directory and compare with the committed files")
    ap.add_argument("--sensitivity", action="store_true")
    a = ap.parse_args()
    if a.sensitivity:
        sensitivity()
        return
    if a.check:
        with tempfile.TemporaryDirectory() as tmp:
            ids, exp_json, nll_txt = generate(tmp)
            bad = []
            for name, _, _ in FIXTURES:
                for f in sorted(os.listdir(os.path.join(tmp, name))):
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
        print("make_fixtures --check: every fixture, prompt_ids.txt, expected.json and expected_nll.txt "
              "regenerate byte for byte", file=sys.stderr)
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
