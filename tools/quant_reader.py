#!/usr/bin/env python3
"""Reads the tensors of a model written by `recur quantize`, with numpy alone.

The format (docs/quantization.md): a quantized weight NAME of logical shape (n_out, k_in) is
stored as I8 (n_out, k_in) for q8, or U8 (n_out, k_in / 2) for q4, where in each block of 32
inputs byte j holds element j in its low nibble and element j + 16 in its high nibble, each as
code + 8. Its scales are NAME_scale, F16 (n_out, k_in / 32): weight = scale * code, per block.
Every other tensor is F32, F16 or BF16 as usual.

  tools/quant_reader.py DIR                   list the tensors and how each is stored
  tools/quant_reader.py DIR NAME [--out F]    dequantize NAME to float32; --out writes its
                                              bytes (little-endian, row-major), else a summary

As a module: `load(dir_or_file)` gives {name: (dtype, shape, bytes)}, `dequantize(tensors, name)`
a float32 array. safetensors' own Python package would read the header too; it is not in
Debian, and the header is eight bytes of length and a JSON object.
"""
import json
import os
import struct
import sys

import numpy as np

BLOCK = 32


def load(path):
    """Every tensor of a safetensors file (or DIR/model.safetensors): name -> (dtype, shape, bytes)."""
    if os.path.isdir(path):
        path = os.path.join(path, "model.safetensors")
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    body = data[8 + n:]
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        begin, end = t["data_offsets"]
        out[name] = (t["dtype"], tuple(t["shape"]), body[begin:end])
    return out


def _floats(dtype, shape, raw):
    if dtype == "F32":
        return np.frombuffer(raw, dtype="<f4").reshape(shape)
    if dtype == "F16":
        return np.frombuffer(raw, dtype="<f2").astype(np.float32).reshape(shape)
    if dtype == "BF16":
        bits = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
        return bits.view(np.float32).reshape(shape)
    raise ValueError(f"{dtype} is not a float dtype")


def codes(tensors, name):
    """The integer codes of a quantized tensor, (n_out, k_in) int32, and 'q8' or 'q4'."""
    dtype, shape, raw = tensors[name]
    if dtype == "I8":
        return np.frombuffer(raw, dtype=np.int8).astype(np.int32).reshape(shape), "q8"
    if dtype == "U8":
        n_out, half = shape
        b = np.frombuffer(raw, dtype=np.uint8).reshape(n_out, half // 16, 16)
        q = np.concatenate([b & 15, b >> 4], axis=2).astype(np.int32) - 8
        return q.reshape(n_out, 2 * half), "q4"
    raise ValueError(f"{name} is {dtype}, not the codes of a quantized weight")


def dequantize(tensors, name):
    """NAME as float32: scale * code for a quantized weight, the values otherwise."""
    if name + "_scale" not in tensors:
        return _floats(*tensors[name])
    q, _ = codes(tensors, name)
    n_out, k_in = q.shape
    s_dtype, s_shape, s_raw = tensors[name + "_scale"]
    if s_dtype != "F16" or s_shape != (n_out, k_in // BLOCK) or k_in % BLOCK:
        raise ValueError(f"{name}_scale is {s_dtype} {s_shape}, expected F16 {(n_out, k_in // BLOCK)}")
    scales = _floats(s_dtype, s_shape, s_raw)
    # One product per weight in float32: exactly the numbers recur's kernels multiply by.
    w = q.reshape(n_out, k_in // BLOCK, BLOCK).astype(np.float32) * scales[:, :, None]
    return w.reshape(n_out, k_in)


def main(argv):
    if len(argv) < 2 or argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if len(argv) >= 2 else 2
    tensors = load(argv[1])
    if len(argv) == 2:
        for name, (dtype, shape, _) in sorted(tensors.items()):
            if name.endswith("_scale") and name[:-6] in tensors:
                continue
            if name + "_scale" in tensors:
                _, fmt = codes(tensors, name)
                q, _ = codes(tensors, name)
                print(f"{name}: {fmt}, {q.shape} in blocks of {BLOCK} ({dtype} {shape} + F16 scales)")
            else:
                print(f"{name}: {dtype} {shape}")
        return 0
    name = argv[2]
    if name not in tensors:
        print(f"quant_reader.py: no tensor '{name}'", file=sys.stderr)
        return 1
    w = dequantize(tensors, name)
    if len(argv) >= 5 and argv[3] == "--out":
        with open(argv[4], "wb") as f:
            f.write(np.ascontiguousarray(w, dtype="<f4").tobytes())
    else:
        print(f"{name}: {w.shape}, min {w.min():.6g}, max {w.max():.6g}, mean |w| {np.abs(w).mean():.6g}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
