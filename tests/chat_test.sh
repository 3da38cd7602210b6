#!/usr/bin/env bash
# recur chat: the built-in model with a chat template of our own (tokenizer_config.json beside a
# copy of it), through a pipe and in a terminal (tmux):
# - the second turn prefills only its new tokens (the first turn's kept), and its reply is the
#   same whether the conversation ran in one process or was saved after the first turn and
#   loaded in another;
# - /stats, /reset, /save, /load and an unknown command; a model without a chat template is
#   refused by name;
# - under tmux: a typed message streams its reply, Ctrl-C stops a long reply and the
#   conversation goes on, /quit ends.
#
#   tests/chat_test.sh RECUR SOURCE_DIR
set -euo pipefail
recur="$1" src="$2"
tmp=$(mktemp -d)
session="recur-chat-test-$$"
trap 'tmux kill-session -t "$session" 2> /dev/null || true; rm -rf "$tmp"' EXIT
fail() { echo "FAILED: $*" >&2; exit 1; }
model="$tmp/kjv"
cp -r "$src/models/kjv" "$model"
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
# A model without a chat template is refused by name.
rm "$model/tokenizer_config.json"
if echo hi | chat > /dev/null; then fail "chatted without a chat template"; fi
grep -q "chat_template\|chat template" "$tmp/err" || fail "unclear: $(cat "$tmp/err")"
echo "chat_test: /reset, unknown commands and a missing template are handled"

# In a terminal: type, watch the reply stream, stop a long one with Ctrl-C, go on, quit.
cat > "$model/tokenizer_config.json" <<'JSON'
{"eos_token": "<|endoftext|>", "chat_template": "{% for m in messages %}{% if m.role == 'user' %}Question: {{ m.content }}\nAnswer:{% else %}{{ m.content }}{{ eos_token }}\n\n{% endif %}{% endfor %}"}
JSON
tmux new-session -d -s "$session" -x 200 -y 50 \
  "'$recur' chat -m '$model' --greedy -n 20000 --threads 1; echo CHAT-ENDED; sleep 30"
screen() { tmux capture-pane -p -t "$session"; }
wait_for() {  # pattern, seconds
  for ((i = 0; i < $2 * 10; i++)); do screen | grep -q -- "$1" && return 0; sleep 0.1; done
  screen >&2
  fail "the terminal never showed '$1'"
}
wait_for "^>" 30
tmux send-keys -t "$session" "Who begat Enos?" Enter
sleep 1
tmux send-keys -t "$session" C-c
wait_for "\[stopped\]" 30
tmux send-keys -t "$session" "/stats" Enter
wait_for "^state: [1-9][0-9]* tokens run" 30
tmux send-keys -t "$session" "/quit" Enter
wait_for "CHAT-ENDED" 30
echo "chat_test: in tmux a typed message streams, Ctrl-C stops the reply and the chat goes on"

# An RWKV-7 model with the world vocabulary chats in RWKV's built-in world format.
"$recur" make-model "$tmp/rwkv" --arch rwkv7 --vocab 3002 --hidden 64 --heads 1 --layers 2 > /dev/null
cp "$src/tests/world/rwkv_vocab_v20230424.txt" "$tmp/rwkv/"
printf 'Hello there\nAnd again\n/stats\n' |
  "$recur" chat -m "$tmp/rwkv" --greedy -n 12 --threads 1 > "$tmp/world" 2> "$tmp/err" ||
  fail "recur chat on an RWKV-7 world model: $(cat "$tmp/err")"
grep -q "chat format: RWKV's world format" "$tmp/err" || fail "not the world format: $(cat "$tmp/err")"
grep -q "^state: [1-9][0-9]* tokens run" "$tmp/world" || fail "no /stats after two world turns: $(cat "$tmp/world")"
echo "chat_test: an RWKV-7 world model chats in the world format"
