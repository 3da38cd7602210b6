"""Random expressions, loops and layouts for the chat-template interpreter, rendered by Jinja2 in
transformers' environment (oracle.py's): operators, filters, tests, methods, slices and Undefined
mixed at random, over variables of every type, and text between tags with every whitespace
marker (trim_blocks, lstrip_blocks, -, +). test_template renders each and compares: the same
text where Jinja2 renders, an error where Jinja2 fails, and an error where recur is stricter by
design (docs/chat.md: string formatting with %, integers past 64 bits).

    /usr/bin/python3 expressions.py OUT_DIR [COUNT] [SEED]

OUT_DIR/expressions.jsonl gets one case a line: the source, the variables (JSON text), and the
expected text or Jinja2's error.
"""
import copy
import json
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import oracle  # noqa: E402

CONTEXT = {
    "s": "Hello, Wörld! ", "t": "  a b\tc\n", "n": 7, "m": -3, "f": 2.5, "z": 0, "e": "",
    "l": [3, 1, 2], "ls": ["b", "a", "c"], "d": {"k": 1, "j": [1, 2], "s": "x"},
    "msgs": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": None}],
    "nn": None, "b": True,
}
ATOMS = ["s", "t", "n", "m", "f", "z", "e", "l", "ls", "d", "msgs", "nn", "b", "missing", "1", "0",
         "2.0", "'a'", "''", "'x,y'", "none", "true", "false", "[1, 2]", "[]", "{'a': 1}",
         "('p', 'q')", "d.k", "d['j']", "msgs[0]", "msgs[-1].content", "l[1:]", "s[::-1]",
         "s[2:-2:2]", "l[::-2]", "d.missing", "l[9]", "msgs[0]['role']", "d.j[-1]"]
BINARY = ["+", "-", "*", "/", "//", "%", "~", "==", "!=", "<", "<=", ">", ">=", "in", "not in",
          "and", "or"]
# Filters whose Jinja2 result is a generator are followed by `| list`, so that Jinja2 runs them
# at once (a generator is printed as its address, and its errors wait until it is consumed).
FILTERS = ["length", "trim", "upper", "lower", "title", "capitalize", "string", "int", "float",
           "list", "first", "last", "sum", "min", "max", "tojson", "abs", "default('D')",
           "default('D', true)", "join(',')", "join", "replace('l', 'L')", "count", "safe", "d",
           "tojson(indent=2)", "tojson(sort_keys=true)", "reverse | list", "unique | list",
           "items | list", "map('upper') | list", "map(attribute='role') | list",
           "selectattr('content') | list", "rejectattr('role', 'eq', 'user') | list",
           "select('odd') | list", "reject('none') | list", "map('string') | join('/')",
           "dictsort", "dictsort(true, 'value', true)", "sort", "sort(reverse=true)",
           "sort(case_sensitive=true)", "sort(attribute='role')", "indent", "indent(2, true)",
           "indent('> ', blank=true)", "e", "escape", "e | upper", "safe | trim", "e | indent"]
TESTS = ["defined", "undefined", "none", "string", "number", "integer", "float", "boolean",
         "mapping", "iterable", "sequence", "odd", "even", "divisibleby 2", "eq 1", "in [1, 2]",
         "true", "false", "lower", "upper", "callable", "sameas none"]
METHODS = ["strip()", "lstrip('H')", "rstrip(' !')", "split()", "split(',')", "split('l', 1)",
           "rsplit(' ', 1)", "upper()", "lower()", "title()", "capitalize()", "startswith('He')",
           "endswith(('! ', 'x'))", "replace('o', '0')", "find('l')", "count('l')", "items() | list",
           "keys() | list", "values() | list", "get('k')", "get('q', 5)", "index(1)",
           "format(n, s)", "format(l)", "format(x=d)", "copy()", "pop()", "append(1)"]
OWNERS = ["s", "t", "d", "e", "msgs[0]", "missing", "n", "l"]


def expression(rng, depth=0):
    r = rng.random()
    if depth > 3 or r < 0.3:
        return rng.choice(ATOMS)
    if r < 0.5:
        return f"({expression(rng, depth + 1)} {rng.choice(BINARY)} {expression(rng, depth + 1)})"
    if r < 0.65:
        return f"{expression(rng, depth + 1)} | {rng.choice(FILTERS)}"
    if r < 0.75:
        negate = "not " if rng.random() < 0.3 else ""
        return f"({expression(rng, depth + 1)} is {negate}{rng.choice(TESTS)})"
    if r < 0.85:
        return f"{rng.choice(OWNERS)}.{rng.choice(METHODS)}"
    if r < 0.92:
        return f"({expression(rng, depth + 1)} if {expression(rng, depth + 1)} else {expression(rng, depth + 1)})"
    return f"(not {expression(rng, depth + 1)})"


TEXT = ["", " ", "  ", "\t", "\n", "\n\n", " \n ", "\n  ", "a", "b c", "\n\t x \n", "  y\n", "\r\n", "}", "%", "#"]


def tag(rng, body, kind):
    """A tag with random whitespace markers: {%- -%}, {%+ +%}, {{- -}}, {#- -#}."""
    left = rng.choice(["", "", "-", "+"] if kind != "{{" else ["", "-"])
    right = rng.choice(["", "", "-", "+"] if kind != "{{" else ["", "-"])
    close = {"{%": "%}", "{{": "}}", "{#": "#}"}[kind]
    return f"{kind}{left} {body} {right}{close}"


def layout(rng, depth=0):
    """Text and tags at random, for whitespace control: trim_blocks, lstrip_blocks, markers."""
    parts = []
    for _ in range(rng.randint(1, 6)):
        parts.append(rng.choice(TEXT))
        r = rng.random()
        if r < 0.25:
            parts.append(tag(rng, rng.choice(["'v'", "n", "missing", "l"]), "{{"))
        elif r < 0.35:
            parts.append(tag(rng, "comment", "{#"))
        elif r < 0.55 and depth < 3:
            parts += [tag(rng, "if " + rng.choice(["true", "false", "n > 3"]), "{%"), layout(rng, depth + 1)]
            if rng.random() < 0.5:
                parts += [tag(rng, "else", "{%"), layout(rng, depth + 1)]
            parts.append(tag(rng, "endif", "{%"))
        elif r < 0.7 and depth < 3:
            parts += [tag(rng, "for i in " + rng.choice(["l", "[]", "'ab'"]), "{%"), layout(rng, depth + 1),
                      tag(rng, "endfor", "{%")]
        elif r < 0.8:
            parts.append(tag(rng, "set q = " + rng.choice(["1", "'s'", "l | length"]), "{%"))
        elif r < 0.85 and depth < 3:
            parts += [tag(rng, "set blk", "{%"), layout(rng, depth + 1), tag(rng, "endset", "{%"), "{{ blk }}"]
    parts.append(rng.choice(TEXT))
    return "".join(parts)


def source(rng):
    if rng.random() < 0.25:
        return layout(rng)
    if rng.random() < 0.3:
        seq = rng.choice(["l", "ls", "s", "d", "msgs", "l | reverse", "d | items", "l[::-1]"])
        return "{% for x in " + seq + " %}{{ loop.index }}{{ x }}{{ " + expression(rng) + " }}{% endfor %}"
    return "{{ " + expression(rng) + " }}"


def main():
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    out_dir = sys.argv[1]
    count = int(sys.argv[2]) if len(sys.argv) > 2 else 4000
    rng = random.Random(int(sys.argv[3]) if len(sys.argv) > 3 else 35)
    os.makedirs(out_dir, exist_ok=True)
    rendered = failed = 0
    context = json.dumps(CONTEXT, ensure_ascii=False)
    with open(os.path.join(out_dir, "expressions.jsonl"), "w", encoding="utf-8") as out:
        for _ in range(count):
            src = source(rng)
            case = {"source": src, "context": context}
            try:
                # A copy each time: list.pop changes a list in place, in Jinja2 as in recur.
                case["expected"] = oracle.compile_template(src).render(**copy.deepcopy(CONTEXT))
                rendered += 1
            except Exception as e:  # any failure of Jinja2's is a failure recur must have too
                case["error"] = f"{type(e).__name__}: {e}"
                failed += 1
            out.write(json.dumps(case, ensure_ascii=False) + "\n")
    print(f"expressions.py: {count} random templates ({rendered} rendered, {failed} failed) in {out_dir}")


if __name__ == "__main__":
    main()
