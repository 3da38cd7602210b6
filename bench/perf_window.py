#!/usr/bin/env python3
"""Where decode's time goes, per thread: the samples of a `perf record -T` run of one
BM_Qwen35Decode or BM_Rwkv7Decode configuration, in the window of its last 9 steps.

    perf record -F 1999 -T -o q8-t2.data -- build/release/bench/bench_qwen35 \\
        --benchmark_filter='BM_MemoryBandwidth/threads:1|BM_Qwen35Decode/qwen35-0.8B/q8/.*threads:2/' \\
        > q8-t2.out 2>&1
    bench/perf_window.py q8-t2.data q8-t2.out

The window ends at the run's last sample in a product kernel and spans 9 times the benchmark's
real time per token (its 8 timed steps and one warm-up step), read from its output; before it,
the model was built and the prompt prefilled. The calling thread is the process's first.
"""
import collections
import re
import subprocess
import sys


def samples(data):
    out = subprocess.run(["perf", "script", "-i", data, "-F", "tid,time,ip,sym"],
                         capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        m = re.match(r"\s*(\d+)\s+([\d.]+):\s+[0-9a-f]+\s+(.*)", line)
        if m:
            yield int(m.group(1)), float(m.group(2)), m.group(3).strip()


def short(sym):
    sym = re.sub(r"recur::kernels::N_[A-Z0-9_]+::", "", sym)
    sym = re.sub(r"<.*>", "<>", sym)
    return re.sub(r"\(.*", "", sym)[:60]


def main():
    data, out, top = sys.argv[1], sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 10
    ms = float(re.search(r"real_time\s+([\d.]+) ms", open(out).read()).group(1))
    rows = list(samples(data))
    end = max(t for _, t, s in rows if "MultiplyPanels" in s or "MultiplyQ" in s)
    start = end - 9 * ms / 1000
    window = [(tid, s) for tid, t, s in rows if start <= t <= end]
    caller = rows[0][0]
    print(f"{ms} ms per token; window {end - start:.2f} s, {len(window)} samples")
    for tid, n in collections.Counter(tid for tid, _ in window).most_common():
        print(f"thread {tid} ({'caller' if tid == caller else 'helper'}): {n} samples")
        for sym, k in collections.Counter(short(s) for t, s in window if t == tid).most_common(top):
            print(f"  {100 * k / n:5.1f}%  {sym}")


if __name__ == "__main__":
    main()
