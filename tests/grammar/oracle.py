"""The oracle for tests/test_json_schema.cpp: python3-jsonschema's verdict on each document.

Reads SCHEMAS (a JSON array) and DOCS (lines of {"s": schema index, "hex": the document's bytes,
"ours": recur's verdict}); prints each disagreement and exits 1 if there is one. recur must never
accept what the oracle refuses. It may refuse a valid document only when the document is written
in a form recur does not produce (numbers of more than 15 digits, a duplicate or escaped key).
"""
import json
import re
import sys

from jsonschema import Draft202012Validator

schemas = json.load(open(sys.argv[1]))
validators = [Draft202012Validator(s) for s in schemas]
bad = 0
checked = 0
for line in open(sys.argv[2]):
    case = json.loads(line)
    raw = bytes.fromhex(case["hex"])
    odd = False

    def pairs(items):
        global odd
        keys = [k for k, _ in items]
        if len(set(keys)) != len(keys):
            odd = True
        return dict(items)

    try:
        text = raw.decode("utf-8")
        value = json.loads(text, object_pairs_hook=pairs,
                           parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))
        valid = validators[case["s"]].is_valid(value)
    except ValueError:
        valid = False
    else:
        # Outside strings: whitespace (recur writes none), and numbers with a fraction or an
        # exponent (jsonschema counts 1e3 as an integer; recur writes integers without them).
        bare = re.sub(r'"(?:[^"\\]|\\.)*"', '""', text)
        if re.search(r"\d{16,}|[eE][+-]?\d{3,}", text) or re.search(r'\\[^"]*"\s*:', text):
            odd = True
        if re.search(r"\s", bare) or re.search(r"[.eE]", bare):
            odd = True
    checked += 1
    if case["ours"] and not valid:
        bad += 1
        print(f"schema {case['s']}: recur accepts what jsonschema refuses: {raw!r}")
    elif valid and not case["ours"] and not odd:
        bad += 1
        print(f"schema {case['s']}: recur refuses a valid document: {raw!r}")
print(f"{checked} documents, {bad} disagreements")
sys.exit(1 if bad else 0)
