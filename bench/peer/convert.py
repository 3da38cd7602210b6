#!/usr/bin/env python3
"""Runs llama.cpp's convert_hf_to_gguf.py on a model directory that recur wrote (random weights),
with small stand-ins for what the converter imports and this machine lacks.

    convert.py LLAMA_CPP_DIR MODEL_DIR VIEW_DIR OUT.gguf OUTTYPE [--architecture NAME]
               [--vocab gpt2|rwkv --rwkv-vocab FILE] [--tokenizer-pre NAME] [CONVERTER FLAGS]

VIEW_DIR is what the converter reads: MODEL_DIR's weights linked, its config.json with an
`architectures` entry added where recur writes none (the converter picks its model class by
it), and a tokenizer: for `gpt2` a byte-level BPE tokenizer.json written here (256 byte tokens,
a few merges, an end-of-text token; the converter pads the vocabulary to vocab_size with unused
entries), for `rwkv` the RWKV world vocabulary file given (a repeated token replaced).
MODEL_DIR is never changed.

The stand-ins (the converter is otherwise run as it is):
  - `transformers`: not installed. AutoConfig.from_pretrained raises, so the converter reads
    config.json itself (its own fallback). AutoTokenizer reads the generated tokenizer.json.
  - `torch` dtypes newer than Debian's PyTorch 1.13 (float8_*, uint16/32/64): named in the
    converter's dtype tables only; placeholders here (recur writes none of them).
  - `tqdm` (the writer's progress bar), where not installed: a bar that shows nothing.
  - keys the converter reads from config.json as they are, which transformers' config classes
    (or the published files) supply and recur's make-model may leave out: a dense Granite
    4.0-H's `intermediate_size` (the published ones carry it, equal to
    `shared_intermediate_size`; without it the converter writes an MLP width of 0), LFM2's
    `layer_types` (Lfm2Config derives it from `full_attn_idxs`, LFM2's first form). A key
    that is there is never changed.
  - the BPE pre-tokenizer's name: the converter identifies it by hashing the ids a real
    tokenizer gives a test string; the generated one cannot give them, so the name is set
    (--tokenizer-pre, default qwen35). No text is tokenized by the benchmark: it runs ids.
"""
import argparse
import ast
import json
import os
import sys
import types
from pathlib import Path


def byte_symbols():
    """GPT-2's map of the 256 bytes to printable characters (byte-level BPE's alphabet)."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    out, extra = {}, 0
    for b in range(256):
        if b in keep:
            out[b] = chr(b)
        else:
            out[b] = chr(256 + extra)
            extra += 1
    return [out[b] for b in range(256)]


def write_bpe_tokenizer(path: Path):
    symbols = byte_symbols()
    vocab = {s: i for i, s in enumerate(symbols)}
    merges = []
    for a, b in [("Ġ", "t"), ("h", "e"), ("i", "n"), ("Ġt", "he")]:
        merges.append(f"{a} {b}")
        vocab[a + b] = len(vocab)
    eot = len(vocab)
    tok = {
        "version": "1.0",
        "added_tokens": [{"id": eot, "content": "<|endoftext|>", "single_word": False,
                          "lstrip": False, "rstrip": False, "normalized": False, "special": True}],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                          "use_regex": True},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                    "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False,
                  "vocab": vocab, "merges": merges},
    }
    path.write_text(json.dumps(tok, ensure_ascii=False), encoding="utf-8")
    (path.parent / "tokenizer_config.json").write_text(json.dumps(
        {"eos_token": "<|endoftext|>", "model_max_length": 262144}), encoding="utf-8")


def write_world_vocab(source: Path, out: Path):
    """The RWKV world vocabulary file, with a token seen before replaced by one of its own
    (tests/world's file repeats one on purpose; llama.cpp's loader refuses repeated tokens)."""
    seen, lines = set(), []
    for line in source.read_text(encoding="utf-8").splitlines():
        parts = line.split(" ")
        token = ast.literal_eval(" ".join(parts[1:-1]))
        token = token.encode("utf-8") if isinstance(token, str) else token
        if token in seen:
            token = f"<repeated {parts[0]}>".encode("ascii")
            line = f"{parts[0]} {token!r} {len(token)}"
        seen.add(token)
        lines.append(line)
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")


class _AddedToken:
    def __init__(self, entry):
        self.content = entry["content"]
        self.special = entry.get("special", False)
        self.normalized = entry.get("normalized", False)


class _Tokenizer:
    """What the converter asks of a Hugging Face tokenizer, read from tokenizer.json."""

    def __init__(self, directory):
        data = json.loads((Path(directory) / "tokenizer.json").read_text(encoding="utf-8"))
        self.vocab = dict(data["model"]["vocab"])
        self.added_tokens_decoder = {}
        for entry in data.get("added_tokens", []):
            self.vocab[entry["content"]] = entry["id"]
            self.added_tokens_decoder[entry["id"]] = _AddedToken(entry)
        self._by_id = {i: t for t, i in self.vocab.items()}

    def get_vocab(self):
        return dict(self.vocab)

    def get_added_vocab(self):
        return {t.content: i for i, t in self.added_tokens_decoder.items()}

    def encode(self, text, add_special_tokens=True):
        if text in self.vocab:  # the converter round-trips added tokens only
            return [self.vocab[text]]
        raise NotImplementedError("the stand-in tokenizer encodes single tokens only")

    def decode(self, ids):
        return "".join(self._by_id[i] for i in ids)


def install_transformers_standin():
    if "transformers" in sys.modules:
        return
    try:
        import transformers  # noqa: F401  (the real one, where installed)
        return
    except ImportError:
        pass
    module = types.ModuleType("transformers")

    class AutoConfig:
        @staticmethod
        def from_pretrained(*args, **kwargs):
            raise OSError("transformers stand-in: the converter reads config.json instead")

    class AutoTokenizer:
        @staticmethod
        def from_pretrained(directory, *args, **kwargs):
            return _Tokenizer(directory)

    module.AutoConfig, module.AutoTokenizer = AutoConfig, AutoTokenizer
    sys.modules["transformers"] = module


def install_tqdm_standin():
    try:
        import tqdm  # noqa: F401
        return
    except ImportError:
        pass

    class Bar:
        def __init__(self, *args, **kwargs):
            pass

        def update(self, *args, **kwargs):
            pass

        set_description = reset = close = update

    module = types.ModuleType("tqdm")
    module.tqdm = Bar
    sys.modules["tqdm"] = module


class _MissingDType:
    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return f"torch.{self.name} (stand-in: not in this PyTorch)"


def add_missing_torch_dtypes():
    import torch
    for name in ("float8_e4m3fn", "float8_e5m2", "uint16", "uint32", "uint64"):
        if not hasattr(torch, name):
            setattr(torch, name, _MissingDType(name))


def add_derived_keys(config):
    """The keys listed in the module's docstring, where config.json leaves them out."""
    kind = config.get("model_type")
    if kind == "granitemoehybrid" and "intermediate_size" not in config:
        config["intermediate_size"] = config["shared_intermediate_size"]
    if kind == "lfm2" and config.get("layer_types") is None:
        attention = set(config["full_attn_idxs"])
        config["layer_types"] = ["full_attention" if i in attention else "conv"
                                 for i in range(config["num_hidden_layers"])]


def make_view(model_dir: Path, view: Path, architecture, vocab, rwkv_vocab):
    view.mkdir(parents=True, exist_ok=True)
    for f in view.iterdir():
        f.unlink()
    for f in model_dir.iterdir():
        if f.name.endswith(".safetensors") or f.name == "model.safetensors.index.json":
            (view / f.name).symlink_to(f.resolve())
    config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    if architecture:
        config["architectures"] = [architecture]
    add_derived_keys(config)
    (view / "config.json").write_text(json.dumps(config, indent=1), encoding="utf-8")
    if vocab == "gpt2":
        write_bpe_tokenizer(view / "tokenizer.json")
    elif vocab == "rwkv":
        write_world_vocab(Path(rwkv_vocab), view / "rwkv_vocab_v20230424.txt")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("llama_cpp")
    p.add_argument("model_dir")
    p.add_argument("view_dir")
    p.add_argument("outfile")
    p.add_argument("outtype")
    p.add_argument("--architecture")
    p.add_argument("--vocab", choices=["gpt2", "rwkv", "none"], default="gpt2")
    p.add_argument("--rwkv-vocab")
    p.add_argument("--tokenizer-pre", default="qwen35")
    a, passed_on = p.parse_known_args()  # the rest goes to the converter (--no-mtp, ...)

    view = Path(a.view_dir)
    make_view(Path(a.model_dir), view, a.architecture, a.vocab, a.rwkv_vocab)
    install_transformers_standin()
    add_missing_torch_dtypes()
    install_tqdm_standin()
    sys.path.insert(0, a.llama_cpp)
    import convert_hf_to_gguf  # noqa: E402  (llama.cpp's, as shipped)
    from conversion import base  # noqa: E402

    base.TextModel.get_vocab_base_pre = lambda self, tokenizer: a.tokenizer_pre
    sys.argv = ["convert_hf_to_gguf.py", str(view), "--outfile", a.outfile, "--outtype", a.outtype,
                *passed_on]
    convert_hf_to_gguf.main()


if __name__ == "__main__":
    main()
