#!/usr/bin/env bash
# The published config.json files kept verbatim in tests/fixtures/published (SOURCES.md there)
# through the recur binary: each is copied with its widths and depth reduced (hidden_size,
# intermediate_size, num_hidden_layers and the layer list cut to match; every other field as
# published), `recur make-model --config` writes random weights for the copy, and `recur score`
# runs them. The full-size configs are read field for field by test_model ("[published]").
# A config that is refused names its field, and this test prints the refusal.
#
# The published chat templates (a folder's chat_template.jinja, or the chat_template of its
# tokenizer_config.json) are rendered by `recur template` for a few conversations; a template
# refused only for a Jinja construct recur does not interpret ("unsupported ...") is listed as a
# known gap, not a failure. A generation_config.json must parse as JSON, and its eos_token_id
# must name ids the folder's config.json (when there is one) ends on.
#
#   tests/published_model_test.sh RECUR SOURCE_DIR
set -euo pipefail
recur="$1" src="$2"
fx="$src/tests/fixtures/published"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAILED: $*" >&2; exit 1; }

# shrink IN OUT: the config with 4 layers of width 64 (MLP 128); Qwen3.5's text_config or the
# top level, whichever holds the text model.
shrink() {
  python3 - "$1" "$2" <<'PY'
import json, sys
src, out = sys.argv[1], sys.argv[2]
with open(src, encoding="utf-8") as f:
    cfg = json.load(f)
text = cfg.get("text_config", cfg)
text["hidden_size"], text["num_hidden_layers"] = 64, 4
if "intermediate_size" in text:
    text["intermediate_size"] = 128
if isinstance(text.get("layer_types"), list):
    text["layer_types"] = text["layer_types"][:4]
with open(out, "w", encoding="utf-8") as f:
    json.dump(cfg, f, indent=2)
PY
}

printf '%s\n' 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 > "$tmp/ids.txt"
n=0
for dir in "$fx"/*/; do
  name=$(basename "$dir")
  [[ -f "$dir/config.json" ]] || continue
  shrink "$dir/config.json" "$tmp/$name.json"
  "$recur" make-model --config "$tmp/$name.json" --dtype bf16 "$tmp/$name" > /dev/null 2> "$tmp/err" ||
    { cat "$tmp/err" >&2; fail "make-model --config $name (reduced)"; }
  out=$("$recur" score --json -m "$tmp/$name" --token-ids "$tmp/ids.txt" 2> "$tmp/err") ||
    { cat "$tmp/err" >&2; fail "score $name (reduced)"; }
  grep -q '"mean_nll": [0-9]' <<< "$out" || fail "score $name printed no mean_nll: $out"
  # The copy make-model writes keeps the fields that decide the model.
  grep -q '"hidden_size": 64' "$tmp/$name/config.json" || fail "$name: make-model's config lost hidden_size"
  n=$((n + 1))
done
((n > 0)) || fail "no config.json under $fx"
echo "published configs: $n reduced copies made and scored"

# The conversations every published template renders: plain, with a system turn and an earlier
# assistant turn, and with a tool and a tool call answered by the tool.
cat > "$tmp/chat.json" <<'JSON'
[{"role": "user", "content": "Hello"}]
JSON
cat > "$tmp/turns.json" <<'JSON'
[{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hello"},
 {"role": "assistant", "content": "Hi."}, {"role": "user", "content": "What is 2+2?"}]
JSON
cat > "$tmp/tools.json" <<'JSON'
[{"type": "function", "function": {"name": "get_weather", "description": "The weather in a city",
  "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
JSON
cat > "$tmp/called.json" <<'JSON'
[{"role": "user", "content": "Weather in Paris?"},
 {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
 {"role": "tool", "content": "18 C, sunny"}]
JSON

# render NAME DIR ARGS...: the template's output in $tmp/out, 0 when rendered, 2 for a known gap.
render() {
  local name="$1" dir="$2"
  shift 2
  if "$recur" template -m "$dir" "$@" > "$tmp/out" 2> "$tmp/err"; then
    [[ -s "$tmp/out" ]] || fail "$name: template rendered nothing ($*)"
    return 0
  fi
  if grep -q "unsupported" "$tmp/err"; then
    echo "known gap: $name ($*): $(head -c 300 "$tmp/err")"
    return 2
  fi
  cat "$tmp/err" >&2
  fail "template $name ($*)"
}

t=0 gaps=0
for dir in "$fx"/*/; do
  name=$(basename "$dir")
  has_template=0
  [[ -f "$dir/chat_template.jinja" ]] && has_template=1
  if [[ -f "$dir/tokenizer_config.json" ]] &&
     python3 -c 'import json, sys; sys.exit(0 if json.load(open(sys.argv[1])).get("chat_template") else 1)' \
       "$dir/tokenizer_config.json"; then
    has_template=1
  fi
  if ((has_template)); then
    rc=0
    for args in "--messages $tmp/chat.json --add-generation-prompt" \
                "--messages $tmp/turns.json --add-generation-prompt" \
                "--messages $tmp/turns.json --add-generation-prompt --set enable_thinking=false" \
                "--messages $tmp/chat.json --tools $tmp/tools.json --add-generation-prompt" \
                "--messages $tmp/called.json --tools $tmp/tools.json --add-generation-prompt"; do
      # shellcheck disable=SC2086 # the arguments are split on purpose
      render "$name" "$dir" $args || rc=$?
      ((rc == 0)) || break
    done
    if ((rc == 0)); then t=$((t + 1)); else gaps=$((gaps + 1)); fi
  fi
  if [[ -f "$dir/generation_config.json" ]]; then
    python3 - "$dir" <<'PY' || fail "$name: generation_config.json"
import json, os, sys
d = sys.argv[1]
gen = json.load(open(os.path.join(d, "generation_config.json"), encoding="utf-8"))
eos = gen.get("eos_token_id")
eos = eos if isinstance(eos, list) else [eos]
assert all(isinstance(e, int) for e in eos), f"eos_token_id {gen.get('eos_token_id')!r}"
path = os.path.join(d, "config.json")
if os.path.exists(path):
    cfg = json.load(open(path, encoding="utf-8"))
    text = cfg.get("text_config", cfg)
    own = text.get("eos_token_id", cfg.get("eos_token_id"))
    own = own if isinstance(own, list) else [own]
    assert own[0] in eos, f"config.json's eos {own} is not among generation_config.json's {eos}"
PY
  fi
done

# Qwen3.5's template, read by hand for the conversation with an earlier turn: the system turn
# first, the earlier assistant turn without a think block, the generation prompt opening one.
q="$fx/qwen3.5-4b"
if [[ -f "$q/chat_template.jinja" ]]; then
  render qwen3.5-4b "$q" --messages "$tmp/turns.json" --add-generation-prompt
  printf '%s' $'<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\nHi.<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n<think>\n' > "$tmp/want"
  cmp -s "$tmp/out" "$tmp/want" || { diff "$tmp/want" "$tmp/out" >&2 || true; fail "qwen3.5-4b: rendered text"; }
  render qwen3.5-4b "$q" --messages "$tmp/called.json" --tools "$tmp/tools.json" --add-generation-prompt
  [[ "$(cat "$tmp/out")" == *$'<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>'* ]] ||
    fail "qwen3.5-4b: the tool call is not in Qwen3.5's XML form"
fi
# LFM2.5's template, read by hand: the system turn first, an earlier assistant turn without its
# think block, the last one with it, the tools listed in the system turn as JSON.
l="$fx/lfm2.5-1.2b-instruct"
if [[ -f "$l/chat_template.jinja" ]]; then
  cat > "$tmp/think.json" <<'JSON'
[{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hello"},
 {"role": "assistant", "content": "<think>greet</think>  Hi."}, {"role": "user", "content": "2+2?"},
 {"role": "assistant", "content": "<think>add</think>4"}, {"role": "user", "content": "Thanks"}]
JSON
  render lfm2.5-1.2b-instruct "$l" --messages "$tmp/think.json" --add-generation-prompt
  printf '%s' $'<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\nHi.<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n<think>add</think>4<|im_end|>\n<|im_start|>user\nThanks<|im_end|>\n<|im_start|>assistant\n' > "$tmp/want"
  cmp -s "$tmp/out" "$tmp/want" || { diff "$tmp/want" "$tmp/out" >&2 || true; fail "lfm2.5-1.2b-instruct: rendered text"; }
  render lfm2.5-1.2b-instruct "$l" --messages "$tmp/chat.json" --tools "$tmp/tools.json" --add-generation-prompt
  [[ "$(cat "$tmp/out")" == $'<|im_start|>system\nList of tools: [{"type": "function", "function": {"name": "get_weather"'* ]] ||
    fail "lfm2.5-1.2b-instruct: the tools are not listed in the system turn: $(cat "$tmp/out")"
fi
# Granite 4.0-H-Micro's template: with a system turn, the very text llama.cpp's server rendered
# from it (190 bytes, sha256 d021d4f0534a597f..., SOURCES.md); without one, IBM's default system
# message; a tool call as a JSON object in <tool_call> tags, the tool's answer in a user turn.
g="$fx/granite-4.0-h-micro"
if [[ -f "$g/chat_template.jinja" ]]; then
  cat > "$tmp/concise.json" <<'JSON'
[{"role": "system", "content": "You are a concise assistant."}, {"role": "user", "content": "Answer with OK."}]
JSON
  render granite-4.0-h-micro "$g" --messages "$tmp/concise.json" --add-generation-prompt
  printf '%s' $'<|start_of_role|>system<|end_of_role|>You are a concise assistant.<|end_of_text|>\n<|start_of_role|>user<|end_of_role|>Answer with OK.<|end_of_text|>\n<|start_of_role|>assistant<|end_of_role|>' > "$tmp/want"
  cmp -s "$tmp/out" "$tmp/want" || { diff "$tmp/want" "$tmp/out" >&2 || true; fail "granite-4.0-h-micro: rendered text"; }
  render granite-4.0-h-micro "$g" --messages "$tmp/chat.json" --add-generation-prompt
  [[ "$(cat "$tmp/out")" == $'<|start_of_role|>system<|end_of_role|>You are a helpful assistant. Please ensure responses are professional, accurate, and safe.<|end_of_text|>\n<|start_of_role|>user<|end_of_role|>Hello<|end_of_text|>\n'* ]] ||
    fail "granite-4.0-h-micro: not IBM's default system message: $(cat "$tmp/out")"
  render granite-4.0-h-micro "$g" --messages "$tmp/called.json" --tools "$tmp/tools.json" --add-generation-prompt
  [[ "$(cat "$tmp/out")" == *$'<|start_of_role|>assistant<|end_of_role|><tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call><|end_of_text|>\n<|start_of_role|>user<|end_of_role|>\n<tool_response>\n18 C, sunny\n</tool_response><|end_of_text|>'* ]] ||
    fail "granite-4.0-h-micro: the tool call and its answer: $(cat "$tmp/out")"
fi
echo "published templates: $t rendered, $gaps known gaps"
