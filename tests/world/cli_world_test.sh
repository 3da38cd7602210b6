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
