#!/usr/bin/env bash
# recur tokenize, and text through generate and score with a tokenizer.json: what the tool
# prints agrees with the library's own decode of the same ids, and bad input is refused clearly.
#   tests/cli_tokenize_test.sh RECUR MODEL_DIR LLAMA2_TOKENIZER_JSON
set -euo pipefail
recur="$1"
model="$2"
llama2="$3"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
refused() {
  local code="$1" pattern="$2"; shift 2
  local rc=0
  "$@" > "$dir/out" 2> "$dir/err" || rc=$?
  [[ $rc == "$code" ]] || fail "'$*' exited $rc, expected $code: $(cat "$dir/err")"
  grep -q -- "$pattern" "$dir/err" || fail "for '$*' expected '$pattern', got: $(cat "$dir/err")"
}
checks=0
ok() { checks=$((checks + 1)); }

# Encode and decode back, from an option, a file and standard input.
text=$'And God said, Let there be light: and there was light.\n\tCaf\xc3\xa9 \xf0\x9f\x99\x82 12345'
printf '%s' "$text" > "$dir/text.txt"
"$recur" tokenize -m "$model" -p "$text" > "$dir/ids"
[[ $(wc -l < "$dir/ids") -gt 5 ]] || fail "too few ids: $(cat "$dir/ids")"
"$recur" tokenize -m "$model" -f "$dir/text.txt" | cmp -s - "$dir/ids" || fail "-f and -p differ"
"$recur" tokenize -m "$model" -f - < "$dir/text.txt" | cmp -s - "$dir/ids" || fail "stdin and -p differ"
"$recur" tokenize -m "$model/tokenizer.json" -p "$text" | cmp -s - "$dir/ids" || fail "the file and its directory differ"
[[ "$("$recur" tokenize -m "$model" --decode -f "$dir/ids")" == "$text" ]] || fail "decode is not the text"
[[ "$("$recur" tokenize -m "$model" -p "$text" --count)" == "$(wc -l < "$dir/ids")" ]] || fail "--count"
"$recur" tokenize -m "$model" -p "And God" --tokens | grep -q $'\t' || fail "--tokens shows no token strings"
ok

# The post-processor's BOS, and --no-special.
[[ "$("$recur" tokenize -m "$llama2" -p "Hello" | head -1)" == 1 ]] || fail "llama2: no BOS by default"
[[ "$("$recur" tokenize -m "$llama2" -p "Hello" --no-special | head -1)" != 1 ]] || fail "llama2: BOS with --no-special"
printf '1\n22557\n' > "$dir/bos_ids"
[[ "$("$recur" tokenize -m "$llama2" --decode -f "$dir/bos_ids")" == "<s> Hello" ]] || fail "llama2 decode keeps <s>"
[[ "$("$recur" tokenize -m "$llama2" --decode --no-special -f "$dir/bos_ids")" == "Hello" ]] || fail "llama2 decode --no-special"
# Byte fallback both ways: hostile text comes back whole, and byte tokens that are not UTF-8
# decode to one U+FFFD each (<0xE2> <0x82> <0xAC> are ids 229 133 175).
hostile=$'  \t two leading spaces, a tab\n\xe5\xa4\xaa\xe5\x88\x9d \xf0\x9f\x91\xa8\xe2\x80\x8d\xf0\x9f\x91\xa9 e\xcc\x81 \xea\xb0\x80\n\nend'
"$recur" tokenize -m "$llama2" -p "$hostile" > "$dir/hostile_ids"
grep -qx 243 "$dir/hostile_ids" || fail "llama2: the emoji did not fall back to bytes (<0xF0> is 243)"
[[ "$("$recur" tokenize -m "$llama2" --decode --no-special -f "$dir/hostile_ids")" == "$hostile" ]] || fail "llama2: hostile text does not come back"
printf '229\n133\n175\n' > "$dir/euro"
[[ "$("$recur" tokenize -m "$llama2" --decode -f "$dir/euro")" == $'\xe2\x82\xac' ]] || fail "llama2: <0xE2><0x82><0xAC> is not the euro sign"
printf '229\n133\n' > "$dir/cut"
[[ "$("$recur" tokenize -m "$llama2" --decode -f "$dir/cut")" == $'\xef\xbf\xbd\xef\xbf\xbd' ]] || fail "llama2: a cut character is not two U+FFFD"
ok

# Refusals: each names the problem and exits 2 (bad input) or 1 (a bad file).
printf 'abc\xff' > "$dir/bad.txt"
refused 2 "not UTF-8 at byte 3" "$recur" tokenize -m "$model" -f "$dir/bad.txt"
refused 2 "give the tokenizer" "$recur" tokenize -p x
refused 2 "give the text" "$recur" tokenize -m "$model"
printf '5\n99999999\n' > "$dir/bad_ids"
refused 2 "line 2: '99999999' is not a token id (0 to" "$recur" tokenize -m "$model" --decode -f "$dir/bad_ids"
printf '{"model": {"type": "WordPiece", "vocab": {}}}' > "$dir/wp.json"
refused 1 "the model 'WordPiece' is not supported" "$recur" tokenize -m "$dir/wp.json" -p x
refused 1 "cannot read the file" "$recur" tokenize -m "$dir/nothing" -p x
refused 2 "not UTF-8" "$recur" score -m "$model" -f "$dir/bad.txt"
ok

# generate streams text as it decodes it: the text it prints is the prompt followed by the
# library-equivalent decode of the ids it generates, token by token or all at once.
gen=(generate -m "$model" -p "And God said" -n 40 --seed 5 --temperature 1.2 --ignore-eos)
"$recur" "${gen[@]}" --ids 2> /dev/null > "$dir/gen_ids"
"$recur" "${gen[@]}" 2> /dev/null > "$dir/gen_text"
{ printf 'And God said'; "$recur" tokenize -m "$model" --decode -f "$dir/gen_ids"; echo; } > "$dir/expected"
cmp -s "$dir/gen_text" "$dir/expected" || fail "streamed text differs from the decode of its ids: $(diff "$dir/gen_text" "$dir/expected" | head -5)"
ok

# The same with Llama-2's decoder (which strips the first token's leading space, and decodes
# byte tokens in runs) on a random-weight model of its vocabulary, whose random ids include
# byte tokens that break characters apart: the streamed text is the prompt followed by what the
# full decode adds after the prompt's own text.
"$recur" make-model "$dir/llama" --vocab 32000 --hidden 32 --layers 1 --heads 2 > /dev/null
cp "$llama2" "$dir/llama/tokenizer.json"
gen=(generate -m "$dir/llama" -p "Hello world" -n 60 --seed 3 --temperature 1 --top-k 0 --ignore-eos)
"$recur" "${gen[@]}" --ids 2> /dev/null > "$dir/gen_ids"
"$recur" "${gen[@]}" --raw 2> /dev/null > "$dir/gen_text"
"$recur" tokenize -m "$llama2" -p "Hello world" > "$dir/prompt_ids"
cat "$dir/prompt_ids" "$dir/gen_ids" > "$dir/all_ids"
"$recur" tokenize -m "$llama2" --decode -f "$dir/prompt_ids" > "$dir/prompt_text"
"$recur" tokenize -m "$llama2" --decode -f "$dir/all_ids" > "$dir/all_text"
n=$(wc -c < "$dir/prompt_text")
cmp -s <(head -c "$n" "$dir/all_text") "$dir/prompt_text" || fail "llama2: the full decode does not start with the prompt's"
{ printf 'Hello world'; tail -c +"$((n + 1))" "$dir/all_text"; echo; } > "$dir/expected"
cmp -s "$dir/gen_text" "$dir/expected" || fail "llama2: streamed text differs: $(cmp "$dir/gen_text" "$dir/expected")"
ok

# score on text equals score on the ids of that text, and reports bits per byte.
"$recur" tokenize -m "$model" -f "$dir/text.txt" > "$dir/ids"
a=$("$recur" score -m "$model" -f "$dir/text.txt" --json | sed 's/, "bytes".*//')
b=$("$recur" score -m "$model" --token-ids "$dir/ids" --json | sed 's/, "bytes".*//')
[[ "$a" == "$b" ]] || fail "score of text $a, of its ids $b"
"$recur" score -m "$model" -f "$dir/text.txt" --json | grep -q "\"bits_per_byte\": [0-9]" || fail "no bits per byte"
ok

echo "cli tokenize: $checks passed, 0 failed"
