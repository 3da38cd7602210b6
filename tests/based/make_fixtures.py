#!/usr/bin/env python3
"""Regenerates the committed Based fixtures and tests/based/expected.json.

  /usr/bin/python3 tests/based/make_fixtures.py        (from the repository root)

Reads the prompt ids from tests/based/prompt_ids.txt (see README.md for how they were made),
writes tiny/, tiny-bf16/, schedule-360m/ with make_model.py, runs reference.py on each and
writes expected.json (floats printed with 17 significant digits).
"""

import json
import os
import subprocess
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from pyref import dumps  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import reference  # noqa: E402

TINY = ["--d-model", "64", "--layers", "6", "--heads", "4", "--feature-dim", "8",
        "--window-size", "16", "--vocab", "4093", "--n-inner", "256",
        "--la-layers", "1,4", "--swa-layers", "2,5", "--seed", "1"]
SCHED = ["--d-model", "32", "--layers", "27", "--heads", "4", "--feature-dim", "16",
         "--window-size", "256", "--vocab", "4096", "--n-inner", "256",
         "--la-layers", "1,6,11,16,21", "--swa-layers", "2,7,12,17,22", "--seed", "2"]
FIXTURES = [
    ("tiny", TINY + ["--dtype", "f32", "--safetensors"]),
    ("tiny-bf16", TINY + ["--dtype", "bf16"]),
    ("schedule-360m", SCHED + ["--dtype", "bf16"]),
]
PREFIXES = [2, 10, 64, 200]

def main():
    ids = reference.parse_ids(open(os.path.join(HERE, "prompt_ids.txt")).read())
    text = open(os.path.join(HERE, "prompt.txt"), encoding="utf-8").read()
    out = {
        "about": "Based fixtures: reference.py (float64) on each directory; mean_nll is the mean "
                 "over the n-1 predictions of ids[1:] from ids[:-1], log_softmax over "
                 "logits[:vocab_size]; top5 = the last position's 5 largest logits.",
        "torch": torch.__version__,
        "prompt": {"source": "first 300 ids of models/kjv/heldout.txt (its first 2000 bytes), "
                             "built-in kjv tokenizer, no special tokens; text = their decoding",
                   "n": len(ids), "text": text, "ids": ids},
        "fixtures": {},
    }
    for name, args in FIXTURES:
        d = os.path.join(HERE, name)
        subprocess.run([sys.executable, os.path.join(HERE, "make_model.py"), d] + args, check=True)
        files = sorted(f for f in os.listdir(d))
        entry = {"make_model_args": args, "files": {f: os.path.getsize(os.path.join(d, f)) for f in files}}
        weight_files = [f for f in ("pytorch_model.bin", "model.safetensors") if f in files]
        results = {}
        for wf in weight_files:
            model, _ = reference.load_model(d, os.path.join(d, wf))
            mean_nll, count, logits = model.nll(ids)
            last = logits[-1, :model.vocab_size]
            top = torch.topk(last, 5)
            results[wf] = (mean_nll, count, top, model, logits)
        mean_nll, count, top, model, logits = results[weight_files[0]]
        for wf, r in results.items():  # every weight file of a fixture gives the same numbers
            assert r[0] == mean_nll and torch.equal(r[4], logits), (name, wf)
        entry.update({
            "layers": "".join({"conv": "C", "la": "L", "swa": "W"}[k] for k in model.kinds),
            "d_model": model.D, "n_layer": model.n_layer, "vocab_size": model.vocab_size,
            "padded_vocab": model.V_pad, "window_keys": model.window_size // 2 + 1,
            "weights_checked": weight_files,
            "count": count,
            "mean_nll": mean_nll,
            "top5_ids": [int(i) for i in top.indices],
            "top5_logits": [float(v) for v in top.values],
            "mean_nll_prefix": {str(n): model.nll(ids[:n])[0] for n in PREFIXES},
        })
        out["fixtures"][name] = entry
        print(name, format(mean_nll, ".17g"), entry["files"], file=sys.stderr)
    with open(os.path.join(HERE, "expected.json"), "w") as f:
        f.write(dumps(out) + "\n")
    # The same mean NLLs one per line ("name value"), for the shell test that reads them.
    with open(os.path.join(HERE, "expected_nll.txt"), "w") as f:
        for name, entry in out["fixtures"].items():
            f.write(f"{name} {format(entry['mean_nll'], '.17g')}\n")


if __name__ == "__main__":
    main()
