"""Python's overhead per State.step(): the same steps through a Python loop and through one
native call (State._step_many, the library's loop), in one process, on the same state.

    tools/build.sh bench python          # builds the module and runs this
    python3 bench/bench_python.py [--skip-large]

Models: a tiny one (64 wide, 2 layers, 256 ids: the step is a few microseconds, so the
overhead shows), the built-in one (models/kjv), and RWKV-7 0.4B's shape (1024 wide, 24 layers,
65,536 ids, bf16, random weights written by `recur make-model`), where it should be under 2% of
the step. Figures: the best of 7 interleaved repeats, microseconds per step.
"""
import argparse
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "build" / "release" / "python"))
import recur  # noqa: E402


def per_step(fn, n, repeats):
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) / n)
    return statistics.median(times)


def measure(name, model, n, repeats, threads):
    ids = [(i * 7919 + 13) % model.vocab_size for i in range(n)]
    state = model.new_state()
    state._step_many(ids[:8])  # warm: first-touch of the buffers, the thread pool

    def python_loop():
        step = state.step
        for t in ids:
            step(t)

    def python_loop_copy():
        step = state.step
        for t in ids:
            step(t, copy=True)

    def native_loop():
        state._step_many(ids)

    # Interleaved, so that a change in the machine's load falls on all three alike.
    nat, py, pyc = [], [], []
    for _ in range(repeats):
        nat.append(per_step(native_loop, n, 1))
        py.append(per_step(python_loop, n, 1))
        pyc.append(per_step(python_loop_copy, n, 1))
    # The best of the repeats: on a shared machine, what other work adds is noise, not overhead.
    nat, py, pyc = (min(x) for x in (nat, py, pyc))
    print(f"{name:<34} {threads:>7} {nat * 1e6:>12.2f} {py * 1e6:>12.2f} "
          f"{(py - nat) * 1e6:>10.2f} {100 * (py - nat) / nat:>8.2f}% "
          f"{(pyc - nat) * 1e6:>13.2f}", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--skip-large", action="store_true", help="leave out RWKV-7 0.4B's shape")
    ap.add_argument("--recur", default=str(ROOT / "build" / "release" / "tools" / "recur"))
    a = ap.parse_args()
    print(f"kernels: {recur.isa()}; µs per step: the library's loop, Python's loop over "
          f"step(), the difference; the last column with copy=True")
    print(f"{'model':<34} {'threads':>7} {'native':>12} {'python':>12} {'overhead':>10} "
          f"{'':>9} {'overhead copy':>13}")
    with tempfile.TemporaryDirectory() as tmp:
        tiny = pathlib.Path(tmp) / "tiny"
        subprocess.run([a.recur, "make-model", tiny, "--hidden", "64", "--layers", "2",
                        "--vocab", "256"], check=True, capture_output=True)
        measure("tiny linear_attn (64 x 2, 256 ids)", recur.Model(tiny, threads=1), 20000, 7, 1)
        measure("built-in kjv (256 x 4, 4096 ids)", recur.Model(ROOT / "models" / "kjv", threads=1),
                3000, 7, 1)
        if not a.skip_large:
            big = pathlib.Path(tmp) / "rwkv7-0.4b"
            subprocess.run([a.recur, "make-model", big, "--arch", "rwkv7", "--hidden", "1024",
                            "--layers", "24", "--heads", "16", "--vocab", "65536", "--dtype",
                            "bf16"], check=True, capture_output=True)
            for threads in (1, 0):
                model = recur.Model(big, threads=threads)
                label = "all" if threads == 0 else str(threads)
                measure("RWKV-7 0.4B shape (bf16)", model, 60, 7, label)


if __name__ == "__main__":
    main()
