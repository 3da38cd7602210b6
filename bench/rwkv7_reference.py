#!/usr/bin/env python3
"""recur's bench_rwkv7 beside eager PyTorch at the same shapes, threads and prompt length.

  /usr/bin/python3 bench/rwkv7_reference.py RECUR_JSON [--decode N] [--dtype f32|bf16]

RECUR_JSON is bench_rwkv7's --benchmark_out (JSON). For each RWKV-7 shape it measured (one
model in memory at a time), runs tests/rwkv7/torch_bench.py with the prompt length and thread
counts bench_rwkv7 used, then prints one table: prefill and decode tokens/s of recur (bf16 and
q8 weights) and of PyTorch, recur's prefill as a fraction of the FMA peak, its decode time over
the time to read its weights once, and the state's bytes. `tools/build.sh bench rwkv7` runs
bench_rwkv7 and then this.
"""

import argparse
import json
import os
import re
import subprocess
import sys

SHAPES = {"rwkv7-0.4B": "0.4b", "rwkv7-1.5B": "1.5b"}


def recur_results(path):
    with open(path) as f:
        doc = json.load(f)
    prompt = int(doc["context"].get("prompt_tokens", 512))
    out = {}  # (shape, format, kind, threads) -> benchmark entry
    for b in doc["benchmarks"]:
        m = re.match(r"BM_Rwkv7(Prefill|Decode)/([^/]+)/([^/]+)/shape:\d+/format:\d+/threads:(\d+)",
                     b["name"])
        if m:
            out[(m.group(2), m.group(3), m.group(1).lower(), int(m.group(4)))] = b
    return prompt, out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("recur_json")
    ap.add_argument("--decode", type=int, default=8, help="PyTorch's decode tokens")
    ap.add_argument("--dtype", default="f32", choices=["f32", "bf16"],
                    help="PyTorch's weights (f32: what a CPU user loads; bf16 matrix products are "
                         "slow on CPUs without bf16 instructions)")
    a = ap.parse_args()
    prompt, recur = recur_results(a.recur_json)
    bench = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "rwkv7",
                         "torch_bench.py")
    rows = []
    for name, shape in SHAPES.items():
        threads = sorted({t for (s, _, _, t) in recur if s == name})
        if not threads:
            continue
        print(f"rwkv7_reference: PyTorch ({a.dtype}) at {name}, prompt {prompt}, {a.decode} decode "
              f"tokens, threads {threads} ...", file=sys.stderr, flush=True)
        run = subprocess.run([sys.executable, bench, "--shape", shape, "--dtype", a.dtype,
                              "--prefill", str(prompt), "--decode", str(a.decode),
                              "--threads", ",".join(map(str, threads))],
                             check=True, capture_output=True, text=True)
        torch = json.loads(run.stdout)
        print(f"rwkv7_reference: torch {torch['torch']}, BLAS {', '.join(torch['blas']) or 'none'}",
              file=sys.stderr)
        for r in torch["runs"]:
            rows.append((name, r["threads"], r, torch["state_bytes"]))
    print()
    print(f"recur (bf16 and q8 weights) against eager PyTorch ({a.dtype} weights), prompt {prompt} tokens")
    print("| model | threads | weights | prefill tok/s recur | peak_frac | PyTorch | ratio "
          "| decode tok/s recur | x_read_time | PyTorch | ratio | state bytes recur | PyTorch |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    nan = float("nan")
    for name, t, r, torch_state in rows:
        for fmt in ("bf16", "q8"):
            p = recur.get((name, fmt, "prefill", t))
            d = recur.get((name, fmt, "decode", t))
            if not p and not d:
                continue
            pr = p["tokens/s"] if p else nan
            dr = d["tokens/s"] if d else nan
            print(f"| {name} | {t} | {fmt} | {pr:.1f} | {p['peak_frac'] if p else nan:.2f} "
                  f"| {r['prefill_tok_per_s']:.1f} | {pr / r['prefill_tok_per_s']:.2f}x "
                  f"| {dr:.2f} | {d['x_read_time'] if d else nan:.2f} | {r['decode_tok_per_s']:.2f} "
                  f"| {dr / r['decode_tok_per_s']:.2f}x | {int(d['state_bytes']) if d else 0:,} "
                  f"| {torch_state:,} |")


if __name__ == "__main__":
    main()
