#!/usr/bin/env python3
"""recur's bench_model_dir and llama.cpp's llama-bench on the same models, alternately; the best
of --rounds for each engine and test; a Markdown table with the ratio recur / llama.cpp.

    compare.py --recur-bench BIN --llama-bench BIN [--rounds 3] [--threads 1,2] [--tg 64]
               [--depth 512] [--out FILE] -- SHAPE FORMAT RECUR_DIR GGUF PROMPTS [SHAPE ...]

Both engines run the same tests by the same rule (llama-bench's): "pp N" is one N-token prompt
from an empty state after an untimed warm-up prompt, logits of the last token only; "tg N" is
N single-token steps with full logits after an untimed --depth-token prompt. Each round runs
one engine's tests at every thread count, then the other's; the order swaps every round, so
that neither engine always follows the other.
"""
import argparse
import datetime
import json
import os
import platform
import re
import subprocess
import sys


LOADS = []  # the 1-minute load average before each engine's run: how busy the machine was


def run(cmd):
    try:
        with open("/proc/loadavg", encoding="ascii") as f:
            LOADS.append(float(f.read().split()[0]))
    except OSError:
        pass
    print("+ " + " ".join(cmd), file=sys.stderr, flush=True)
    done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if done.returncode != 0:
        sys.stderr.write(done.stderr[-4000:])
        raise SystemExit(f"compare.py: {cmd[0]} failed with status {done.returncode}")
    return done.stdout


def recur_round(a, model_dir, prompts):
    """{(test, threads): tokens/s} from one run of bench_model_dir."""
    out = run([a.recur_bench, model_dir, "--pp", prompts, "--tg", str(a.tg), "--depth", str(a.depth),
               "--threads", a.threads, "--benchmark_format=json"])
    found = {}
    for b in json.loads(out)["benchmarks"]:
        fields = dict(re.findall(r"(\w+):(\d+)", b["name"]))
        test = f"pp{fields['pp']}" if "pp" in fields else f"tg{fields['tg']}"
        found[(test, int(fields["threads"]))] = float(b["tokens/s"])
    return found


def llama_round(a, gguf, prompts):
    """{(test, threads): tokens/s} from llama-bench: the prompts from an empty context, then
    the generation after --depth tokens. -r 1: one timed run after llama-bench's warm-up."""
    found = {}
    common = [a.llama_bench, "-m", gguf, "-t", a.threads, "-r", "1", "-o", "jsonl"]
    for extra in (["-p", prompts, "-n", "0"], ["-p", "0", "-n", str(a.tg), "-d", str(a.depth)]):
        for line in run(common + extra).splitlines():
            if not line.startswith("{"):
                continue
            r = json.loads(line)
            test = f"pp{r['n_prompt']}" if r["n_prompt"] > 0 else f"tg{r['n_gen']}"
            found[(test, int(r["n_threads"]))] = float(r["avg_ts"])
    return found


def best(into, found):
    for k, v in found.items():
        into.setdefault(k, []).append(v)


def test_order(key):
    test, threads = key
    return (0 if test.startswith("pp") else 1, int(test[2:]), threads)


def machine():
    name = platform.processor() or platform.machine()
    try:
        for line in subprocess.run(["lscpu"], stdout=subprocess.PIPE, text=True).stdout.splitlines():
            if line.startswith("Model name:"):
                name = line.split(":", 1)[1].strip()
    except OSError:
        pass
    return name


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--recur-bench", required=True)
    p.add_argument("--llama-bench", required=True)
    p.add_argument("--llama-commit", default="?")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", default="1,2")
    p.add_argument("--tg", type=int, default=64)
    p.add_argument("--depth", type=int, default=512)
    p.add_argument("--out")
    p.add_argument("runs", nargs="+")
    a = p.parse_args()
    if len(a.runs) % 5:
        raise SystemExit("compare.py: runs come in fives: SHAPE FORMAT RECUR_DIR GGUF PROMPTS")

    done = []  # the rows of the models measured so far
    for i in range(0, len(a.runs), 5):
        shape, fmt, model_dir, gguf, prompts = a.runs[i:i + 5]
        got = {"recur": {}, "llama": {}}
        for r in range(a.rounds):
            engines = ["recur", "llama"] if r % 2 == 0 else ["llama", "recur"]
            for e in engines:
                best(got[e], recur_round(a, model_dir, prompts) if e == "recur"
                     else llama_round(a, gguf, prompts))
                # The table so far after every run: a run stopped early still leaves its figures.
                report(a, done + rows_of(shape, fmt, got), sys.stderr)
        done += rows_of(shape, fmt, got)

    report(a, done, sys.stdout)


def rows_of(shape, fmt, got):
    rows = []
    for key in sorted(set(got["recur"]) | set(got["llama"]), key=test_order):
        rows.append((shape, fmt, key[0], key[1], got["recur"].get(key, []), got["llama"].get(key, [])))
    return rows


def report(a, rows, stream):
    print_table(a, rows, stream)
    if a.out:
        with open(a.out, "w", encoding="utf-8") as f:
            print_table(a, rows, f)


def print_table(a, rows, f):
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    print(f"\n{now}, {machine()}, llama.cpp {a.llama_commit}; best of {a.rounds} rounds, engines "
          f"alternating; tg{a.tg} after a {a.depth}-token prompt; tokens/s (all rounds in brackets)",
          file=f)
    if LOADS:
        print(f"load average before the runs: {min(LOADS):.1f}-{max(LOADS):.1f} on {os.cpu_count()} CPUs",
              file=f)
    print(file=f)
    print("| shape | weights | test | threads | recur | llama.cpp | recur / llama.cpp |", file=f)
    print("|---|---|---|---|---|---|---|", file=f)
    def cell(v):
        return f"{max(v):.1f} [{', '.join(f'{x:.1f}' for x in v)}]" if v else "-"

    for shape, fmt, test, threads, mine, theirs in rows:
        fmt_name = fmt if fmt != "q8" else "q8 (llama.cpp q8_0)"
        ratio = f"{max(mine) / max(theirs):.2f}x" if mine and theirs and max(theirs) > 0 else "-"
        print(f"| {shape} | {fmt_name} | {test} | {threads} | {cell(mine)} | {cell(theirs)} | {ratio} |",
              file=f)
    f.flush()


if __name__ == "__main__":
    main()
