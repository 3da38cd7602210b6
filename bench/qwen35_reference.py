#!/usr/bin/env python3
"""recur's bench_qwen35 beside eager PyTorch at the same shapes, threads and prompt lengths.

  /usr/bin/python3 bench/qwen35_reference.py RECUR_JSON [--decode N] [--dtype bf16|f32] [--torch-prompts 512]

RECUR_JSON is bench_qwen35's --benchmark_out (JSON). For each Qwen3.5 shape it measured (one
model in memory at a time), runs tests/gdn/torch_bench.py once per prompt length bench_qwen35
used (512 and 4,096), with its thread counts (decode after the shortest prompt, as bench_qwen35
does), then prints one table: decode and prefill tokens/s of recur (bf16 and q8 weights) and of
PyTorch with recur's lead over it, recur's decode time over the time to read its weights once,
its prefill as a fraction of the FMA peak, and the state's bytes after each prompt (PyTorch's in
its own rows, from its byte formulas: S in float32, the convolutions and KV cache in its dtype). `tools/build.sh bench qwen35` runs bench_qwen35 and then this.
"""

import argparse
import json
import os
import re
import subprocess
import sys

SHAPES = {"qwen35-0.8B": "0.8b", "qwen35-2B": "2b"}
NAN = float("nan")


def recur_results(path):
    with open(path) as f:
        doc = json.load(f)
    decode_prompt = int(doc["context"].get("decode_prompt_tokens", 512))
    out = {}  # (shape, format, kind, prompt, threads) -> benchmark entry
    for b in doc["benchmarks"]:
        m = re.match(r"BM_Qwen35Prefill/([^/]+)/([^/]+)/shape:\d+/format:\d+/prompt:(\d+)/threads:(\d+)",
                     b["name"])
        if m:
            out[(m.group(1), m.group(2), "prefill", int(m.group(3)), int(m.group(4)))] = b
        m = re.match(r"BM_Qwen35Decode/([^/]+)/([^/]+)/shape:\d+/format:\d+/threads:(\d+)", b["name"])
        if m:
            out[(m.group(1), m.group(2), "decode", decode_prompt, int(m.group(3)))] = b
    return decode_prompt, out


def torch_run(bench, shape, dtype, prompt, decode, threads):
    print(f"qwen35_reference: PyTorch ({dtype}) at {shape}, prompt {prompt}, {decode} decode tokens, "
          f"threads {threads} ...", file=sys.stderr, flush=True)
    run = subprocess.run([sys.executable, bench, "--shape", shape, "--dtype", dtype,
                          "--prefill", str(prompt), "--decode", str(decode),
                          "--threads", ",".join(map(str, threads))],
                         check=True, capture_output=True, text=True)
    out = json.loads(run.stdout)
    print(f"qwen35_reference: torch {out['torch']}, BLAS {', '.join(out['blas']) or 'none'}",
          file=sys.stderr)
    return out


def cell(ours, theirs):
    """recur's figure, and its lead over PyTorch's when there is one."""
    if ours != ours:
        return "-"
    if theirs and theirs == theirs:
        return f"{ours:.2f} ({ours / theirs:.1f}x)"
    return f"{ours:.2f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("recur_json")
    ap.add_argument("--decode", type=int, default=8, help="PyTorch's decode tokens")
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "f32"],
                    help="PyTorch's weights (bf16: the published dtype and recur's; f32 needs 4 bytes "
                         "a weight, 8 GB at 2B, and a fast BLAS)")
    ap.add_argument("--torch-prompts", default="",
                    help="the prompt lengths PyTorch runs, e.g. 512 (default: every length recur ran; "
                         "eager PyTorch takes many minutes over 4,096 tokens at 2B)")
    a = ap.parse_args()
    decode_prompt, recur = recur_results(a.recur_json)
    bench = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "gdn", "torch_bench.py")
    torch = {}  # (name, prompt, threads) -> PyTorch's run
    torch_state = {}  # (name, prompt) -> PyTorch's state bytes after the prompt
    for name, shape in SHAPES.items():
        keys = [k for k in recur if k[0] == name]
        threads = sorted({k[4] for k in keys})
        wanted = {int(p) for p in a.torch_prompts.split(",") if p} or {k[3] for k in keys}
        for prompt in sorted({k[3] for k in keys} & wanted):
            out = torch_run(bench, shape, a.dtype, prompt, a.decode if prompt == decode_prompt else 0,
                            threads)
            for r in out["runs"]:
                torch[(name, prompt, r["threads"])] = r
            # PyTorch's state at every length recur ran: its recurrent part is constant and its
            # KV cache grows by the same bytes a token, so one run gives them all.
            for p in {k[3] for k in keys}:
                torch_state[(name, p)] = (out["recurrent_state_bytes"] +
                                          p * out["kv_cache_bytes_per_token"])
    prompts = sorted({k[3] for k in recur if k[2] == "prefill"})

    def get(name, fmt, kind, prompt, t, counter):
        b = recur.get((name, fmt, kind, prompt, t))
        return b[counter] if b and counter in b else NAN

    print()
    print(f"recur (bf16 and q8 weights) against eager PyTorch ({a.dtype} weights); decode after "
          f"{decode_prompt} prompt tokens; in brackets recur's lead over PyTorch")
    head = "| model | threads | weights | decode tok/s | x_read_time |"
    rule = "|---|---|---|---|---|"
    for p in prompts:
        head += f" prefill {p} tok/s | peak_frac |"
        rule += "---|---|"
    head += "".join(f" state bytes at {p} |" for p in prompts)
    rule += "---|" * len(prompts)
    print(head)
    print(rule)
    for name in SHAPES:
        for t in sorted({k[4] for k in recur if k[0] == name}):
            for fmt in ("bf16", "q8"):
                if not any(k[:2] == (name, fmt) and k[4] == t for k in recur):
                    continue
                tr = torch.get((name, decode_prompt, t), {})
                row = (f"| {name} | {t} | {fmt} "
                       f"| {cell(get(name, fmt, 'decode', decode_prompt, t, 'tokens/s'), tr.get('decode_tok_per_s'))} "
                       f"| {get(name, fmt, 'decode', decode_prompt, t, 'x_read_time'):.2f} |")
                for p in prompts:
                    pr = torch.get((name, p, t), {}).get("prefill_tok_per_s")
                    row += (f" {cell(get(name, fmt, 'prefill', p, t, 'tokens/s'), pr)} "
                            f"| {get(name, fmt, 'prefill', p, t, 'peak_frac'):.3f} |")
                for p in prompts:
                    s = get(name, fmt, "prefill", p, t, "state_bytes")
                    row += f" {s:,.0f} |" if s == s else " - |"
                print(row)
            tr = torch.get((name, decode_prompt, t), {})
            dr = tr.get("decode_tok_per_s")
            row = f"| {name} | {t} | PyTorch {a.dtype} | {f'{dr:.2f}' if dr else '-'} | - |"
            for p in prompts:
                pr = torch.get((name, p, t), {}).get("prefill_tok_per_s")
                row += f" {f'{pr:.2f}' if pr else '-'} | - |"
            for p in prompts:
                s = torch_state.get((name, p))
                row += f" {s:,} |" if s is not None else " - |"
            print(row)


if __name__ == "__main__":
    main()
