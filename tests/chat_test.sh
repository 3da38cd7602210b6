#!/usr/bin/env bash
# recur chat: the built-in model with no arguments (its own chat template), then with a chat
# template of this test's (tokenizer_config.json beside a copy of it), through a pipe and in a
# terminal (tmux):
# - the second turn prefills only its new tokens (the first turn's kept), and its reply is the
#   same whether the conversation ran in one process or was saved after the first turn and
#   loaded in another;
# - /stats, /reset, /save, /load and an unknown command; a model without a chat template is
#   refused in one line that says what to do (--chat-template FILE works, or generate);
# - under tmux: a typed message streams its reply, Ctrl-C stops a long reply and the
#   conversation goes on, /quit ends.
# - Mamba-2, Granite 4.0-H and LFM2 (Granite's and LFM2.5's published templates) chat, and
#   /stats says whether their state grows.
#
#   tests/chat_test.sh RECUR SOURCE_DIR
set -euo pipefail
recur="$1" src="$2"
tmp=$(mktemp -d)
session="recur-chat-test-$$"
trap 'tmux kill-session -t "$session" 2> /dev/null || true; rm -rf "$tmp"' EXIT
fail() { echo "FAILED: $*" >&2; exit 1; }

# The built-in model chats with no arguments: its template lays the turns out as verses, and a
# reply ends at the end of its line. In a terminal (tmux) as a newcomer types it (with a seed, so
# that the reply is the same everywhere: this one ends at its line's end, before 512 tokens).
tmux new-session -d -s "$session" -x 200 -y 50 "RECUR_MODEL= '$recur' chat --seed 1 --threads 1; echo CHAT-ENDED; sleep 30"
screen() { tmux capture-pane -p -t "$session"; }
wait_for() {  # pattern, seconds
  for ((i = 0; i < $2 * 10; i++)); do screen | grep -q -- "$1" && return 0; sleep 0.1; done
  screen >&2
  fail "the terminal never showed '$1'"
}
wait_for "^>" 30
screen | grep -q "chat format: .*chat_template.jinja; a reply also ends at \"\\\\n\"" || { screen >&2; fail "not the built-in model's own template"; }
tmux send-keys -t "$session" "Who begat Enos?" Enter
wait_for "^> Who begat Enos?" 10
wait_for "^> *$" 60  # the reply is over, and the prompt is back
reply=$(screen | grep -A1 "^> Who begat Enos?" | sed -n 2p)
[[ "$reply" =~ [A-Za-z] ]] || { screen >&2; fail "no reply from the built-in model: '$reply'"; }
tmux send-keys -t "$session" "/stats" Enter
wait_for "^last turn: .* generated" 10
n=$(screen | sed -n 's/^last turn: .*, \([0-9]*\) generated.*/\1/p' | tail -1)
(( n > 0 && n < 512 )) || { screen >&2; fail "the reply did not end at its line's end ($n tokens)"; }
tmux send-keys -t "$session" "/quit" Enter
wait_for "CHAT-ENDED" 30
tmux kill-session -t "$session"
echo "chat_test: recur chat with no arguments chats with the built-in model, a reply of one line ($n tokens): '$reply'"

model="$tmp/kjv"
cp -r "$src/models/kjv" "$model"
rm "$model/chat_template.jinja" "$model/generation_config.json"  # the template below instead
cat > "$model/tokenizer_config.json" <<'JSON'
{"eos_token": "<|endoftext|>", "chat_template": "{% for m in messages %}{% if m.role == 'system' %}{{ m.content }}\n\n{% elif m.role == 'user' %}Question: {{ m.content }}\nAnswer:{% else %}{{ m.content }}{{ eos_token }}\n\n{% endif %}{% endfor %}"}
JSON
chat() { "$recur" chat -m "$model" --greedy -n 24 --threads 1 "$@" 2> "$tmp/err"; }

# One process, two turns.
printf 'Who begat Enos?\nAnd what did the LORD say?\n/stats\n' | chat > "$tmp/one"
reply2=$(sed -n 2p "$tmp/one")
[[ -n "$reply2" ]] || fail "no second reply: $(cat "$tmp/one")"
grep -q "tokens prefilled ([1-9][0-9]* kept from earlier turns)" "$tmp/one" ||
  fail "the second turn did not keep the first turn's tokens: $(cat "$tmp/one")"
grep -q "started again 0 times" "$tmp/one" || fail "the state started again: $(cat "$tmp/one")"
# Saved after the first turn, loaded in another process: the same second reply.
printf 'Who begat Enos?\n/save %s\n' "$tmp/s" | chat > /dev/null
[[ -f "$tmp/s" && -f "$tmp/s.messages.json" ]] || fail "/save wrote no state or messages"
printf '/load %s\nAnd what did the LORD say?\n' "$tmp/s" | chat > "$tmp/two"
grep -q "^loaded [0-9]* tokens and 2 messages" "$tmp/two" || fail "/load: $(cat "$tmp/two")"
[[ "$(sed -n 2p "$tmp/two")" == "$reply2" ]] || fail "the reply after /load differs: '$(sed -n 2p "$tmp/two")' vs '$reply2'"
echo "chat_test: the second turn keeps the first's tokens, and /save and /load continue it exactly"

# /reset, an unknown command, a bad /load: the conversation goes on.
printf 'Who begat Enos?\n/reset\n/stats\n/nonsense\n/load %s\n' "$tmp/none" | chat > "$tmp/cmds"
grep -q "conversation reset" "$tmp/cmds" || fail "/reset: $(cat "$tmp/cmds")"
grep -q "^state: 0 tokens run" "$tmp/cmds" || fail "/reset left tokens: $(cat "$tmp/cmds")"
grep -q "unknown command /nonsense" "$tmp/cmds" || fail "unknown command: $(cat "$tmp/cmds")"
grep -q "error: /load: .*none.messages.json cannot be read" "$tmp/cmds" || fail "bad /load: $(cat "$tmp/cmds")"
# A model without a chat template stops at once, in one line that says how to go on; a template
# given with --chat-template is used.
cp "$model/tokenizer_config.json" "$tmp/with-template.json"
rm "$model/tokenizer_config.json"
rc=0
echo hi | chat > /dev/null || rc=$?
[[ $rc != 0 ]] || fail "chatted without a chat template"
grep -q "^recur chat: \[ChatTemplate::load\] .*: the model has no chat template (.*): give one with --chat-template FILE, or use recur generate for plain text$" "$tmp/err" ||
  fail "unclear: $(cat "$tmp/err")"
[[ $(grep -c "no chat template" "$tmp/err") == 1 ]] || fail "not one line: $(cat "$tmp/err")"
printf '{%% for m in messages %%}Question: {{ m.content }}\nAnswer:{%% endfor %%}' > "$tmp/t.jinja"
echo "Who begat Enos?" | chat --chat-template "$tmp/t.jinja" > "$tmp/given" || fail "--chat-template: $(cat "$tmp/err")"
grep -q "chat format: $tmp/t.jinja" "$tmp/err" && [[ -n "$(head -1 "$tmp/given")" ]] || fail "--chat-template: $(cat "$tmp/err" "$tmp/given")"
# --think and --no-think reach the template as enable_thinking (this one refuses a thought).
printf '{%% if enable_thinking %%}{{ raise_exception("asked to think") }}{%% endif %%}{%% for m in messages %%}Question: {{ m.content }}\nAnswer:{%% endfor %%}' > "$tmp/think.jinja"
echo "Who begat Enos?" | chat --chat-template "$tmp/think.jinja" --think > "$tmp/given" || true
grep -q "asked to think" "$tmp/given" || fail "--think did not reach the template: $(cat "$tmp/given")"
echo "Who begat Enos?" | chat --chat-template "$tmp/think.jinja" --no-think > "$tmp/given" || fail "--no-think: $(cat "$tmp/err")"
! grep -q "asked to think" "$tmp/given" && [[ -n "$(head -1 "$tmp/given")" ]] || fail "--no-think: $(cat "$tmp/given")"
rc=0
echo hi | chat --chat-template "$tmp/think.jinja" --think --no-think > /dev/null || rc=$?
[[ $rc != 0 ]] || fail "--think with --no-think was taken"
cp "$tmp/with-template.json" "$model/tokenizer_config.json"
echo "chat_test: /reset, unknown commands and a missing template are handled, --chat-template gives one, --think and --no-think reach it"

# In a terminal: type, watch the reply stream, stop a long one with Ctrl-C, go on, quit.
cat > "$model/tokenizer_config.json" <<'JSON'
{"eos_token": "<|endoftext|>", "chat_template": "{% for m in messages %}{% if m.role == 'user' %}Question: {{ m.content }}\nAnswer:{% else %}{{ m.content }}{{ eos_token }}\n\n{% endif %}{% endfor %}"}
JSON
tmux new-session -d -s "$session" -x 200 -y 50 \
  "'$recur' chat -m '$model' --greedy -n 20000 --threads 1; echo CHAT-ENDED; sleep 30"
wait_for "^>" 30
tmux send-keys -t "$session" "Who begat Enos?" Enter
sleep 1
tmux send-keys -t "$session" C-c
wait_for "\[stopped\]" 30
tmux send-keys -t "$session" "/stats" Enter
wait_for "^state: [1-9][0-9]* tokens run" 30
tmux send-keys -t "$session" "/quit" Enter
wait_for "CHAT-ENDED" 30
tmux kill-session -t "$session"
echo "chat_test: in tmux a typed message streams, Ctrl-C stops the reply and the chat goes on"

# A reply inside a thought (the generation prompt opens one; King James text never closes it) is
# shown dimmed on a terminal: the screen's escapes (capture-pane -e) put it after SGR 2.
printf '%s' '{% for m in messages %}{% if m.role == '"'"'user'"'"' %}Question: {{ m.content }}
{% else %}{{ m.content }}<|endoftext|>
{% endif %}{% endfor %}{% if add_generation_prompt %}Answer: <think>
{% endif %}' > "$tmp/thinking.jinja"
tmux new-session -d -s "$session" -x 200 -y 50 \
  "'$recur' chat -m '$model' --chat-template '$tmp/thinking.jinja' --greedy -n 12 --threads 1; echo CHAT-ENDED; sleep 30"
wait_for "^>" 30
tmux send-keys -t "$session" "Who begat Enos?" Enter
wait_for "^> Who begat Enos?" 10
wait_for "^> *$" 60
thought=$(tmux capture-pane -e -p -t "$session" | grep -A1 "^> Who begat Enos?" | sed -n 2p)
[[ "$thought" == *$'\e[2m'*[A-Za-z]* ]] || { screen >&2; fail "the thought is not shown dimmed: $(printf '%q' "$thought")"; }
tmux send-keys -t "$session" "/quit" Enter
wait_for "CHAT-ENDED" 30
tmux kill-session -t "$session"
echo "chat_test: in tmux a reply's thought is shown dimmed"

# --tool-choice required or a tool's name: each reply is one call, held to the tool's schema while
# sampling, and shown as a JSON line. The built-in model writes King James text; Qwen3.5's own
# template lays out the tools and the call's XML.
cat > "$tmp/tools.json" <<'J'
[{"type": "function", "function": {"name": "lookup", "description": "Look a verse up", "parameters": {"type": "object",
  "properties": {"book": {"type": "string"}, "chapter": {"type": "integer"}}, "required": ["book", "chapter"]}}},
 {"type": "function", "function": {"name": "count", "description": "Count words", "parameters": {"type": "object",
  "properties": {"text": {"type": "string"}}, "required": ["text"]}}}]
J
qwen35="$src/tests/fixtures/published/qwen3.5-4b/chat_template.jinja"
for choice in required lookup; do
  echo "Where is the flood?" | "$recur" chat -m "$model" --chat-template "$qwen35" --no-think --tools "$tmp/tools.json" \
    --tool-choice "$choice" -n 200 --seed 3 --threads 1 > "$tmp/call" 2> "$tmp/err" || fail "--tool-choice $choice: $(cat "$tmp/err")"
  /usr/bin/python3 - "$tmp/call" "$choice" <<'PY' || fail "--tool-choice $choice: not one call to an allowed tool: $(cat "$tmp/call")"
import json, sys
lines = [l for l in open(sys.argv[1], encoding="utf-8").read().split("\n") if l.startswith('{"tool_call"')]
assert len(lines) == 1, lines
call = json.loads(lines[0])["tool_call"]
args = call["arguments"]
if sys.argv[2] != "required":
    assert call["name"] == sys.argv[2], call
if call["name"] == "lookup":
    assert isinstance(args["book"], str) and isinstance(args["chapter"], int) and not isinstance(args["chapter"], bool), args
else:
    assert call["name"] == "count" and isinstance(args["text"], str), call
PY
done
rc=0
echo hi | "$recur" chat -m "$model" --chat-template "$qwen35" --tools "$tmp/tools.json" --tool-choice nosuch > /dev/null 2> "$tmp/err" || rc=$?
[[ $rc != 0 ]] && grep -q "no tool is named 'nosuch'" "$tmp/err" || fail "--tool-choice of an unknown tool: $(cat "$tmp/err")"
rc=0
echo hi | "$recur" chat -m "$model" --tool-choice required > /dev/null 2> "$tmp/err" || rc=$?
[[ $rc != 0 ]] && grep -q "needs --tools" "$tmp/err" || fail "--tool-choice without --tools: $(cat "$tmp/err")"
echo "chat_test: --tool-choice required and a named tool give one call held to its schema, shown as JSON"

# An RWKV-7 model with the world vocabulary chats in RWKV's built-in world format.
"$recur" make-model "$tmp/rwkv" --arch rwkv7 --vocab 3002 --hidden 64 --heads 1 --layers 2 > /dev/null
cp "$src/tests/world/rwkv_vocab_v20230424.txt" "$tmp/rwkv/"
printf 'Hello there\nAnd again\n/stats\n' |
  "$recur" chat -m "$tmp/rwkv" --greedy -n 12 --threads 1 > "$tmp/world" 2> "$tmp/err" ||
  fail "recur chat on an RWKV-7 world model: $(cat "$tmp/err")"
grep -q "chat format: RWKV's world format" "$tmp/err" || fail "not the world format: $(cat "$tmp/err")"
grep -q "^state: [1-9][0-9]* tokens run" "$tmp/world" || fail "no /stats after two world turns: $(cat "$tmp/world")"
echo "chat_test: an RWKV-7 world model chats in the world format"

# The Mamba-2 and short-convolution families (issue 44): two turns each, Granite 4.0-H and LFM2
# through Granite 4.0-H-Micro's and LFM2.5-1.2B-Instruct's published templates
# (tests/fixtures/published), Mamba-2 and Falcon-H1 (no published template of either was found) through ChatML; /stats says how big the state is and
# whether it grows: a hybrid's attention layers' KV cache does, plain Mamba-2's state does not.
printf '%s' '{% for m in messages %}<|im_start|>{{ m.role }}
{{ m.content }}<|im_end|>
{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant
{% endif %}' > "$tmp/chatml.jinja"
for family in "mamba2|--arch mamba2 --layers 2|$tmp/chatml.jinja|at any length" \
              "granite|--arch granitemoehybrid --heads 4 --attn-kv-heads 2 --layer-types MAMA|$src/tests/fixtures/published/granite-4.0-h-micro/chat_template.jinja|growing with the conversation" \
              "lfm2|--arch lfm2 --layers 4 --heads 4 --attn-kv-heads 2|$src/tests/fixtures/published/lfm2.5-1.2b-instruct/chat_template.jinja|growing with the conversation" \
              "falcon_h1|--arch falcon_h1 --layers 2 --heads 4 --attn-kv-heads 2|$tmp/chatml.jinja|growing with the conversation"; do
  IFS='|' read -r name args template grows <<< "$family"
  # shellcheck disable=SC2086
  "$recur" make-model "$tmp/$name" --vocab 4096 --hidden 64 --seed 3 $args > /dev/null
  cp "$src/models/kjv/tokenizer.json" "$tmp/$name/"
  printf 'Who begat Enos?\nAnd what did the LORD say?\n/stats\n' |
    "$recur" chat -m "$tmp/$name" --chat-template "$template" --greedy -n 8 --threads 1 > "$tmp/$name.out" 2> "$tmp/err" ||
    fail "recur chat with $name: $(cat "$tmp/err")"
  [[ -n "$(sed -n 2p "$tmp/$name.out")" ]] || fail "$name: no second reply: $(cat "$tmp/$name.out")"
  grep -q "^state: [1-9][0-9]* tokens run, [1-9][0-9]* bytes (.*),\? $grows" "$tmp/$name.out" ||
    fail "$name: /stats does not say '$grows': $(cat "$tmp/$name.out")"
done
echo "chat_test: Mamba-2, Granite 4.0-H, LFM2 and Falcon-H1 (Granite's and LFM2.5's templates) chat, and /stats says whether their state grows"
