"""What the float64 references and fixture writers of tests/based and tests/fla share: reading and
writing safetensors with torch, the small tensor functions both models use, and the text formats
of the tests (token ids in, logits and JSON with 17 significant digits out).

Imported by path: each script puts tests/support on sys.path first.
"""

import json
import re
import struct

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
