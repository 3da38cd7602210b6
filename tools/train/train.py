#!/usr/bin/python3
"""Trains recur's built-in model: a small linear_attn model on the King James Bible.

Everything comes from Debian: the text from bible-kjv (`bible -l0 gen1:1-rev22:21`), PyTorch
from python3-torch. The script
  1. reads the Bible and holds some books out for evaluation (HELD_OUT);
  2. trains a byte-level BPE tokenizer on the rest and writes it as a Hugging Face
     tokenizer.json (a GPT-2-style regex Split, then ByteLevel), so that the model is read
     through recur's tokenizer like any published checkpoint;
  3. trains a flash-linear-attention "linear_attn" model (elu+1 feature map, normalized form,
     RMSNorm, SwiGLU, tied embeddings) on random windows of the training books;
  4. writes config.json and model.safetensors (float16) in the library's layout;
  5. evaluates the held-out books with its own float64 forward of the float16 weights, written
     independently of recur (the recurrent form, chunk by chunk), and writes eval.json.

Seeded: the same command writes the same files with the same PyTorch and BLAS on the same
kind of CPU (another BLAS or vector width may round differently). Needs Debian's python3-torch,
libopenblas0-pthread (without it, Debian's PyTorch multiplies with the reference BLAS, about 25
times slower) and bible-kjv; `tools/build.sh train` installs them and runs this script.
    tools/build.sh train                                               # models/kjv, ~40 min
    /usr/bin/python3 tools/train/train.py --out /tmp/kjv --steps 20   # a smoke test
"""
import argparse
import json
import math
import os
import re
import struct
import subprocess
import sys
import time
from collections import Counter, defaultdict

import torch
import torch.nn.functional as F

HELD_OUT = ("Ruth", "Ecclesiastes", "Jonah", "Philippians")

# The GPT-2 pre-tokenizer pattern, as tokenizer.json states it (Unicode classes, for any text).
SPLIT_PATTERN = (r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+")
# The same pattern for ASCII text, which is all this corpus holds (checked in read_bible):
# Python's re has no \p classes.
ASCII_PATTERN = re.compile(
    r"'s|'t|'re|'ve|'m|'ll|'d| ?[A-Za-z]+| ?[0-9]+| ?[^\sA-Za-z0-9]+|\s+(?!\S)|\s+")
END_OF_TEXT = "<|endoftext|>"


# ---------------------------------------------------------------------------------------------
# Text

def read_bible():
    """Returns [(book, text)] in canon order. Each chapter is a heading line "Genesis 1" and a
    line per verse "1 In the beginning ...", chapters separated by a blank line."""
    raw = subprocess.run(["bible", "-l0", "gen1:1-rev22:21"], check=True, capture_output=True,
                         text=True).stdout
    if not raw.isascii():
        sys.exit("the bible-kjv text is expected to be ASCII")
    books, current, lines = [], None, []
    heading = re.compile(r"^(\S.*) (\d+)$")
    for line in raw.split("\n"):
        if not line.strip():
            continue
        m = heading.match(line)
        if m:
            if m.group(1) != current:
                if current is not None:
                    books.append((current, "\n".join(lines) + "\n\n"))
                current, lines = m.group(1), []
            elif lines:
                lines.append("")
            lines.append(line)
        else:
            lines.append(line.strip())
    books.append((current, "\n".join(lines) + "\n\n"))
    return books


# ---------------------------------------------------------------------------------------------
# Byte-level BPE

def bytes_to_unicode():
    """GPT-2's map from bytes to printable characters (ByteLevel in tokenizer.json)."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    chars, n = {}, 0
    for b in range(256):
        if b in keep:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + n)
            n += 1
    return chars


BYTE_CHAR = bytes_to_unicode()


def pieces(text):
    return [''.join(BYTE_CHAR[b] for b in p.encode()) for p in ASCII_PATTERN.findall(text)]


def train_bpe(text, vocab_size):
    """Merges, most frequent pair first (ties: the smaller pair), counted over pre-tokens."""
    counts = Counter(pieces(text))
    words = [list(w) for w in counts]
    freq = [counts[w] for w in counts]
    pair_count = Counter()
    where = defaultdict(set)
    for i, w in enumerate(words):
        for a, b in zip(w, w[1:]):
            pair_count[a, b] += freq[i]
            where[a, b].add(i)
    merges = []
    n_merges = vocab_size - 256 - 1  # bytes, merges, <|endoftext|>
    while len(merges) < n_merges and pair_count:
        best = max(pair_count.items(), key=lambda kv: (kv[1], kv[0]))[0]
        merges.append(best)
        a, b = best
        merged = a + b
        for i in sorted(where.pop(best, ())):
            w = words[i]
            for x, y in zip(w, w[1:]):
                pair_count[x, y] -= freq[i]
                if pair_count[x, y] <= 0:
                    del pair_count[x, y]
            out, j = [], 0
            while j < len(w):
                if j + 1 < len(w) and w[j] == a and w[j + 1] == b:
                    out.append(merged)
                    j += 2
                else:
                    out.append(w[j])
                    j += 1
            words[i] = out
            for x, y in zip(out, out[1:]):
                pair_count[x, y] += freq[i]
                where[x, y].add(i)
    return merges


class BpeEncoder:
    def __init__(self, merges):
        self.rank = {m: r for r, m in enumerate(merges)}
        self.vocab = {BYTE_CHAR[b]: i for i, b in enumerate(sorted(BYTE_CHAR))}
        for a, b in merges:
            self.vocab[a + b] = len(self.vocab)
        self.cache = {}

    def word(self, w):
        if w in self.cache:
            return self.cache[w]
        parts = list(w)
        while len(parts) > 1:
            ranked = [(self.rank.get((x, y), math.inf), k) for k, (x, y) in enumerate(zip(parts, parts[1:]))]
            r, k = min(ranked)
            if r == math.inf:
                break
            parts[k:k + 2] = [parts[k] + parts[k + 1]]
        ids = [self.vocab[p] for p in parts]
        self.cache[w] = ids
        return ids

    def encode(self, text):
        return [i for p in pieces(text) for i in self.word(p)]


def tokenizer_json(encoder, merges):
    eot = len(encoder.vocab)
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [{"id": eot, "content": END_OF_TEXT, "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False, "special": True}],
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": SPLIT_PATTERN}, "behavior": "Isolated",
             "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
             "use_regex": False}]},
        "post_processor": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False,
                           "use_regex": True},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                    "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": encoder.vocab, "merges": [f"{a} {b}" for a, b in merges]},
    }


# ---------------------------------------------------------------------------------------------
# The model: flash-linear-attention's linear_attn, written out

def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


class Model(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        d, I, V = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
        P = torch.nn.Parameter
        normal = lambda *s: P(torch.randn(*s) * 0.02)
        self.embed = normal(V, d)
        self.layers = torch.nn.ModuleList()
        for _ in range(c["num_hidden_layers"]):
            layer = torch.nn.Module()
            layer.attn_norm = P(torch.ones(d))
            layer.q, layer.k, layer.v, layer.o = normal(d, d), normal(d, d), normal(d, d), normal(d, d)
            layer.head_norm = P(torch.ones(d // c["num_heads"]))
            layer.mlp_norm = P(torch.ones(d))
            layer.gate, layer.up, layer.down = normal(I, d), normal(I, d), normal(d, I)
            with torch.no_grad():  # scaled residual projections, as GPT-2
                layer.o /= math.sqrt(2 * c["num_hidden_layers"])
                layer.down /= math.sqrt(2 * c["num_hidden_layers"])
            self.layers.append(layer)
        self.norm = P(torch.ones(d))

    def forward(self, tokens):
        c = self.c
        H, eps = c["num_heads"], c["norm_eps"]
        B, T = tokens.shape
        x = self.embed[tokens]
        mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
        for L in self.layers:
            h = rms_norm(x, L.attn_norm, eps)
            split = lambda t: t.view(B, T, H, -1).transpose(1, 2)  # B H T dh
            q, k, v = split(h @ L.q.T), split(h @ L.k.T), split(h @ L.v.T)
            q, k = F.elu(q) + 1, F.elu(k) + 1
            q = q * q.shape[-1] ** -0.5
            a = (q @ k.transpose(-1, -2)).masked_fill(~mask, 0.0)  # causal, the parallel form
            o = (a @ v) / (a.sum(-1, keepdim=True) + 1e-10)
            o = rms_norm(o, L.head_norm, eps).transpose(1, 2).reshape(B, T, -1)
            x = x + o @ L.o.T
            h = rms_norm(x, L.mlp_norm, eps)
            x = x + (F.silu(h @ L.gate.T) * (h @ L.up.T)) @ L.down.T
        return rms_norm(x, self.norm, eps) @ self.embed.T

    def tensors(self):
        """The library's names for each weight."""
        out = {"model.embeddings.weight": self.embed}
        for i, L in enumerate(self.layers):
            p = f"model.layers.{i}."
            out.update({p + "attn_norm.weight": L.attn_norm, p + "attn.q_proj.weight": L.q,
                        p + "attn.k_proj.weight": L.k, p + "attn.v_proj.weight": L.v,
                        p + "attn.norm.weight": L.head_norm, p + "attn.o_proj.weight": L.o,
                        p + "mlp_norm.weight": L.mlp_norm, p + "mlp.gate_proj.weight": L.gate,
                        p + "mlp.up_proj.weight": L.up, p + "mlp.down_proj.weight": L.down})
        out["model.norm.weight"] = self.norm
        return out


def write_safetensors(path, tensors):
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        data = t.detach().to(torch.float16).contiguous().numpy().tobytes()
        header[name] = {"dtype": "F16", "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)
    with open(path + ".tmp", "wb") as f:
        f.write(struct.pack("<Q", len(head)) + head)
        for b in blobs:
            f.write(b)
    os.replace(path + ".tmp", path)


def evaluate(tensors, c, tokens, chunk=256):
    """Mean NLL of tokens[1:] given the ones before, in float64 from the float16 weights: the
    recurrent form, S and Z carried from chunk to chunk (not the training code's parallel form)."""
    W = {k: v.detach().to(torch.float16).to(torch.float64) for k, v in tensors.items()}
    H, eps, nl = c["num_heads"], c["norm_eps"], c["num_hidden_layers"]
    d = c["hidden_size"]
    dh = d // H
    S = [torch.zeros(H, dh, dh, dtype=torch.float64) for _ in range(nl)]
    Z = [torch.zeros(H, dh, dtype=torch.float64) for _ in range(nl)]
    total, ids = 0.0, torch.tensor(tokens)
    for s in range(0, len(tokens), chunk):
        t = ids[s:s + chunk]
        n = len(t)
        x = W["model.embeddings.weight"][t]
        mask = torch.tril(torch.ones(n, n, dtype=torch.bool))
        for i in range(nl):
            p = f"model.layers.{i}."
            h = rms_norm(x, W[p + "attn_norm.weight"], eps)
            split = lambda m: m.view(n, H, dh).transpose(0, 1)  # H n dh
            q = split(h @ W[p + "attn.q_proj.weight"].T)
            k = split(h @ W[p + "attn.k_proj.weight"].T)
            v = split(h @ W[p + "attn.v_proj.weight"].T)
            q, k = (F.elu(q) + 1) * dh ** -0.5, F.elu(k) + 1
            a = (q @ k.transpose(-1, -2)).masked_fill(~mask, 0.0)
            num = q @ S[i] + a @ v
            den = (q @ Z[i].unsqueeze(-1)).squeeze(-1) + a.sum(-1)
            o = num / (den.unsqueeze(-1) + 1e-10)
            S[i] = S[i] + k.transpose(-1, -2) @ v
            Z[i] = Z[i] + k.sum(1)
            o = rms_norm(o, W[p + "attn.norm.weight"], eps).transpose(0, 1).reshape(n, -1)
            x = x + o @ W[p + "attn.o_proj.weight"].T
            h = rms_norm(x, W[p + "mlp_norm.weight"], eps)
            g = h @ W[p + "mlp.gate_proj.weight"].T
            x = x + (F.silu(g) * (h @ W[p + "mlp.up_proj.weight"].T)) @ W[p + "mlp.down_proj.weight"].T
        logits = rms_norm(x, W["model.norm.weight"], eps) @ W["model.embeddings.weight"].T
        logp = torch.log_softmax(logits, -1)
        targets = ids[s + 1:s + n + 1]
        total -= logp[torch.arange(len(targets)), targets].sum().item()
    return total / (len(tokens) - 1)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="directory to write the model into")
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--context", type=int, default=512, help="tokens per training window")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=1100)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    torch.use_deterministic_algorithms(True)  # the same files from the same command
    os.makedirs(args.out, exist_ok=True)
    t_start = time.time()

    books = read_bible()
    train_text = "".join(t for b, t in books if b not in HELD_OUT)
    held_text = "".join(t for b, t in books if b in HELD_OUT)
    print(f"{len(books)} books: {len(train_text)} bytes to train on, {len(held_text)} held out "
          f"({', '.join(HELD_OUT)})", flush=True)

    merges = train_bpe(train_text, args.vocab)
    enc = BpeEncoder(merges)
    tok = tokenizer_json(enc, merges)
    with open(os.path.join(args.out, "tokenizer.json"), "w") as f:
        json.dump(tok, f, ensure_ascii=False, indent=1)
    with open(os.path.join(args.out, "heldout.txt"), "w") as f:
        f.write(held_text)
    train_ids = torch.tensor(enc.encode(train_text))
    held_ids = enc.encode(held_text)
    print(f"tokenizer: {len(enc.vocab) + 1} ids; {len(train_ids)} training tokens "
          f"({len(train_text) / len(train_ids):.2f} bytes each), {len(held_ids)} held out "
          f"[{time.time() - t_start:.0f} s]", flush=True)

    d = args.hidden
    config = {
        "model_type": "linear_attn", "architectures": ["LinearAttentionForCausalLM"],
        "attn_mode": "fused_chunk", "vocab_size": len(enc.vocab) + 1, "hidden_size": d,
        "num_hidden_layers": args.layers, "num_heads": args.heads, "num_kv_heads": args.heads,
        "expand_k": 1, "expand_v": 1, "hidden_ratio": 4,
        "intermediate_size": 256 * math.ceil(d * 4 * 2 / 3 / 256), "hidden_act": "swish",
        "feature_map": "elu", "tie_feature_map_qk": False, "norm_q": False, "norm_k": False,
        "norm_feature_map": True, "elementwise_affine": True, "norm_eps": 1e-6,
        "tie_word_embeddings": True, "eos_token_id": len(enc.vocab), "torch_dtype": "float16",
    }
    model = Model(config)
    decay = [p for n, p in model.named_parameters() if p.dim() == 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95))
    warmup = max(1, args.steps // 20)
    schedule = lambda s: min(1.0, (s + 1) / warmup) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * s / args.steps)))
    T, n_train = args.context, len(train_ids)
    t0 = time.time()
    for step in range(args.steps):
        for g in opt.param_groups:
            g["lr"] = args.lr * schedule(step)
        starts = torch.randint(0, n_train - T - 1, (args.batch,))
        batch = torch.stack([train_ids[s:s + T + 1] for s in starts.tolist()])
        logits = model(batch[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 25 == 0 or step == args.steps - 1:
            rate = (step + 1) * args.batch * T / (time.time() - t0)
            print(f"step {step}/{args.steps}: loss {loss.item():.4f}, {rate:.0f} tokens/s", flush=True)

    tensors = model.tensors()
    write_safetensors(os.path.join(args.out, "model.safetensors"), tensors)
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")
    with torch.no_grad():
        nll = evaluate(tensors, config, held_ids)
    n_bytes = len(held_text.encode())
    result = {
        "text": "heldout.txt", "tokens": len(held_ids), "predicted": len(held_ids) - 1,
        "bytes": n_bytes, "mean_nll": nll, "ppl": math.exp(nll),
        # bits per byte: the text's total bits over its bytes (the first token is not predicted)
        "bits_per_byte": nll * (len(held_ids) - 1) / math.log(2) / n_bytes,
        "train_steps": args.steps, "train_tokens": args.steps * args.batch * T,
        "train_seconds": round(time.time() - t_start),
    }
    with open(os.path.join(args.out, "eval.json"), "w") as f:
        json.dump(result, f, indent=2)
        f.write("\n")
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
