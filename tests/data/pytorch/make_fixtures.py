#!/usr/bin/python3
"""Writes the fixtures of tests/test_pytorch.cpp and the seeds of tests/fuzz/fuzz_pytorch.cpp.

    /usr/bin/python3 tests/data/pytorch/make_fixtures.py

Debian's python3-torch (apt-get install python3-torch) writes the good checkpoints with
torch.save; expected.json holds, for each of their tensors, the dtype, the shape, the bytes (hex,
row-major, little-endian) and, for the float types, the values, so that the test compares what
recur reads against what torch itself holds.

The hostile archives are written by hand: their pickles are assembled from opcode bytes below and
zipped with Python's zipfile. NOTHING HERE EVER UNPICKLES THEM (no torch.load, no pickle.loads):
the os.system payloads would run `touch` if anything did. pickletools.dis, which only reads
opcodes, checks that each hand-made pickle is well formed where it is meant to be.

The outputs are deterministic (fixed seeds, fixed zip timestamps), so that a rerun changes no
committed file unless this script changed.
"""

import collections
import io
import json
import os
import pickletools
import struct
import zipfile

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "..", "..", "fuzz", "corpus", "pytorch")
# The file the os.system payloads would create. The test removes it, loads them, and checks that
# it is still absent.
MARKER = "/tmp/recur-pytorch-fixture-was-executed"

DTYPE_NAMES = {
    torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16", torch.float64: "F64",
    torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8",
    torch.uint8: "U8", torch.bool: "BOOL",
}


def expected(state_dict):
    out = {}
    for name, t in state_dict.items():
        t = t.detach().contiguous()
        entry = {
            "dtype": DTYPE_NAMES[t.dtype],
            "shape": list(t.shape),
            "hex": t.reshape(-1).view(torch.uint8).numpy().tobytes().hex(),
        }
        if t.is_floating_point():
            entry["values"] = [float(x) for x in t.float().reshape(-1).tolist()]
        out[name] = entry
    return out


def good_checkpoints():
    torch.manual_seed(1234)
    sd = collections.OrderedDict()
    sd["f32"] = torch.randn(2, 3)
    sd["f16"] = torch.randn(4).half()
    sd["bf16"] = torch.randn(2, 2).bfloat16()
    sd["i64"] = torch.tensor([-3, 0, 1 << 40], dtype=torch.int64)
    sd["scalar"] = torch.tensor(0.25)
    # Two tensors on one storage: the whole of it, and a (2, 3) view that starts 2 elements in.
    base = torch.arange(10, dtype=torch.float32) / 4
    sd["shared.base"] = base
    sd["shared.view"] = base[2:8].view(2, 3)
    sd["empty"] = torch.zeros(0, 3)
    sd["i32"] = torch.tensor([7, -7], dtype=torch.int32)
    sd["u8"] = torch.tensor([0, 255], dtype=torch.uint8)
    sd["bool"] = torch.tensor([True, False, True])
    sd["f64"] = torch.tensor([1.0 / 3.0], dtype=torch.float64)
    # What Module.state_dict() attaches: pickled as a BUILD on the OrderedDict.
    sd._metadata = collections.OrderedDict([("", {"version": 1}), ("layer", {"version": 2})])
    torch.save(sd, os.path.join(HERE, "good.bin"))

    # keep_vars=True: Parameters, pickled through torch._utils._rebuild_parameter.
    torch.manual_seed(5)
    module = torch.nn.Linear(3, 2)
    params = module.state_dict(keep_vars=True)
    torch.save(params, os.path.join(HERE, "parameters.bin"))

    # A plain dict rather than an OrderedDict, and a storage compressed with deflate.
    plain = {"w": torch.arange(6, dtype=torch.float32).reshape(3, 2)}
    buf = io.BytesIO()
    torch.save(plain, buf)
    deflated = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(buf.getvalue())) as src, \
            zipfile.ZipFile(deflated, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            out = zipfile.ZipInfo(info.filename.replace("archive/", "deflate/", 1),
                                  date_time=(1980, 1, 1, 0, 0, 0))
            out.compress_type = zipfile.ZIP_DEFLATED
            dst.writestr(out, src.read(info.filename))
    with open(os.path.join(HERE, "deflate.bin"), "wb") as f:
        f.write(deflated.getvalue())

    # A transposed tensor: not row-major, which recur refuses.
    torch.save({"t": torch.ones(2, 3).t()}, os.path.join(HERE, "noncontiguous.bin"))

    return {"good.bin": expected(sd), "parameters.bin": expected(params),
            "deflate.bin": expected(plain)}


# ---- pickles by hand -------------------------------------------------------------------------

def proto(n):
    return b"\x80" + bytes([n])


def glob(module, name):
    return b"c" + module.encode() + b"\n" + name.encode() + b"\n"


def string(s):
    b = s.encode()
    return b"X" + struct.pack("<I", len(b)) + b


def integer(n):
    if 0 <= n < 256:
        return b"K" + bytes([n])
    if -(1 << 31) <= n < (1 << 31):
        return b"J" + struct.pack("<i", n)
    size = (n.bit_length() + 8) // 8  # room for the sign bit
    return b"\x8a" + bytes([size]) + n.to_bytes(size, "little", signed=True)


MARK, TUPLE, TUPLE1, EMPTY_TUPLE, REDUCE, STOP = b"(", b"t", b"\x85", b")", b"R", b"."
BINPERSID, SETITEMS, SETITEM, NEWFALSE, EMPTY_DICT = b"Q", b"u", b"s", b"\x89", b"}"


def ints_tuple(values):
    return MARK + b"".join(integer(v) for v in values) + TUPLE


def ordered_dict():
    return glob("collections", "OrderedDict") + EMPTY_TUPLE + REDUCE


def tensor(storage_type, key, numel, offset, size, stride):
    pid = MARK + string("storage") + glob("torch", storage_type) + string(key) + string("cpu") + \
        integer(numel) + TUPLE
    return glob("torch._utils", "_rebuild_tensor_v2") + MARK + pid + BINPERSID + integer(offset) + \
        ints_tuple(size) + ints_tuple(stride) + NEWFALSE + ordered_dict() + TUPLE + REDUCE


def state_dict(entries):
    """entries: (name, pickled tensor) pairs."""
    body = b"".join(string(name) + t for name, t in entries)
    return proto(2) + ordered_dict() + MARK + body + SETITEMS + STOP


def checked(pkl):
    pickletools.dis(pkl, out=io.StringIO())  # reads the opcodes only; raises if malformed
    return pkl


def archive(path, pkl, storages=None, prefix="archive", entries=None):
    """A torch.save-shaped zip: <prefix>/data.pkl, <prefix>/data/<key>, <prefix>/version."""
    files = [(prefix + "/data.pkl", pkl)]
    files += [(f"{prefix}/data/{k}", v) for k, v in (storages or {}).items()]
    files.append((prefix + "/version", b"3\n"))
    if entries is not None:
        files = entries
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        for name, data in files:
            z.writestr(zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0)), data)


FOUR_FLOATS = struct.pack("<4f", 1.0, 2.0, 3.0, 4.0)


def hostile():
    out = {}

    def put(name, pkl, storages=None, **kw):
        path = os.path.join(HERE, name)
        archive(path, pkl, storages, **kw)
        out[name] = path

    shell = "touch " + MARKER
    # REDUCE calling os.system, as the pickles that torch.load runs are known to do.
    put("os_system.bin", checked(proto(2) + glob("posix", "system") + string(shell) + TUPLE1 +
                                 REDUCE + STOP))
    # The same through protocol 4's FRAME and STACK_GLOBAL.
    body = b"\x8c\x02os\x94\x8c\x06system\x94\x93\x94" + string(shell) + TUPLE1 + REDUCE + STOP
    put("os_system_v4.bin", checked(proto(4) + b"\x95" + struct.pack("<Q", len(body)) + body))
    put("builtins_eval.bin", checked(proto(2) + glob("builtins", "eval") +
                                     string("__import__('os').system('" + shell + "')") + TUPLE1 +
                                     REDUCE + STOP))
    put("subprocess_popen.bin", checked(proto(2) + glob("subprocess", "Popen") +
                                        string(shell) + TUPLE1 + REDUCE + STOP))
    put("builtin_getattr.bin", checked(proto(2) + glob("__builtin__", "getattr") +
                                       glob("os", "system") + string("system") + b"\x86" +
                                       REDUCE + STOP))
    # INST: the opcode form of "call this global with these arguments".
    put("inst.bin", checked(proto(2) + MARK + string(shell) + b"ios\nsystem\n" + STOP))

    put("missing_storage.bin",
        checked(state_dict([("w", tensor("FloatStorage", "0", 4, 0, [4], [1]))])),
        {"1": FOUR_FLOATS})
    put("short_storage.bin",
        checked(state_dict([("w", tensor("FloatStorage", "0", 4, 0, [4], [1]))])),
        {"0": FOUR_FLOATS[:12]})
    put("huge_shape.bin",
        checked(state_dict([("w", tensor("FloatStorage", "0", 4, 0, [1 << 40], [1]))])),
        {"0": FOUR_FLOATS})
    put("overflow_shape.bin",
        checked(state_dict([("w", tensor("FloatStorage", "0", 4, 0, [1 << 62, 1 << 62, 4],
                                         [1, 1, 1]))])),
        {"0": FOUR_FLOATS})
    put("negative_stride.bin",
        checked(state_dict([("w", tensor("FloatStorage", "0", 4, 3, [4], [-1]))])),
        {"0": FOUR_FLOATS})
    put("offset_past_end.bin",
        checked(state_dict([("w", tensor("FloatStorage", "0", 4, 100, [2], [1]))])),
        {"0": FOUR_FLOATS})
    put("duplicate_name.bin",
        checked(state_dict([("w", tensor("FloatStorage", "0", 4, 0, [4], [1])),
                            ("w", tensor("FloatStorage", "0", 4, 0, [2], [1]))])),
        {"0": FOUR_FLOATS})
    put("empty_pickle.bin", b"", {})
    # No STOP: the pickle ends after the dict.
    put("no_stop.bin", proto(2) + EMPTY_DICT)
    # BINGET of a memo slot nothing was put in.
    put("bad_memo.bin", proto(2) + b"h\x07" + STOP)
    # REDUCE with nothing on the stack.
    put("underflow.bin", proto(2) + REDUCE + STOP)
    # A thousand MARKs, and tuples nested a thousand deep.
    put("deep_nesting.bin", proto(2) + MARK * 1000 + STOP)
    put("deep_tuples.bin", proto(2) + EMPTY_TUPLE + TUPLE1 * 1000 + STOP)
    put("no_data_pkl.bin", b"", entries=[("archive/version", b"3\n")])

    with open(os.path.join(HERE, "good.bin"), "rb") as f:
        whole = f.read()
    with open(os.path.join(HERE, "truncated.bin"), "wb") as f:
        f.write(whole[: len(whole) // 2])
    with open(os.path.join(HERE, "not_zip.bin"), "wb") as f:
        f.write(b"this is not a zip archive\n")
    return out


def read_safetensors(path):
    """The tensors of a safetensors file, in its header's order (the format is 8 bytes of header
    length, the JSON header, the data)."""
    dtypes = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16}
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n], object_pairs_hook=collections.OrderedDict)
    data = raw[8 + n:]
    out = collections.OrderedDict()
    for name, t in header.items():
        if name == "__metadata__":
            continue
        begin, end = t["data_offsets"]
        flat = torch.frombuffer(bytearray(data[begin:end]), dtype=dtypes[t["dtype"]])
        out[name] = flat.reshape(t["shape"]).clone()
    return out


def transformers_checkpoint():
    """tests/fla/gla-bf16 as transformers' save_pretrained(safe_serialization=False) writes it:
    torch.save of a plain dict whose names are the model's own (model.embeddings.weight,
    model.layers.N..., lm_head.weight), which recur must read as stored, not strip."""
    gla = os.path.join(HERE, "..", "..", "fla", "gla-bf16", "model.safetensors")
    torch.save(dict(read_safetensors(gla)), os.path.join(HERE, "gla_transformers.bin"))


def wrapped_bare_checkpoint():
    """tests/rwkv7/h2x16-f16.pth (BlinkDL's bare state dict, our own fixture) with every name
    behind PyTorch Lightning's wrapper prefix "model.": no config.json, so the family is found
    by the names without it."""
    pth = os.path.join(HERE, "..", "..", "rwkv7", "h2x16-f16.pth")
    sd = torch.load(pth, map_location="cpu", weights_only=True)
    wrapped = collections.OrderedDict(("model." + k, v) for k, v in sd.items())
    torch.save(wrapped, os.path.join(HERE, "rwkv7_wrapped.pth"))


def main():
    if os.path.exists(MARKER):
        os.remove(MARKER)
    values = good_checkpoints()
    with open(os.path.join(HERE, "expected.json"), "w") as f:
        json.dump(values, f, indent=1, sort_keys=True)
        f.write("\n")
    hostile()
    transformers_checkpoint()
    wrapped_bare_checkpoint()
    # The fuzzer's seeds: the good checkpoints and one hostile archive,
    os.makedirs(CORPUS, exist_ok=True)
    for name in ["good.bin", "parameters.bin", "deflate.bin", "noncontiguous.bin",
                 "os_system_v4.bin"]:
        with open(os.path.join(HERE, name), "rb") as src, \
                open(os.path.join(CORPUS, name), "wb") as dst:
            dst.write(src.read())
    # and the bare pickles of the good ones, for the unpickler alone.
    for name in ["good.bin", "parameters.bin"]:
        with zipfile.ZipFile(os.path.join(HERE, name)) as z:
            pkl = [n for n in z.namelist() if n.endswith("/data.pkl")][0]
            with open(os.path.join(CORPUS, name.replace(".bin", ".pkl")), "wb") as dst:
                dst.write(z.read(pkl))
    assert not os.path.exists(MARKER), MARKER + " exists: something ran a payload"


if __name__ == "__main__":
    main()
