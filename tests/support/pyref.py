"""What the float64 references and fixture writers of tests/ share (tests/based, tests/fla, the
Mamba-2 hybrids' and others): reading and writing safetensors with torch, a checkpoint folder
written, seeded random draws, the small tensor functions several models use (causal attention
over grouped kv heads among them), the text formats of the tests (token ids in, logits and JSON
with 17 significant digits out), a fixture set's expected.json written and checked, and the
command line of the references that work on such a set.

Imported by path: each script puts tests/support on sys.path first.
"""

import json
import math
import os
import re
import struct
import sys
import tempfile

import torch

ST_DTYPES = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8,
    "U8": torch.uint8, "BOOL": torch.bool,
}
ST_NAMES = {torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16", torch.float64: "F64",
            torch.int64: "I64"}


def read_safetensors(path):
    """u64 little-endian header length, a JSON header, then the raw little-endian tensors."""
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n].decode("utf-8"))
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dtype = ST_DTYPES[info["dtype"]]
        begin, end = info["data_offsets"]
        raw = bytearray(blob[base + begin:base + end])
        if raw:
            out[name] = torch.frombuffer(raw, dtype=dtype).reshape(info["shape"]).clone()
        else:
            out[name] = torch.zeros(info["shape"], dtype=dtype)
    return out


def write_safetensors(path, tensors, metadata=None):
    """The tensors in name order, the header padded with spaces to a multiple of 8 bytes."""
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        t = tensors[name].contiguous()
        raw = t.view(torch.uint8).numpy().tobytes() if t.numel() else b""
        header[name] = {"dtype": ST_NAMES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    if metadata:
        header["__metadata__"] = metadata
    h = json.dumps(header, separators=(",", ":")).encode("utf-8")
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for raw in blobs:
            f.write(raw)


def write_checkpoint(out_dir, tensors, cfg):
    """A model folder as transformers saves one: model.safetensors and config.json (Python's
    json, as transformers writes it: an infinite number is a bare Infinity)."""
    os.makedirs(out_dir, exist_ok=True)
    write_safetensors(os.path.join(out_dir, "model.safetensors"), tensors, {"format": "pt"})
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")


class Draw:
    """Seeded float32 draws: a fixture's weights are the same bytes on every run."""

    def __init__(self, seed):
        self.g = torch.Generator().manual_seed(seed)

    def randn(self, *shape, std=1.0, mean=0.0):
        return torch.randn(*shape, generator=self.g, dtype=torch.float32) * std + mean

    def rand(self, *shape, lo=0.0, hi=1.0):
        return torch.rand(*shape, generator=self.g, dtype=torch.float32) * (hi - lo) + lo

    def dense(self, t, name, rows, cols, bias, std):
        """t[name.weight] (rows, cols) of `std`, then with `bias` t[name.bias] of std 0.1."""
        t[name + ".weight"] = self.randn(rows, cols, std=std)
        if bias:
            t[name + ".bias"] = self.randn(rows, std=0.1)


def rms_norm(x, weight, eps):
    y = x * torch.rsqrt((x * x).mean(dim=-1, keepdim=True) + eps)
    return y * weight if weight is not None else y


def silu(x):
    return x * torch.sigmoid(x)


def linear(x, W, b=None):
    y = x @ W.T
    return y + b if b is not None else y


def dense(t, name, x):
    """x times the matrix `name`.weight of the tensors t, plus `name`.bias where t holds one."""
    y = x @ t[name + ".weight"].T
    return y + t[name + ".bias"] if name + ".bias" in t else y


def rotate(x, theta):
    """GPT-NeoX's rotary over the whole head: x (T, heads, d), position = row; the angles in
    float64, then in x's dtype."""
    T, _, d = x.shape
    inv = 1.0 / theta ** (torch.arange(0, d // 2, dtype=torch.float64) * 2.0 / d)
    ang = torch.arange(T, dtype=torch.float64)[:, None] * inv[None, :]
    cos, sin = torch.cos(ang).to(x.dtype)[:, None, :], torch.sin(ang).to(x.dtype)[:, None, :]
    x1, x2 = x[..., :d // 2], x[..., d // 2:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)


def causal_attention(q, k, v, scale):
    """Softmax attention of q (T, Hq, d) over k and v (T, Hkv, d), each kv head shared by
    Hq / Hkv query heads in turn, the scores times `scale`, each row seeing itself and the rows
    before it; (T, Hq d)."""
    T, Hq, d = q.shape
    g = Hq // k.shape[1]
    k, v = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
    s = torch.einsum("thd,shd->hts", q, k) * scale
    s = s.masked_fill(~torch.tril(torch.ones(T, T, dtype=torch.bool)), -math.inf)
    return torch.einsum("hts,shd->thd", torch.softmax(s, -1), v).reshape(T, Hq * d)


def mean_nll(logits, ids):
    """The mean negative log-likelihood of ids[1:] under the logits of the rows before each."""
    lp = torch.log_softmax(logits[:-1], -1)
    return float(-lp[torch.arange(len(ids) - 1), torch.tensor(ids[1:])].mean())


def greedy(forward, m, ids, n):
    """n greedy ids after ids, each from a whole forward(m, sequence) pass."""
    out, seq = [], list(ids)
    for _ in range(n):
        nxt = int(torch.argmax(forward(m, seq)[-1]))
        out.append(nxt)
        seq.append(nxt)
    return out


def int_list(s):
    return [int(x) for x in s.split(",") if x.strip()] if s else []


def parse_ids(text):
    return [int(t) for t in re.split(r"[\s,]+", text.strip()) if t]


def write_logits(path, vec):
    """One value per line with 17 significant digits, or a float64 .npy file."""
    if path.endswith(".npy"):
        import numpy as np
        np.save(path, vec.numpy().astype("<f8"))
    else:
        with open(path, "w") as f:
            for x in vec.tolist():
                f.write(f"{x:.17g}\n")


def dumps(obj, indent=0):
    """JSON with floats as %.17g (json's own repr gives the shortest round-trip instead)."""
    pad, end = "  " * (indent + 1), "  " * indent
    if isinstance(obj, float):
        return format(obj, ".17g")
    if isinstance(obj, dict):
        items = [f"{pad}{json.dumps(k)}: {dumps(v, indent + 1)}" for k, v in obj.items()]
        return "{\n" + ",\n".join(items) + "\n" + end + "}"
    if isinstance(obj, list):
        if all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in obj):
            return "[" + ", ".join(dumps(x) for x in obj) + "]"
        return "[\n" + ",\n".join(pad + dumps(x, indent + 1) for x in obj) + "\n" + end + "]"
    return json.dumps(obj)


# --------------------------------------------------------------------------------------------
# A set of random-weight fixtures with their reference figures (expected.json, expected_nll.txt),
# as the Mamba-2 hybrids' references write and check them (tests/nemotron_h).

FIGURE_KEYS = ("mean_nll", "greedy_ids", "probe_logits")


def plain(x):
    """A fixture's spec for expected.json: an infinite number as the string "Infinity"."""
    if isinstance(x, dict):
        return {k: plain(v) for k, v in x.items()}
    if isinstance(x, list):
        return [plain(v) for v in x]
    return "Infinity" if x == float("inf") else x


def write_fixture_set(here, fixtures, ref):
    """Writes each fixture of `fixtures` ({name: (covers, spec)}) under `here` with the reference
    module ref's make(dir, spec), then expected.json (ref.figures(dir, ids) of each, over the
    ids of ref.PROMPT, which ref.PROMPT_NOTE names) and expected_nll.txt."""
    ids = parse_ids(open(ref.PROMPT).read())
    out = {"prompt": ref.PROMPT_NOTE, "fixtures": {}}
    lines = []
    for name, (covers, spec) in fixtures.items():
        d = os.path.join(here, name)
        ref.make(d, spec)
        fig = ref.figures(d, ids)
        out["fixtures"][name] = dict(covers=covers, spec=plain(spec), **fig)
        lines.append(f"{name} {fig['mean_nll']:.17g}\n")
        print(name, fig["mean_nll"], fig["greedy_ids"], flush=True)
    with open(os.path.join(here, "expected.json"), "w") as f:
        f.write(dumps(out) + "\n")
    with open(os.path.join(here, "expected_nll.txt"), "w") as f:
        f.writelines(lines)


def check_fixture_set(expected_path, ref):
    """Regenerates every fixture expected.json lists into a temporary folder, from the specs of
    make_fixtures.py in the reference module ref's folder (ref.HERE): its files must be the
    committed ones byte for byte and its figures (FIGURE_KEYS) the committed ones. Exits 1
    naming each difference."""
    sys.path.insert(0, ref.HERE)
    import make_fixtures
    with open(expected_path) as f:
        want = json.load(f)
    ids = parse_ids(open(ref.PROMPT).read())
    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name, entry in want["fixtures"].items():
            d = os.path.join(tmp, name)
            ref.make(d, make_fixtures.SPECS[name])
            for f in ("config.json", "model.safetensors"):
                if open(os.path.join(d, f), "rb").read() != open(os.path.join(ref.HERE, name, f), "rb").read():
                    print(f"{name}/{f}: regenerated bytes differ from the committed ones")
                    bad += 1
            got = ref.figures(d, ids)
            for key in FIGURE_KEYS:
                if got[key] != entry[key]:
                    print(f"{name}: {key} differs")
                    bad += 1
    if bad:
        sys.exit(1)
    print(f"{len(want['fixtures'])} fixtures regenerate byte for byte with their figures")


def reference_main(argv, ref):
    """The command line of a reference module ref whose fixtures are such a set (its docstring
    says it): make OUT_DIR SPEC_JSON, score MODEL_DIR IDS_FILE (mean NLL and 8 greedy ids,
    JSON), --self-test, --check-expected EXPECTED."""
    if argv[:1] == ["--self-test"]:
        return ref.self_test()
    if argv[:1] == ["--check-expected"]:
        return check_fixture_set(argv[1], ref)
    if argv[:1] == ["make"]:
        return ref.make(argv[1], json.loads(argv[2]))
    if argv[:1] == ["score"]:
        ids = parse_ids(open(argv[2]).read())
        m = ref.load(argv[1])
        logits = ref.forward(m, ids)
        print(dumps({"mean_nll": mean_nll(logits, ids), "greedy_ids": greedy(ref.forward, m, ids, 8)}))
        return None
    print(ref.__doc__)
    sys.exit(2)
