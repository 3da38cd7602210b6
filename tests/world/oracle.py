#!/usr/bin/env python3
"""The reference for recur's RWKV world tokenizer: writes what recur must give.

    python3 tests/world/oracle.py VOCAB OUT
    python3 tests/world/oracle.py VOCAB --ids FILE     the ids of FILE's text, one a line

A trie tokenizer written for the tests from the published description of BlinkDL's
TRIE_TOKENIZER (RWKV-LM, ChatRWKV's rwkv_tokenizer.py): each line of the vocabulary is
`<id> <literal> <length>`, the literal read by Python itself (ast.literal_eval, which evaluates
nothing but literals), a str encoded to UTF-8; the map from bytes to id keeps the later id where
two ids hold the same bytes; encoding walks a trie over the bytes and takes the longest token at
each position. It shares no code with recur. OUT gets one line per check, fields split by tabs,
bytes in hex:

    V  id  token                      every id's bytes
    T  text  ids  decoded             a text (UTF-8), its ids, the text of those ids
    B  bytes  ids  decoded            any bytes (not UTF-8), their ids, their text (U+FFFD for
                                      each ill-formed sequence, Python's errors="replace")
    D  ids  decoded                   random ids and their text, the same way
"""
import ast
import random
import sys
import warnings


def read_vocab(path):
    warnings.simplefilter("ignore")  # \q and \777 are deprecated spellings, valid still
    idx2token = {}
    with open(path, "r", encoding="utf-8") as f:
        for line in f.read().split("\n"):
            if not line:
                continue
            first, last = line.index(" "), line.rindex(" ")
            value = ast.literal_eval(line[first + 1:last])
            token = value.encode("utf-8") if isinstance(value, str) else value
            assert isinstance(token, bytes)
            assert len(token) == int(line[last + 1:]), line
            idx2token[int(line[:first])] = token
    return idx2token


class Trie:
    def __init__(self, idx2token):
        self.root = {}
        token2idx = {}
        for i in sorted(idx2token):  # later ids overwrite earlier ones with the same bytes
            token2idx[idx2token[i]] = i
        for token, i in token2idx.items():
            node = self.root
            for b in token:
                node = node.setdefault(b, {})
            node[None] = i  # the id that ends here

    def encode(self, data):
        ids, pos = [], 0
        while pos < len(data):
            node, best, best_end = self.root, None, pos
            k = pos
            while k < len(data) and data[k] in node:
                node = node[data[k]]
                k += 1
                if None in node:
                    best, best_end = node[None], k
            assert best is not None, "byte %d has no token" % data[pos]
            ids.append(best)
            pos = best_end
        return ids


HARD = [
    "", " ", "  ", "\n", "\n\n\n", "\n\n\n\n\n\n\n\n\n\n\n", " \n \n", "\t\t\tx", "\r\n\r\n",
    "Hello world", "Hello World!", "the the the", " the", "It was the best of times",
    "def f(x):\n    return x ** 2  # square\n\nprint(f(3))\n",
    "for (int i = 0; i < n; ++i) { sum += a[i] * b[i]; }",
    "#include <vector>\nint main(int argc, char** argv) {\n\treturn 0;\n}\n",
    "path\\to\\file \\n \\t \\\\ \\q \\u00e9 \\x41 \\N{DIGIT ONE}",
    "'quoted' \"double\" `back` '''triple''' \"\"\"", "中文", "日本語のテキスト、カタカナ。",
    "我们的世界是一个很大的地方，人们说不同的语言。", "한국어 텍스트 안녕하세요", "Ελληνικά και Русский мир",
    "مرحبا بالعالم", "שלום עולם", "नमस्ते हिन्दी", "สวัสดีครับ",
    "café naïve über Straße façade", "e\u0301e\u0301e\u0301 a\u0308 o\u0308\u0304 \u0323\u0302",
    "\u0301 starts with a combining mark", "Z\u0351\u036b\u0343\u036a\u0302\u036b\u033d\u034f\u0334alg\u0335o",
    "👨\u200d👩\u200d👧\u200d👦 family", "👍🏽👍🏻👍🏿", "❤\ufe0f❤❤\ufe0f", "🇺🇸🇯🇵🇺", "🏳\ufe0f\u200d🌈",
    "👩\u200d💻 \u200d\u200d\u200d", "😀😁😂🤣😃", "\ufffd\ufffd replacement", "Ã© Ã¼ Ã mojibake",
    "\x00\x01\x7f control", "\x80\x85\x9f C1", "\u00a0\u2028\u200b\ufeff\u00ad",
    "\ufffe\uffff\U0010ffff\U000e0001 noncharacters", "ǿ\u01ff", "€—…“”",
    "a" * 300, " " * 200, "\n" * 100, "中" * 50, "😀" * 30,
]


def random_text(rng, pools):
    parts = []
    for _ in range(rng.randrange(1, 40)):
        pool = rng.choice(pools)
        parts.append(pool(rng))
    return "".join(parts)


def pools():
    words = ["the", " the", "of", " and", "Hello", " world", "token", "ing", "tion", "def", " class",
             "return", "    ", "\n", "\n\n", "  ", "\t", "():", "{\n", "}", ";", ",", ".", "!", "?",
             "0x1F", "42", "std::vector<int>", "->", "=>", "//", "\\n", "\\", "'", '"']
    cjk = [chr(c) for c in range(0x4E00, 0x4E00 + 400)] + list("的一是不了人我在有他这中大来上国")
    emoji = [chr(c) for c in range(0x1F600, 0x1F650)] + ["👍", "👨", "👩", "👧", "❤", "🌈", "💻"]
    mods = ["\u200d", "\ufe0f", "🏻", "🏽", "🏿", "\u0301", "\u0308", "\u0323", "\u0302"]
    latin = list("éèêëàâäçîïôöùûüÿñßøåæœÉÀÇÑÖÜ") + ["Ã©", "Ã¼", "â€™"]
    other = list("ΑαΒβΓγДдЖжЯяابتשלוםनमस्तेกขค한국어ひらがなカタカナ。，、「」！？") + [
        "\ufffd", "\u00a0", "\u2028", "\u200b", "\ufeff", "\x00", "\x7f", "\x85", "\U0010ffff",
        "\ue000", "€", "—", "…"]
    return [
        lambda r: r.choice(words),
        lambda r: "".join(r.choice(cjk) for _ in range(r.randrange(1, 6))),
        lambda r: r.choice(emoji) + "".join(r.choice(mods) for _ in range(r.randrange(0, 3))),
        lambda r: r.choice(emoji) + "\u200d" + r.choice(emoji),
        lambda r: r.choice("aeiou") + "".join(r.choice(mods[5:]) for _ in range(r.randrange(1, 4))),
        lambda r: r.choice(latin),
        lambda r: r.choice(other),
        lambda r: r.choice([" ", "\n", "\t", "\r\n"]) * r.randrange(1, 12),
        lambda r: chr(r.randrange(0x20, 0x7F)) * r.randrange(1, 4),
        lambda r: chr(r.choice([r.randrange(0x80, 0x800), r.randrange(0x800, 0xD800),
                                r.randrange(0xE000, 0x10000), r.randrange(0x10000, 0x110000)])),
    ]


def hexs(b):
    return b.hex()


def main():
    vocab_path, out_path = sys.argv[1], sys.argv[2]
    idx2token = read_vocab(vocab_path)
    trie = Trie(idx2token)
    if out_path == "--ids":
        with open(sys.argv[3], "rb") as f:
            sys.stdout.write("".join("%d\n" % i for i in trie.encode(f.read())))
        return
    rng = random.Random(34)
    lines = ["V\t%d\t%s" % (i, hexs(t)) for i, t in sorted(idx2token.items())]
    texts = list(HARD)
    ps = pools()
    while len(texts) < 400:
        texts.append(random_text(rng, ps))
    for text in texts:
        data = text.encode("utf-8")
        ids = trie.encode(data)
        decoded = b"".join(idx2token[i] for i in ids)
        assert decoded == data
        lines.append("T\t%s\t%s\t%s" % (hexs(data), ",".join(map(str, ids)),
                                        hexs(decoded.decode("utf-8").encode("utf-8"))))
    # Bytes that are not UTF-8: pieces of characters, stray continuation and lead bytes.
    pieces = [t for t in idx2token.values()]
    n_bytes = 0
    while n_bytes < 80:
        parts = []
        for _ in range(rng.randrange(1, 12)):
            kind = rng.randrange(4)
            if kind == 0:
                parts.append(bytes([rng.randrange(256)]))
            elif kind == 1:
                parts.append(rng.choice(pieces))
            elif kind == 2:
                c = chr(rng.randrange(0x80, 0x110000))
                if 0xD800 <= ord(c) < 0xE000:
                    c = "\ufffd"
                b = c.encode("utf-8")
                parts.append(b[:rng.randrange(1, len(b) + 1)])
            else:
                parts.append(rng.choice([b"\xff\xfe", b"\xc0\xaf", b"\xed\xa0\x80", b"\xf4\x90\x80\x80",
                                         b"\xe4\xb8", b"\xf0\x9f\x98", b"\x80\x80\x80"]))
        data = b"".join(parts)
        try:
            data.decode("utf-8")
            continue  # UTF-8 after all: the texts above have those
        except UnicodeDecodeError:
            n_bytes += 1
        ids = trie.encode(data)
        assert b"".join(idx2token[i] for i in ids) == data
        lines.append("B\t%s\t%s\t%s" % (hexs(data), ",".join(map(str, ids)),
                                        hexs(data.decode("utf-8", "replace").encode("utf-8"))))
    # Random ids: their bytes rarely form UTF-8.
    n = max(idx2token)
    for k in range(80):
        ids = [rng.randrange(1, n + 1) for _ in range(rng.randrange(1, 30))]
        data = b"".join(idx2token[i] for i in ids)
        lines.append("D\t%s\t%s" % (",".join(map(str, ids)),
                                    hexs(data.decode("utf-8", "replace").encode("utf-8"))))
    with open(out_path, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("oracle: %d ids, %d texts, %d byte strings, %d id sequences written to %s"
          % (len(idx2token), len(texts), 80, 80, out_path))


if __name__ == "__main__":
    main()
