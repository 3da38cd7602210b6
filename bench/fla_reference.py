#!/usr/bin/env python3
"""recur's bench_fla beside eager PyTorch at the same shapes, threads and prompt length.

  /usr/bin/python3 bench/fla_reference.py RECUR_JSON [--decode N] [--dtype f32|bf16]

RECUR_JSON is bench_fla's --benchmark_out (JSON). For gla-1.3B and hgrn2-1.3B in turn (one
model in memory at a time), runs tests/fla/torch_bench.py with the prompt length bench_fla used
and the thread counts it measured, then prints one table: prefill and decode tokens/s of both,
their ratios, the state's bytes and recur's decode time over the time to read its weights once.
`tools/build.sh bench fla` runs bench_fla and then this.
"""

import argparse
import json
import os
import re
import subprocess
import sys

MODELS = {"gla-1.3B": "gla", "hgrn2-1.3B": "hgrn2"}


def recur_results(path):
    with open(path) as f:
        doc = json.load(f)
    prompt = int(doc["context"].get("prompt_tokens", 512))
    out = {}  # (model, kind, threads) -> benchmark entry
    for b in doc["benchmarks"]:
        m = re.match(r"BM_Fla(Prefill|Decode)/([^/]+)/shape:\d+/threads:(\d+)", b["name"])
        if m:
            out[(m.group(2), m.group(1).lower(), int(m.group(3)))] = b
    return prompt, out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("recur_json")
    ap.add_argument("--decode", type=int, default=8, help="PyTorch's decode tokens")
    ap.add_argument("--dtype", default="f32", choices=["f32", "bf16"],
                    help="PyTorch's weights (f32: what transformers loads by default; its bf16 "
                         "matrix products on a CPU without bf16 instructions are ~30x slower)")
    a = ap.parse_args()
    prompt, recur = recur_results(a.recur_json)
    bench = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fla", "torch_bench.py")
    rows = []
    for name, model in MODELS.items():
        threads = sorted({t for (m, _, t) in recur if m == name})
        if not threads:
            continue
        print(f"fla_reference: PyTorch ({a.dtype}) at {name}'s shape, prompt {prompt}, "
              f"{a.decode} decode tokens, threads {threads} ...", file=sys.stderr, flush=True)
        run = subprocess.run([sys.executable, bench, "--model", model, "--dtype", a.dtype,
                              "--prefill", str(prompt), "--decode", str(a.decode),
                              "--threads", ",".join(map(str, threads))],
                             check=True, capture_output=True, text=True)
        torch = json.loads(run.stdout)
        print(f"fla_reference: torch {torch['torch']}, BLAS {', '.join(torch['blas']) or 'none'}",
              file=sys.stderr)
        for r in torch["runs"]:
            t = r["threads"]
            p, d = recur.get((name, "prefill", t)), recur.get((name, "decode", t))
            rows.append((name, t, p, d, r, torch["state_bytes"]))
    print()
    print(f"recur (bf16 weights) against eager PyTorch ({a.dtype} weights), prompt {prompt} tokens")
    print("| model | threads | prefill tok/s recur | PyTorch | ratio | decode tok/s recur | PyTorch "
          "| ratio | recur x_read_time | state bytes recur | PyTorch |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name, t, p, d, r, torch_state in rows:
        pr = p["tokens/s"] if p else float("nan")
        dr = d["tokens/s"] if d else float("nan")
        print(f"| {name} | {t} | {pr:.1f} | {r['prefill_tok_per_s']:.1f} | {pr / r['prefill_tok_per_s']:.2f}x "
              f"| {dr:.2f} | {r['decode_tok_per_s']:.2f} | {dr / r['decode_tok_per_s']:.2f}x "
              f"| {d['x_read_time'] if d else float('nan'):.2f} "
              f"| {int(d['state_bytes']) if d else 0:,} | {torch_state:,} |")


if __name__ == "__main__":
    main()
