"""What the float64 references and fixture writers of tests/ share (tests/based, tests/fla, the
Mamba-2 hybrids' and others): reading and writing safetensors with torch, the small tensor
functions several models use, the text formats of the tests (token ids in, logits and JSON with
17 significant digits out), and a fixture set's expected.json written and checked.

Imported by path: each script puts tests/support on sys.path first.
"""

import json
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


def rms_norm(x, weight, eps):
    y = x * torch.rsqrt((x * x).mean(dim=-1, keepdim=True) + eps)
    return y * weight if weight is not None else y


def silu(x):
    return x * torch.sigmoid(x)


def linear(x, W, b=None):
    y = x @ W.T
    return y + b if b is not None else y


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


def write_fixture_set(here, prompt_path, prompt_note, fixtures, make, figures):
    """Writes each fixture of `fixtures` ({name: (covers, spec)}) under `here` with make(dir,
    spec), then expected.json (figures(dir, ids) of each) and expected_nll.txt."""
    ids = parse_ids(open(prompt_path).read())
    out = {"prompt": prompt_note, "fixtures": {}}
    lines = []
    for name, (covers, spec) in fixtures.items():
        d = os.path.join(here, name)
        make(d, spec)
        fig = figures(d, ids)
        out["fixtures"][name] = dict(covers=covers, spec=plain(spec), **fig)
        lines.append(f"{name} {fig['mean_nll']:.17g}\n")
        print(name, fig["mean_nll"], fig["greedy_ids"], flush=True)
    with open(os.path.join(here, "expected.json"), "w") as f:
        f.write(dumps(out) + "\n")
    with open(os.path.join(here, "expected_nll.txt"), "w") as f:
        f.writelines(lines)


def check_fixture_set(expected_path, here, prompt_path, specs, make, figures):
    """Regenerates every fixture expected.json lists into a temporary folder: its files must be
    the committed ones byte for byte and its figures (FIGURE_KEYS) the committed ones. Exits 1
    naming each difference."""
    with open(expected_path) as f:
        want = json.load(f)
    ids = parse_ids(open(prompt_path).read())
    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name, entry in want["fixtures"].items():
            d = os.path.join(tmp, name)
            make(d, specs[name])
            for f in ("config.json", "model.safetensors"):
                if open(os.path.join(d, f), "rb").read() != open(os.path.join(here, name, f), "rb").read():
                    print(f"{name}/{f}: regenerated bytes differ from the committed ones")
                    bad += 1
            got = figures(d, ids)
            for key in FIGURE_KEYS:
                if got[key] != entry[key]:
                    print(f"{name}: {key} differs")
                    bad += 1
    if bad:
        sys.exit(1)
    print(f"{len(want['fixtures'])} fixtures regenerate byte for byte with their figures")
