#!/usr/bin/env python3
"""Writes the RWKV world vocabulary the tests read (tests/world/rwkv_vocab_v20230424.txt).

The file is in the published format, `<id> <Python str or bytes literal> <length in bytes>`,
with ids 1, 2, 3, ... and the 256 single bytes first, as in BlinkDL's file; its tokens are
chosen to be hard for a reader and an encoder: every escape Python has, both quote kinds, str
and bytes literals, multi-byte UTF-8, CJK, emoji and their joiners, combining marks, runs of
spaces and newlines, code, and pieces of characters that are not UTF-8 on their own. One token
is given twice (the reference keeps the later id). Each literal is checked with Python's own
parser (ast.literal_eval) before it is written.

    python3 tests/world/make_vocab.py > tests/world/rwkv_vocab_v20230424.txt
"""
import ast
import random
import sys
import warnings

rng = random.Random(20230424)

# The ways Python spells one character inside a str literal (besides the character itself).
NAMED = {7: "\\a", 8: "\\b", 9: "\\t", 10: "\\n", 11: "\\v", 12: "\\f", 13: "\\r"}
ESCAPE_LETTERS = set("\\'\"abfnrtvxuUN01234567\n")


def spell_char(c, quote, next_char, in_bytes):
    """A random spelling of one character (or, in bytes, one byte as a one-char str)."""
    cp = ord(c)
    choices = []
    # The character itself, where Python allows it raw.
    if c not in ("\\", quote, "\n", "\r", "\0") and (cp < 0x80 or not in_bytes):
        if cp >= 0x20 or cp == 9:
            choices += [c] * 4
        else:
            choices.append(c)  # a raw control character inside the literal is allowed
    if c in ("\\", "'", '"'):
        choices.append("\\" + c)
    if cp in NAMED:
        choices.append(NAMED[cp])
    if cp < 0x100:
        choices.append("\\x%02x" % cp)
        choices.append("\\x%02X" % cp)
    if cp < 0o400 or (not in_bytes and cp < 0o1000):
        # An octal escape of fewer than three digits must not run into a following digit.
        if next_char is None or next_char not in "01234567":
            choices.append("\\%o" % cp)
        choices.append("\\%03o" % cp)
    if not in_bytes:
        if cp < 0x10000:
            choices.append("\\u%04x" % cp)
        choices.append("\\U%08x" % cp)
    return rng.choice(choices)


def spell(token, as_bytes):
    """A Python literal for `token` (bytes): a bytes literal, or a str literal of its UTF-8."""
    quote = rng.choice("'\"")
    if as_bytes:
        chars = [chr(b) for b in token]
    else:
        chars = list(token.decode("utf-8"))
    out = []
    i = 0
    while i < len(chars):
        c = chars[i]
        nxt = chars[i + 1] if i + 1 < len(chars) else None
        # A backslash that starts no escape is kept as written: spell some that way.
        # The character after it is then written as itself, or it would start an escape.
        if (c == "\\" and nxt is not None and nxt not in ESCAPE_LETTERS and nxt != quote
                and 0x20 <= ord(nxt) < 0x7F and rng.random() < 0.5):
            out.append("\\" + nxt)
            i += 2
            continue
        out.append(spell_char(c, quote, nxt, as_bytes))
        i += 1
    return ("b" if as_bytes else "") + quote + "".join(out) + quote


def tokens():
    seen = []
    # 1. Every byte.
    seen += [bytes([b]) for b in range(256)]
    # 2. Whitespace runs, as the published file has them.
    for n in range(2, 17):
        seen.append(b" " * n)
    for n in range(2, 9):
        seen += [b"\n" * n, b"\t" * n, b"\r\n" * (n // 2 + 1)]
    seen += [b" \n", b"\n ", b"\n\n ", b" \t", b"\t\n", b"\r\n", b".\n", b".\n\n", b",\n"]
    # 3. English and code.
    words = ("the of and to in is that for it as was with be by on not he this are or his from "
             "at which but have an they you were her she there all one their had been has more "
             "will would so if what when who can about into than them these its some time only "
             "new other could first also after two like may such should where most make over "
             "world token hello Hello World The And It In ing tion ed er es ly ment able ness "
             "def class return import from self None True False void int char const static "
             "struct include define std vector string size_t nullptr auto template typename "
             "function var let console log println printf main argc argv").split()
    for w in words:
        seen += [w.encode(), b" " + w.encode()]
    code = ["():", "()", "{}", "[]", "{\n", "}\n", "};\n", "    ", "        ", "\t\t", "->", "=>",
            "!=", "==", "<=", ">=", "&&", "||", "::", "//", "/*", "*/", "#include", "#define",
            "\\n", "\\t", "\\\\", "\\d", "\\w+", "\\s*", "\\(", "\\q", "\\ ", "'", "\"", "\"\"",
            "''", "\\'", "\\\"", "print(", "\")", "');", "\"\"\"", "' '", "`", "${", "0x", "0o",
            "1234", "000", "\\N", "\\u", "\\x", "\\U0001", "\\u00e9", "\\x41"]
    seen += [c.encode() for c in code]
    # 4. Other scripts, accents and combining marks.
    latin = "éèêëàâäçîïôöùûüÿñßøåæœÉÀÇÑÖÜ"
    seen += [c.encode() for c in latin]
    seen += [w.encode() for w in ["café", " café", "naïve", " über", "Straße", "façade",
                                  "e\u0301", "a\u0308", "\u0301", "\u0308", "\u0323\u0302",
                                  "o\u0308\u0304", "Ελληνικά", " και", "Привет", " мир",
                                  "слово", "مرحبا", " العالم", "שלום", "नमस्ते", "हिन्दी",
                                  "สวัสดี", "한국어", " 안녕", "ǿ", "\u00a0", "\u2028",
                                  "\u200b", "\ufeff", "\ufffd", "\u00ad"]]
    # 5. CJK: single characters and pairs of them.
    cjk = [chr(0x4E00 + rng.randrange(0x5000)) for _ in range(600)]
    cjk += list("的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年得就那要下以生会自着去之过家学对可她里后小么心多天而能好都然没日于起还发成事只作当想看文无开手十用主行方又如前所本见经头面公同三已老从动两长知民样现分将外但身些与高意进把法此实回二理美点月明其种声全工己话儿者向情部正名定女问力机给等几很业最间新什打便位因重被走电四第门相次东政海口使教西再平真听世气信北少关并内加化由却代军产入先山五太水万市眼体别处总才场师书比住员九笑性通目华报立马命张活难神数件安表原车白应路期叫死常提感金何更反合放做系计或司利受光王果亲界及今京务制解各任至清物台象记边共风战干接它许八特觉望直服毛林题建南度统色字请交爱让认算论百吃义科怎元社术结六功指思非流每青管夫连远资队跟带花快条院变联言权往展该领传近留红治决周保达办运武半候七必城父强步完革深区即求品士转量空甚众技轻程告江语英基派满式李息写呢识极令黄德收脸钱党倒未持取设始版双历越史商千片容研像找友孩站广改议形委早房音火际则首单据导影失拿网香似斯专石若兵弟谁校读志飞观争究包组造落视济喜离虽坐集编宝谈府拉黑且随格尽剑讲布杀微怕母调局根曾准团段终乐切级克精哪官示冷域读")
    cjk = list(dict.fromkeys(cjk))
    seen += [c.encode() for c in cjk]
    for _ in range(700):
        seen.append((rng.choice(cjk) + rng.choice(cjk)).encode())
    seen += [w.encode() for w in ["中文", "日本語", "ひらがな", "カタカナ", "。", "，", "、", "「", "」", "！", "？"]]
    # 6. Emoji, skin tones, joiners, variation selectors, flags.
    emoji = [chr(0x1F600 + k) for k in range(48)] + ["👍", "👎", "🏻", "🏽", "🏿", "\u200d", "\ufe0f",
                                                     "♀", "♂", "👨", "👩", "👧", "👦", "❤", "🇺", "🇸",
                                                     "🇯", "🇵"]
    seen += [e.encode() for e in emoji]
    seen += [w.encode() for w in ["👨\u200d", "\u200d👩", "👨\u200d👩\u200d👧", "👍🏽", "❤\ufe0f",
                                  "🇺🇸", "♀\ufe0f", "\u200d♀\ufe0f", "🏳\ufe0f\u200d🌈"]]
    # 7. Pieces of characters: not UTF-8 on their own (bytes literals in the file).
    sources = cjk[:200] + emoji + list(latin) + ["€", "—", "…", "“", "”"]
    for _ in range(500):
        b = rng.choice(sources).encode() + rng.choice(sources).encode()
        i = rng.randrange(1, len(b))
        j = rng.randrange(i + 1, len(b) + 1)
        seen.append(b[rng.randrange(0, i):j])
    # 8. Fill up with n-grams of ASCII text.
    text = ("It was the best of times, it was the worst of times, it was the age of wisdom, it "
            "was the age of foolishness. for (int i = 0; i < n; ++i) { sum += a[i] * b[i]; } "
            "def f(x):\n    return x ** 2  # square\n\nprint(f(3))\n")
    while len(set(seen)) < 3000:
        i = rng.randrange(len(text))
        seen.append(text[i:i + rng.randrange(2, 9)].encode())
    return list(dict.fromkeys(t for t in seen if t))


def main():
    warnings.simplefilter("ignore")  # Python warns of \q and \777; they are valid still
    toks = tokens()
    dup = b" the"
    toks.append(dup)  # given twice: the reference encodes it as the later id
    lines = []
    for i, t in enumerate(toks, start=1):
        try:
            t.decode("utf-8")
            utf8 = True
        except UnicodeDecodeError:
            utf8 = False
        # The published file writes a token as a str where it is UTF-8; some are bytes here too.
        as_bytes = not utf8 or (i > 256 and rng.random() < 0.1 and all(b < 0x80 for b in t))
        lit = spell(t, as_bytes)
        value = ast.literal_eval(lit)
        got = value if isinstance(value, bytes) else value.encode("utf-8")
        assert got == t, (i, lit, t, got)
        lines.append("%d %s %d\n" % (i, lit, len(t)))
    sys.stdout.write("".join(lines))


if __name__ == "__main__":
    main()
