# The GIL is released while recur computes: Python threads run states of one model at once.
import os
import threading
import time

import pytest

import recur
from conftest import ROOT

STEPS = 400


def run(state, ids, out):
    logits = None
    for t in ids:
        logits = state.step(t)
    out.append(logits.tobytes())


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="one core: threads cannot overlap")
def test_two_threads_stepping_two_states_finish_faster_than_one_doing_both():
    model = recur.Model(ROOT / "models" / "kjv", threads=1)  # one core per state
    ids = [(i * 37) % model.vocab_size for i in range(STEPS)]
    best = None
    for _ in range(5):  # the machine may be shared: the best of five
        serial_out, parallel_out = [], []
        a, b = model.new_state(), model.new_state()
        t0 = time.perf_counter()
        run(a, ids, serial_out)
        run(b, ids, serial_out)
        serial = time.perf_counter() - t0
        a, b = model.new_state(), model.new_state()
        threads = [threading.Thread(target=run, args=(s, ids, parallel_out)) for s in (a, b)]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        parallel = time.perf_counter() - t0
        assert parallel_out == serial_out  # the same bytes on any thread
        ratio = parallel / serial
        best = ratio if best is None else min(best, ratio)
        if best < 0.8:
            break
    assert best < 0.8, f"two threads took {best:.2f} of one thread's time"


def test_threads_sharing_one_state_take_turns():
    model = recur.Model.random(seed=4, threads=1)
    shared = model.new_state()
    ids = list(range(1, 101))
    threads = [threading.Thread(target=lambda: [shared.step(t) for t in ids]) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert shared.tokens == 200 and shared.failure == ""


def test_python_runs_while_a_state_computes():
    # With the GIL held through a call, this thread could not count while the prefill runs.
    model = recur.Model(ROOT / "models" / "kjv", threads=1)
    state = model.new_state()
    ids = [(i * 37) % model.vocab_size for i in range(1500)]
    done = threading.Event()
    worker = threading.Thread(target=lambda: (state.prefill(ids), done.set()))
    count = 0
    worker.start()
    while not done.is_set():
        count += 1
    worker.join()
    assert count > 10000, f"the main thread counted only {count} while the prefill ran"
