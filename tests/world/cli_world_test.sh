#!/usr/bin/env bash
# recur tokenize with RWKV's world vocabulary: the tool's ids equal the reference trie tokenizer's
# (tests/world/oracle.py), from the file and from a directory, decode gives the text back, and a
# malformed vocabulary is refused with its line and column.
#   tests/world/cli_world_test.sh RECUR
set -euo pipefail
recur="$1"
here="$(cd "$(dirname "$0")" && pwd)"
vocab="$here/rwkv_vocab_v20230424.txt"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
checks=0

texts=(
  $'Hello world, the the the\n\n\n\tdef f(x):\n        return x'
  $'\xe4\xb8\xad\xe6\x96\x87 \xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e\xe3\x80\x82 \xf0\x9f\x91\xa8\xe2\x80\x8d\xf0\x9f\x91\xa9\xe2\x80\x8d\xf0\x9f\x91\xa7 e\xcc\x81 \xf0\x9f\x87\xba\xf0\x9f\x87\xb8'
  $'path\\to\\file \\n \\q \'quoted\' "double"          \r\n\r\n end'
)
for text in "${texts[@]}"; do
  printf '%s' "$text" > "$dir/text.txt"
  python3 "$here/oracle.py" "$vocab" --ids "$dir/text.txt" > "$dir/want"
  "$recur" tokenize -m "$vocab" -f "$dir/text.txt" > "$dir/got"
  cmp -s "$dir/got" "$dir/want" || fail "ids differ from the reference for '$text': $(diff "$dir/got" "$dir/want" | head -5)"
  "$recur" tokenize -m "$here" -f "$dir/text.txt" | cmp -s - "$dir/want" || fail "the directory and the file differ"
  "$recur" tokenize -m "$vocab" --no-special -f "$dir/text.txt" | cmp -s - "$dir/want" || fail "--no-special changes the ids"
  "$recur" tokenize -m "$vocab" --decode -f "$dir/want" > "$dir/back"
  cmp -s "$dir/back" "$dir/text.txt" || fail "decode does not give '$text' back"
  checks=$((checks + 1))
done
# Id 0 decodes to nothing; --tokens names it and shows the tokens' bytes.
printf '0\n' > "$dir/zero"
[[ -z "$("$recur" tokenize -m "$vocab" --decode -f "$dir/zero")" ]] || fail "id 0 decodes to text"
"$recur" tokenize -m "$vocab" -p "Hello" --tokens | grep -q $'\tHello' || fail "--tokens does not show 'Hello'"
checks=$((checks + 1))
# generate and score with a model directory holding the vocabulary (random weights over its
# 3,002 ids, so that the ids it samples include pieces of characters): the streamed text is the
# prompt followed by the decode of the generated ids, and score on the text equals score on its ids.
"$recur" make-model "$dir/model" --vocab 3002 --hidden 32 --layers 1 --heads 2 > /dev/null
cp "$vocab" "$dir/model/"
prompt=$'\xe4\xb8\xad\xe6\x96\x87 and the world'
gen=(generate -m "$dir/model" -p "$prompt" -n 80 --seed 3 --temperature 1 --top-k 0 --ignore-eos)
"$recur" "${gen[@]}" --ids 2> /dev/null > "$dir/gen_ids"
"$recur" "${gen[@]}" --raw 2> "$dir/gen_err" > "$dir/gen_text"
grep -q "tokenizer: RWKV world vocabulary, 3002 ids" "$dir/gen_err" || fail "generate does not name the vocabulary: $(cat "$dir/gen_err")"
{ printf '%s' "$prompt"; "$recur" tokenize -m "$dir/model" --decode -f "$dir/gen_ids"; echo; } > "$dir/expected"
cmp -s "$dir/gen_text" "$dir/expected" || fail "streamed text differs from the decode of its ids: $(cmp "$dir/gen_text" "$dir/expected")"
printf '%s' "$prompt" > "$dir/prompt.txt"
"$recur" tokenize -m "$dir/model" -f "$dir/prompt.txt" > "$dir/prompt_ids"
a=$("$recur" score -m "$dir/model" -f "$dir/prompt.txt" --json | sed 's/, "bytes".*//')
b=$("$recur" score -m "$dir/model" --token-ids "$dir/prompt_ids" --json | sed 's/, "bytes".*//')
[[ "$a" == "$b" ]] || fail "score of text $a, of its ids $b"
checks=$((checks + 1))
# A malformed vocabulary names its line and column, and the tool exits non-zero.
head -n 300 "$vocab" > "$dir/rwkv_vocab_v20230424.txt"
echo "301 'ab' 3" >> "$dir/rwkv_vocab_v20230424.txt"
rc=0
"$recur" tokenize -m "$dir" -p x > /dev/null 2> "$dir/err" || rc=$?
[[ $rc != 0 ]] || fail "a malformed vocabulary was accepted"
grep -q "rwkv_vocab_v20230424.txt:301:10: the line says 3 bytes, the literal holds 2" "$dir/err" ||
  fail "unexpected message: $(cat "$dir/err")"
checks=$((checks + 1))
echo "cli_world_test: $checks checks passed"
