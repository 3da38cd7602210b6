#!/usr/bin/env bash
# recur template --parse-reply: a reply's text to the assistant message, with the format the
# model's template renders calls in (Qwen3.5's XML, Llama 3.1's bare JSON), whether the prompt
# opened a thought found from --messages and --set, and bad input refused with a clear line.
#   tests/template/cli_parse_reply_test.sh RECUR FIXTURES_DIR
set -euo pipefail
recur="$1"
fixtures="$2"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
checks=0
ok() { checks=$((checks + 1)); }
expect() {  # expect FILE TEXT: FILE holds TEXT and a newline
  [[ "$(cat "$1")" == "$2" ]] || fail "expected $2, got $(cat "$1")"
  ok
}

qwen="$fixtures/published/qwen3.5-4b"
mkdir -p "$dir/llama"
cp "$fixtures/templates/llama.cpp/meta-llama-Llama-3.1-8B-Instruct.jinja" "$dir/llama/chat_template.jinja"
cat > "$dir/tools.json" <<'J'
[{"type": "function", "function": {"name": "get_weather", "description": "Weather", "parameters": {"type": "object",
  "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}}}]
J
printf '[{"role": "user", "content": "Weather in Paris?"}]' > "$dir/chat.json"
# Qwen3.5's generation prompt opens the thought: the reply starts inside it.
printf 'Paris, so \xc3\xa9t\xc3\xa9.\n</think>\n\nLooking.\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n2\n</parameter>\n</function>\n</tool_call>' > "$dir/reply.txt"
"$recur" template -m "$qwen" --parse-reply "$dir/reply.txt" --tools "$dir/tools.json" --messages "$dir/chat.json" > "$dir/out"
expect "$dir/out" '{"role":"assistant","content":"Looking.","reasoning_content":"Paris, so été.","tool_calls":[{"id":"call_0_0","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\",\"days\":2}"}}]}'
# With enable_thinking false the prompt closes the thought: the same text is all content but the
# call, and the stray </think> stays in it.
"$recur" template -m "$qwen" --parse-reply - --tools "$dir/tools.json" --messages "$dir/chat.json" --set enable_thinking=false < "$dir/reply.txt" > "$dir/out"
expect "$dir/out" '{"role":"assistant","content":"Paris, so été.\n</think>\n\nLooking.","tool_calls":[{"id":"call_0_0","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\",\"days\":2}"}}]}'
# Without --tools no call is read: the text comes back whole.
"$recur" template -m "$qwen" --parse-reply "$dir/reply.txt" --in-thought > "$dir/out"
grep -q '"content":"Looking.\\n\\n<tool_call>\\n<function=get_weather>' "$dir/out" || fail "without tools: $(cat "$dir/out")"
ok
# Llama 3.1: the whole reply is one JSON call; a cut one is text.
printf '{"name": "get_weather", "parameters": {"city": "Oslo"}}' > "$dir/llama.txt"
"$recur" template -m "$dir/llama" --parse-reply "$dir/llama.txt" --tools "$dir/tools.json" > "$dir/out"
expect "$dir/out" '{"role":"assistant","content":null,"tool_calls":[{"id":"call_0_0","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Oslo\"}"}}]}'
printf '{"name": "get_weather", "parameters": {"city": "Os' > "$dir/llama.txt"
"$recur" template -m "$dir/llama" --parse-reply "$dir/llama.txt" --tools "$dir/tools.json" > "$dir/out"
expect "$dir/out" '{"role":"assistant","content":"{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Os"}'

refused() {
  local pattern="$1"; shift
  local rc=0
  "$@" > "$dir/out" 2> "$dir/err" || rc=$?
  [[ $rc != 0 ]] || fail "'$*' succeeded"
  grep -q -- "$pattern" "$dir/err" || fail "for '$*' expected '$pattern', got: $(cat "$dir/err")"
}
printf '{"name": "x"}' > "$dir/bad_tools.json"
refused "tools is an object, not an array" "$recur" template -m "$qwen" --parse-reply "$dir/reply.txt" --tools "$dir/bad_tools.json"
refused "only one of --parse-reply, --messages and --tools" "$recur" template -m "$qwen" --parse-reply - --tools -
ok
echo "cli_parse_reply_test: $checks checks passed"
