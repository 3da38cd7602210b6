"""llama.cpp's collection of published chat templates (tests/fixtures/templates/llama.cpp),
rendered by Jinja2 in transformers' environment (oracle.py's) over oracle.py's conversations.
test_template "[oracle]" renders each case with recur and counts, per template, the cases that
come out exactly as Jinja2's (the same text, the same raise_exception message, or an error
where Jinja2 fails).

    /usr/bin/python3 collection.py OUT_DIR TEMPLATE_DIR

OUT_DIR/collection.jsonl gets one case a line, in oracle.py's format.
"""
import glob
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import oracle  # noqa: E402

# The variables besides the conversation: transformers passes the tokenizer's special tokens;
# these stand for them (the templates of the collection come without their tokenizers).
TOKENS = {"bos_token": "<s>", "eos_token": "</s>"}

# What two templates need beyond transformers' variables, so that they render at all (without
# it Jinja2 fails on every conversation, and so would the comparison prove little): firefunction
# v2 prints a `functions` text and a `datetime` its callers pass; Command R+ prints every
# parameter's description, which oracle.py's tools leave out for some.
EXTRA = {"fireworks-ai-llama-3-firefunction-v2": {
    "functions": json.dumps([t["function"] for t in oracle.TOOLS], ensure_ascii=False), "datetime": "2026-09-28"}}
DESCRIBED_TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city; \"quoted\" <b>",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "City name, e.g. Zürich"},
        "days": {"type": "integer", "description": "How many days"}}, "required": ["city"]}}}]
TOOLS = {"CohereForAI-c4ai-command-r-plus-tool_use": DESCRIBED_TOOLS}


def render(template, messages, tools, agp, extra):
    """(kind, value): ("expected", text), ("raise", message) or ("error", what Jinja2 raised)."""
    try:
        return "expected", template.render(messages=messages, tools=tools, documents=None,
                                           add_generation_prompt=agp, **TOKENS, **extra)
    except oracle.TemplateRaised as e:
        return "raise", str(e)
    except Exception as e:  # any failure of Jinja2's is one recur must have too
        return "error", f"{type(e).__name__}: {e}"


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    out_dir, template_dir = sys.argv[1], sys.argv[2]
    os.makedirs(out_dir, exist_ok=True)
    counts = {"expected": 0, "raise": 0, "error": 0}
    paths = sorted(glob.glob(os.path.join(template_dir, "*.jinja")))
    unparsed = []
    with open(os.path.join(out_dir, "collection.jsonl"), "w", encoding="utf-8") as out:
        for path in paths:
            with open(path, encoding="utf-8") as f:
                source = f.read()
            try:
                template = oracle.compile_template(source)
            except Exception as e:  # Jinja2 refuses the whole template: recur must as well
                unparsed.append(os.path.basename(path))
                template = None
                compile_error = f"{type(e).__name__}: {e}"
            name = oracle.label(path)
            # Whether the template walks content parts, found as recur's probe finds it: the
            # "auto" cases give Jinja2 the list or the joined text accordingly.
            walks = template is not None and oracle.walks_parts(template, TOKENS)
            for conv_name, messages in oracle.conversations().items():
                for tools in (None, TOOLS.get(name, oracle.TOOLS)):
                    for agp in (False, True):
                        for content, extra in (("string", {}), ("parts", {}), ("auto", {}),
                                               ("string", {"enable_thinking": False})):
                            if content != "string" and not oracle.has_parts(messages):
                                continue
                            if extra and conv_name not in ("multi_turn", "reasoning_inline", "tool_calls"):
                                continue
                            as_list = content == "parts" or (content == "auto" and walks)
                            given = messages if as_list else oracle.flatten(messages)
                            extra = {**EXTRA.get(name, {}), **extra}
                            case = {"id": f"{oracle.label(path)}/{conv_name}/tools={tools is not None}/agp={agp}/{content}",
                                    "template": os.path.abspath(path),
                                    "messages": json.dumps(messages, ensure_ascii=False),
                                    "tools": "" if tools is None else json.dumps(tools, ensure_ascii=False),
                                    "add_generation_prompt": agp, "content": content, "walks_parts": walks,
                                    "extra": json.dumps(extra) if extra else ""}
                            if "enable_thinking" in extra:
                                case["id"] += f"/enable_thinking={extra['enable_thinking']}"
                            if template is None:
                                kind, value = "error", compile_error
                            else:
                                kind, value = render(template, given, tools, agp, extra)
                            case[kind] = value
                            counts[kind] += 1
                            out.write(json.dumps(case, ensure_ascii=False) + "\n")
    print(f"collection.py: {sum(counts.values())} cases from {len(paths)} templates ({counts['expected']} "
          f"rendered, {counts['raise']} refused by raise_exception, {counts['error']} other errors; "
          f"{len(unparsed)} templates Jinja2 does not compile) in {out_dir}")


if __name__ == "__main__":
    main()
