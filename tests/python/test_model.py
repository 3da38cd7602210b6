# recur's Python module against the library's contracts and the CLI's bytes: scores, prefill and
# step, clones, saved states, generation, refusals (docs/python.md).
import gc
import json
import math

import numpy as np
import pytest

import recur
from conftest import ROOT, read_ids, run_cli

T = ROOT / "tests"
# One fixture of every family (tests/*/README.md): name -> (model path, prompt ids).
FAMILIES = {
    "linear_attn (kjv)": (ROOT / "models" / "kjv", None),
    "based": (T / "based" / "tiny", T / "based" / "prompt_ids.txt"),
    "gla": (T / "fla" / "gla", T / "fla" / "prompt_ids.txt"),
    "retnet": (T / "fla" / "retnet", T / "fla" / "prompt_ids.txt"),
    "hgrn2": (T / "fla" / "hgrn2-hybrid", T / "fla" / "prompt_ids.txt"),
    "rwkv7 (.pth)": (T / "rwkv7" / "h2x16-f32.pth", T / "rwkv7" / "prompt_ids.txt"),
    "qwen3.5": (T / "gdn" / "qwen35-hybrid", T / "gdn" / "prompt_ids.txt"),
    "gated_deltanet": (T / "gdn" / "fla-gdn", T / "gdn" / "prompt_ids.txt"),
    # No fixture in tests/: written by `recur make-model` (byte vocabulary).
    "transformers_are_rnns": (None, T / "fla" / "prompt_ids.txt"),
}
KJV_TEXT = (ROOT / "models" / "kjv" / "heldout.txt").read_text()[:400]


def prompt_of(model, ids_file, n=None):
    ids = read_ids(ids_file) if ids_file else model.tokenizer.encode(KJV_TEXT)
    return ids[:n] if n else ids


def sequential_mean(nll):
    # recur score adds the values in order; numpy's sum is pairwise, which rounds differently.
    total = 0.0
    for x in nll.tolist():
        total += x
    return total / len(nll)


@pytest.mark.parametrize("family", FAMILIES)
def test_scores_are_the_cli_digits(family, tmp_path):
    path, ids_file = FAMILIES[family]
    if path is None:
        path = tmp_path / "model"
        run_cli("make-model", path, "--arch", "transformers_are_rnns", "--seed", 5)
    model = recur.Model(path, threads=1)
    ids = [i % model.vocab_size for i in prompt_of(model, ids_file, 96)]
    nll = model.score(np.array(ids, dtype=np.int64), chunk=7)
    assert nll.dtype == np.float64 and nll.shape == (len(ids) - 1,)
    (tmp_path / "ids.txt").write_text("".join(f"{i}\n" for i in ids))
    cli = json.loads(run_cli("score", "-m", path, "--token-ids", tmp_path / "ids.txt", "--json"))
    assert cli["predicted"] == len(nll)
    assert sequential_mean(nll) == cli["mean_nll"], (sequential_mean(nll), cli["mean_nll"])


@pytest.mark.parametrize("family", ["linear_attn (kjv)", "rwkv7 (.pth)", "qwen3.5", "hgrn2"])
def test_prefill_then_step_gives_the_bytes_of_stepping_every_token(family):
    path, ids_file = FAMILIES[family]
    model = recur.Model(path, threads=1)
    ids = prompt_of(model, ids_file, 40)
    stepper = model.new_state()
    stepped = [stepper.step(t, copy=True) for t in ids]
    for chunk, split in [(1, 5), (3, 17), (64, 39), (8, 0)]:
        state = model.new_state(chunk=chunk)
        if split:
            state.prefill(ids[:split])
        rows = state.prefill(ids[split:], all_logits=True)
        assert rows.shape == (len(ids) - split, model.vocab_size)
        for i, row in enumerate(rows):
            assert row.tobytes() == stepped[split + i].tobytes(), f"chunk {chunk}, row {split + i}"
        assert state.tokens == len(ids)
        assert state.step(ids[0]).tobytes() == stepper.step(ids[0]).tobytes()
        stepper = model.new_state()
        for t in ids:
            stepper.step(t)


def test_step_returns_a_read_only_view_of_the_state_and_copy_on_request(kjv):
    state = kjv.new_state()
    view = state.step(5)
    first = view.copy()
    assert view.dtype == np.float32 and view.shape == (kjv.vocab_size,)
    assert not view.flags.writeable and not view.flags.owndata
    with pytest.raises(ValueError):
        view[0] = 1.0
    copied = state.step(6, copy=True)
    assert copied.flags.owndata and copied.flags.writeable
    assert view.tobytes() == copied.tobytes()  # the view follows the state
    assert view.tobytes() != first.tobytes()
    del state
    gc.collect()
    assert view.tobytes() == copied.tobytes()  # the view holds the state alive


def test_a_cloned_state_continues_exactly_as_the_original(kjv):
    ids = kjv.tokenizer.encode(KJV_TEXT)
    a = kjv.new_state()
    a.prefill(ids[:10])
    b = a.clone()
    assert b.tokens == a.tokens == 10 and b.nbytes == a.nbytes > 0
    for t in ids[10:]:
        assert a.step(t, copy=True).tobytes() == b.step(t, copy=True).tobytes()
    # Independent: stepping one leaves the other where it was.
    c = b.clone()
    before = c.logits.copy()
    b.step(3)
    assert c.logits.tobytes() == before.tobytes() and c.tokens == b.tokens - 1


def test_a_state_saved_in_python_continues_in_the_cli_and_the_reverse(kjv, tmp_path):
    ids = kjv.tokenizer.encode(KJV_TEXT)
    prompt, more = ids[:12], ids[12:20]
    path = ROOT / "models" / "kjv"
    # Python -> CLI: the CLI's greedy continuation of the saved state is Python's.
    state = kjv.new_state()
    state.prefill(prompt)
    state.save(tmp_path / "py.state")
    (tmp_path / "more.txt").write_text("".join(f"{i}\n" for i in more))
    out = run_cli("generate", "-m", path, "--load-state", tmp_path / "py.state", "--prompt-ids",
                  tmp_path / "more.txt", "--greedy", "--ids", "-n", 6, "--ignore-eos")
    cli_ids = [int(x) for x in out.split()]
    gen = kjv.generate(more, max_tokens=6, temperature=0, state=state, ignore_eos=True)
    gen.text()
    assert gen.ids == cli_ids
    # CLI -> Python: a state the CLI saved after the prompt gives the logits of Python's prefill.
    (tmp_path / "prompt.txt").write_text("".join(f"{i}\n" for i in prompt))
    run_cli("generate", "-m", path, "--prompt-ids", tmp_path / "prompt.txt", "--ids", "-n", 0,
            "--save-state", tmp_path / "cli.state")
    loaded = recur.State.load(kjv, tmp_path / "cli.state")
    fresh = kjv.new_state()
    assert loaded.tokens == len(prompt)
    assert loaded.logits.tobytes() == fresh.prefill(prompt).tobytes()
    for t in more:
        assert loaded.step(t, copy=True).tobytes() == fresh.step(t, copy=True).tobytes()


def test_generate_draws_the_cli_tokens_and_text(kjv, tmp_path):
    ids = kjv.tokenizer.encode("And it came to pass")
    (tmp_path / "p.txt").write_text("".join(f"{i}\n" for i in ids))
    args = ["-m", ROOT / "models" / "kjv", "-n", 30, "--seed", 11, "--temperature", 0.9,
            "--top-k", 20, "--top-p", 0.9, "--repetition-penalty", 1.1]
    cli_ids = [int(x) for x in run_cli("generate", *args, "--prompt-ids", tmp_path / "p.txt",
                                       "--ids").split()]
    gen = kjv.generate("And it came to pass", max_tokens=30, seed=11, temperature=0.9, top_k=20,
                       top_p=0.9, repetition_penalty=1.1)
    text = gen.text()
    assert gen.ids == cli_ids and gen.finish_reason in ("length", "eos")
    cli_text = run_cli("generate", *args, "--prompt", "And it came to pass").decode()
    assert cli_text == "And it came to pass" + text + "\n"


def test_generation_stops_at_a_stop_string_and_holds_back_its_start(kjv):
    full = kjv.generate("And it came to pass", max_tokens=40, temperature=0).text()
    stop = full[10:13]
    cut = full.find(stop)
    gen = kjv.generate("And it came to pass", max_tokens=40, temperature=0, stop=[stop, "\x00never"])
    pieces = list(gen)
    assert "".join(pieces) == full[:cut] and gen.finish_reason == "stop"


def test_score_of_text_is_score_of_its_ids(kjv):
    ids = kjv.tokenizer.encode(KJV_TEXT)
    assert kjv.score(KJV_TEXT).tobytes() == kjv.score(ids).tobytes()


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16", "uint16", "int32", "uint32", "int64",
                                   "uint64"])
def test_ids_of_every_integer_dtype_are_read_as_their_values(kjv, dtype):
    ids = [1, 100, 127]
    expected = kjv.new_state().prefill(ids, all_logits=True)
    got = kjv.new_state().prefill(np.array(ids, dtype=dtype), all_logits=True)
    assert got.tobytes() == expected.tobytes()


def state_snapshot(state):
    return state.tokens, state.logits.tobytes()


@pytest.mark.parametrize("bad, message", [
    (np.array([1.0, 2.0]), "dtype float64"),
    (np.array([[1, 2]]), "2 dimensions"),
    (np.arange(10)[::2], "not contiguous"),
    (np.array([1, 2], dtype=">i8"), "byte order"),
    ([1, -1], "tokens[1] is -1"),
    ([1, 4096], "tokens[1] is 4096"),
    ([1, 2**40], "outside the range"),
    (np.array([1, 2**40]), "outside the range"),
    ([1, 2.0], "expected an int"),
    ([True], "expected an int"),
    ("text", "is text"),
    (None, "expected a sequence"),
])
def test_bad_ids_are_refused_and_leave_the_state_as_it_was(kjv, bad, message):
    state = kjv.new_state()
    state.prefill([1, 2, 3])
    before = state_snapshot(state)
    with pytest.raises(ValueError, match="State.prefill|Decoder::prefill") as e:
        state.prefill(bad)
    assert message in str(e.value)
    assert state_snapshot(state) == before
    assert state.step(4, copy=True).tobytes() == kjv.new_state().prefill([1, 2, 3, 4]).tobytes()


def test_bad_calls_are_refused_with_the_call_and_the_sizes(kjv, tmp_path):
    state = kjv.new_state()
    with pytest.raises(ValueError, match=r"\[Decoder::prefill\] no tokens"):
        state.prefill([])
    state.prefill([7, 8])
    before = state_snapshot(state)
    for token in (-1, 4096, 2**70):
        with pytest.raises((ValueError, TypeError), match="State.step|incompatible"):
            state.step(token)
    with pytest.raises(ValueError, match=r"\[State.step\] token is 4096, expected 0 to vocab_size - 1 = 4095"):
        state.step(4096)
    with pytest.raises(ValueError, match="chunk is 0"):
        state.prefill([1], chunk=0)
    with pytest.raises(ValueError, match="chunk is 0"):
        kjv.new_state(chunk=0)
    with pytest.raises(ValueError, match="at least 2"):
        kjv.score([5])
    with pytest.raises(ValueError, match="temperature"):
        kjv.generate([5], temperature=-1)
    with pytest.raises(ValueError, match="top_p"):
        kjv.generate([5], top_p=0)
    assert state_snapshot(state) == before
    # Files: not a model, a state of another model, a truncated state.
    with pytest.raises(ValueError):
        recur.Model(tmp_path)
    (tmp_path / "config.json").write_text("{\"model_type\": \"linear_attn\", \"bogus\": 1}")
    with pytest.raises(ValueError, match="bogus"):
        recur.Model(tmp_path)
    other = recur.Model.random(seed=3, threads=1).new_state()
    other.prefill([1, 2])
    other.save(tmp_path / "other.state")
    with pytest.raises(ValueError, match="fingerprint|another model|model"):
        recur.State.load(kjv, tmp_path / "other.state")
    state.save(tmp_path / "s.state")
    data = (tmp_path / "s.state").read_bytes()
    (tmp_path / "cut.state").write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError):
        recur.State.load(kjv, tmp_path / "cut.state")
    assert recur.State.load(kjv, tmp_path / "s.state").logits.tobytes() == before[1]


def test_a_state_keeps_its_model_alive():
    model = recur.Model.random(seed=2, threads=1)
    expected = model.new_state().prefill([1, 2, 3], copy=True)
    state = model.new_state()
    del model
    gc.collect()
    assert state.prefill([1, 2, 3]).tobytes() == expected.tobytes()
    assert state.model.vocab_size == expected.shape[0]


def test_the_tokenizer_encodes_decodes_and_streams(kjv):
    tok = kjv.tokenizer
    ids = tok.encode(KJV_TEXT)
    assert tok.decode(ids) == KJV_TEXT
    stream = tok.decoder()
    assert "".join(stream.put(i) for i in ids) + stream.finish() == KJV_TEXT
    # The byte-level model's stream holds back an incomplete UTF-8 sequence.
    stream = recur.Model.random(threads=1).tokenizer.decoder()
    e_acute = "é".encode()
    assert stream.put(e_acute[0]) == "" and stream.put(e_acute[1]) == "é"
    assert stream.put(0xE2) == "" and stream.finish() == "\ufffd"


def test_render_chat_is_the_clis_template_rendering(kjv, tmp_path):
    messages = [{"role": "system", "content": "Answer briefly."},
                {"role": "user", "content": "Who begat Enos?"}]
    (tmp_path / "m.json").write_text(json.dumps(messages))
    cli = run_cli("template", "-m", ROOT / "models" / "kjv", "--messages", tmp_path / "m.json",
                  "--add-generation-prompt").decode()
    ours = kjv.render_chat(messages)
    assert ours and (cli == ours or cli == ours + "\n")
    assert kjv.render_chat(messages, add_generation_prompt=False) != ours


def test_config_and_formats(kjv):
    assert kjv.config["model_type"] == "linear_attn" and kjv.config["hidden_size"] == 256
    assert kjv.weights_format in ("f16", "f32", "bf16")
    assert recur.isa() in recur.available_isas()


def test_quantize_writes_what_the_cli_writes_and_the_folder_loads(kjv, tmp_path):
    kjv_dir = ROOT / "models" / "kjv"
    assert recur.quantize(kjv_dir, tmp_path / "py-q8", type="q8", head="q4") == "q8 (head q4)"
    run_cli("quantize", kjv_dir, tmp_path / "cli-q8", "--type", "q8", "--head", "q4")
    for name in ("model.safetensors", "config.json", "tokenizer.json"):
        assert (tmp_path / "py-q8" / name).read_bytes() == (tmp_path / "cli-q8" / name).read_bytes()
    q8 = recur.Model(tmp_path / "py-q8", threads=1)
    assert q8.weights_format == "q8 (head q4)" and q8.tokenizer is not None
    ids = kjv.tokenizer.encode(KJV_TEXT)[:50]
    (tmp_path / "ids.txt").write_text("".join(f"{i}\n" for i in ids))
    cli = json.loads(run_cli("score", "-m", tmp_path / "cli-q8", "--token-ids", tmp_path / "ids.txt", "--json"))
    assert sequential_mean(q8.score(ids)) == cli["mean_nll"]
    with pytest.raises(ValueError, match="already holds a model"):
        recur.quantize(kjv_dir, tmp_path / "py-q8")
    with pytest.raises(ValueError, match="already quantized"):
        recur.quantize(tmp_path / "py-q8", tmp_path / "again")
    with pytest.raises(ValueError, match="'q3'"):
        recur.quantize(kjv_dir, tmp_path / "x", type="q3")
