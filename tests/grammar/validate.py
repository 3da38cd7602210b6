"""Validates documents against schemas with python3-jsonschema, for the serve test
(tests/serve/schema_test.mjs). Reads a JSON array of {"schema": ..., "text": ...} on standard
input; prints one line per document that does not parse or validate, and exits 1 if any.
"""
import json
import sys

from jsonschema import Draft202012Validator

cases = json.load(sys.stdin)
bad = 0
for i, case in enumerate(cases):
    try:
        value = json.loads(case["text"])
    except ValueError as e:
        bad += 1
        print(f"{i}: not JSON ({e}): {case['text']!r}")
        continue
    errors = list(Draft202012Validator(case["schema"]).iter_errors(value))
    if errors:
        bad += 1
        print(f"{i}: {errors[0].message}: {case['text']!r}")
print(f"{len(cases)} documents, {bad} invalid")
sys.exit(1 if bad else 0)
