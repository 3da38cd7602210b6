#!/usr/bin/env bash
# recur make-model, generate and score end to end: models in every layout the tests write, the
# same text and the same scores whatever --chunk and --threads, a saved state that continues
# exactly, and clear errors.
set -euo pipefail
recur="$1"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

"$recur" make-model "$dir/m" --feature-map hedgehog --normalized --kv-heads 2 --dtype bf16 --shards 3 > /dev/null
"$recur" make-model "$dir/p" --arch transformers_are_rnns --hidden-act gelu > /dev/null
[[ -f "$dir/m/model.safetensors.index.json" && -f "$dir/m/config.json" ]] || fail "no index or config"

for m in "$dir/m" "$dir/p"; do
  # Greedy text: the same bytes at every chunk size and thread count.
  ref=""
  for opts in "--chunk 1 --threads 1" "--chunk 7 --threads 2" "--chunk 64" "--chunk 1000 --threads 1"; do
    # shellcheck disable=SC2086
    out=$("$recur" generate -m "$m" -p "A prompt long enough to span chunks of seven." -n 40 --greedy --raw $opts 2> "$dir/err" | od -An -tx1)
    grep -q "decode: " "$dir/err" || fail "no decode figures on stderr"
    grep -q "state: " "$dir/err" || fail "no state size on stderr"
    [[ -z "$ref" ]] && ref="$out"
    [[ "$out" == "$ref" ]] || fail "greedy text differs with $opts for $m"
  done
  # Scores: the same 17 digits whatever the chunking.
  a=$("$recur" score -m "$m" -f "$0" --json --chunk 1 --threads 1)
  b=$("$recur" score -m "$m" -f "$0" --json --chunk 100 --threads 2)
  [[ "$a" == "$b" ]] || fail "scores differ: $a vs $b"
  [[ "$a" =~ ^\{\"tokens\":\ [0-9]+,\ \"predicted\":\ [0-9]+,\ \"mean_nll\":\ [0-9.e+-]+,\ \"ppl\":\ [0-9.e+-]+,\ \"bytes\":\ [0-9]+,\ \"bits_per_byte\":\ [0-9.e+-]+\}$ ]] || fail "JSON shape: $a"
done

# --token-ids FILE gives the same result as the bytes of the text, and so does -f - (stdin).
od -An -tu1 -v "$0" | tr -s ' ' '\n' | sed '/^$/d' > "$dir/ids.txt"
# (Ids carry no byte count: the fields from "bytes" on are compared only between texts.)
nobytes() { sed 's/, "bytes".*//'; }
[[ "$("$recur" score -m "$dir/m" --token-ids "$dir/ids.txt" --json | nobytes)" == "$("$recur" score -m "$dir/m" -f "$0" --json | nobytes)" ]] || fail "--token-ids and -f disagree"
[[ "$("$recur" score -m "$dir/m" -f - --json < "$0")" == "$("$recur" score -m "$dir/m" -f "$0" --json)" ]] || fail "-f - and -f FILE disagree"

# Token ids in and out (for models tokenized elsewhere): the same tokens as the byte path.
printf 'Branch here' | od -An -tu1 -v | tr -s ' ' '\n' | sed '/^$/d' > "$dir/prompt_ids.txt"
"$recur" generate -m "$dir/m" --prompt-ids "$dir/prompt_ids.txt" -n 12 --greedy --ids > "$dir/gen_ids.txt" 2> /dev/null
(( $(wc -l < "$dir/gen_ids.txt") == 12 )) || fail "--ids did not print 12 ids"
text_ids=$("$recur" generate -m "$dir/m" -p "Branch here" -n 12 --greedy --raw 2> /dev/null | head -c -1 | tail -c +12 | od -An -tu1 -v | tr -s ' ' '\n' | sed '/^$/d')
[[ "$text_ids" == "$(cat "$dir/gen_ids.txt")" ]] || fail "--prompt-ids/--ids differ from the byte path"
# A model that ships a tokenizer recur does not read (tokenizer.model) gets a warning, not
# silence; a broken tokenizer.json is an error naming it, not a silent fallback to bytes.
touch "$dir/m/tokenizer.model"
"$recur" generate -m "$dir/m" -n 1 > /dev/null 2> "$dir/err"
grep -q "warning: the model ships tokenizer.model but no tokenizer.json" "$dir/err" || fail "no tokenizer warning"
rm "$dir/m/tokenizer.model"
echo '{"model": {"type": "BPE"' > "$dir/m/tokenizer.json"
if "$recur" generate -m "$dir/m" -n 1 > /dev/null 2> "$dir/err"; then fail "a broken tokenizer.json was accepted"; fi
grep -q "tokenizer.json" "$dir/err" || fail "the error does not name tokenizer.json: $(cat "$dir/err")"
rm "$dir/m/tokenizer.json"

# A state saved after 10 tokens continues into the same bytes as one run of 20.
"$recur" generate -m "$dir/m" -p "Branch here" -n 20 --greedy --raw > "$dir/full" 2> /dev/null
"$recur" generate -m "$dir/m" -p "Branch here" -n 10 --greedy --raw --save-state "$dir/s" > "$dir/part1" 2> /dev/null
"$recur" generate -m "$dir/m" -p "" -n 10 --greedy --raw --load-state "$dir/s" > "$dir/part2" 2> /dev/null
{ head -c -1 "$dir/part1"; cat "$dir/part2"; } | cmp -s - "$dir/full" || fail "resumed text differs"
# ... and is refused by another model.
if "$recur" generate -m "$dir/p" -p "" -n 1 --load-state "$dir/s" 2> "$dir/err" > /dev/null; then fail "loaded a state into another model"; fi
grep -q "another model\|bytes" "$dir/err" || fail "unclear state error: $(cat "$dir/err")"

# A model of fewer than 256 ids and no tokenizer reads and writes ids only: a continuation with
# --load-state and --ids reads no text, so it runs; asking it for text is refused by name.
"$recur" make-model "$dir/v100" --vocab 100 --hidden 32 --heads 2 > /dev/null
printf '5\n17\n42\n' > "$dir/ids100.txt"
"$recur" generate -m "$dir/v100" --prompt-ids "$dir/ids100.txt" -n 4 --greedy --ids --save-state "$dir/s100" > "$dir/a100" 2> /dev/null
"$recur" generate -m "$dir/v100" --load-state "$dir/s100" -n 4 --greedy --ids > "$dir/b100" 2> "$dir/err" ||
  fail "--load-state with --ids on a 100-id model without a tokenizer: $(cat "$dir/err")"
(( $(wc -l < "$dir/b100") == 4 )) || fail "the continuation did not print 4 ids"
"$recur" generate -m "$dir/v100" --prompt-ids "$dir/ids100.txt" -n 8 --greedy --ids > "$dir/c100" 2> /dev/null
cat "$dir/a100" "$dir/b100" | cmp -s - "$dir/c100" || fail "the 100-id model's continuation differs from one run"
if "$recur" generate -m "$dir/v100" --load-state "$dir/s100" -n 4 --greedy 2> "$dir/err" > /dev/null; then
  fail "a 100-id model without a tokenizer wrote text"; fi
grep -q "use --prompt-ids and --ids" "$dir/err" || fail "unclear: $(cat "$dir/err")"

# The built-in model runs with no arguments but a length, through its tokenizer; the
# random-weight model says its weights are random; RECUR_MODEL pointing nowhere is explained.
"$recur" generate -n 8 > /dev/null 2> "$dir/err" || fail "built-in generate failed"
grep -q "built-in (King James Bible)" "$dir/err" || fail "built-in model not named: $(cat "$dir/err")"
grep -q "tokenizer: BPE, 4096 ids" "$dir/err" || fail "built-in model without its tokenizer: $(cat "$dir/err")"
"$recur" generate --random-model -n 8 > /dev/null 2> "$dir/err" || fail "--random-model failed"
grep -q "random weights" "$dir/err" || fail "the random model does not say its weights are random"
if RECUR_MODEL="$dir/none" "$recur" generate -n 1 2> "$dir/err" > /dev/null; then fail "ran without its model"; fi
grep -q "the built-in model is not at" "$dir/err" || fail "unclear: $(cat "$dir/err")"

# Generation stops at the model's end-of-sequence id unless told not to.
first=$(head -1 "$dir/gen_ids.txt")
sed -i "s/^{/{\"eos_token_id\": $first,/" "$dir/m/config.json"
"$recur" generate -m "$dir/m" --prompt-ids "$dir/prompt_ids.txt" -n 12 --greedy --ids > "$dir/eos_ids.txt" 2> "$dir/err"
[[ ! -s "$dir/eos_ids.txt" ]] || fail "generated past the end-of-sequence id"
grep -q "stopped at the end-of-sequence id" "$dir/err" || fail "no end-of-sequence note"
"$recur" generate -m "$dir/m" --prompt-ids "$dir/prompt_ids.txt" -n 12 --greedy --ids --ignore-eos > "$dir/eos_ids.txt" 2> /dev/null
cmp -s "$dir/eos_ids.txt" "$dir/gen_ids.txt" || fail "--ignore-eos changed the tokens"

# Clear errors.
if "$recur" score -m "$dir/m" 2> "$dir/err"; then fail "score without input"; fi
grep -q "give the text to score" "$dir/err" || fail "unclear: $(cat "$dir/err")"
printf 'x' > "$dir/one.txt"
if "$recur" score -m "$dir/m" -f "$dir/one.txt" 2> "$dir/err"; then fail "scored one token"; fi
grep -q "at least 2" "$dir/err" || fail "unclear: $(cat "$dir/err")"
printf '1\n2\nthree\n' > "$dir/bad_ids.txt"
if "$recur" score -m "$dir/m" --token-ids "$dir/bad_ids.txt" 2> "$dir/err"; then fail "accepted a bad id"; fi
grep -q "line 3" "$dir/err" || fail "unclear: $(cat "$dir/err")"
if "$recur" generate -m "$dir/nowhere" 2> "$dir/err"; then fail "loaded a missing model"; fi
grep -q "nowhere" "$dir/err" || fail "unclear: $(cat "$dir/err")"
if "$recur" make-model "$dir/x" --feature-map taylor 2> "$dir/err"; then fail "made a taylor model"; fi
grep -q "feature_map is 'taylor'" "$dir/err" || fail "unclear: $(cat "$dir/err")"
# An option whose default differs between --arch values states each in --help ("(default 4 for
# qwen35, 2 for lfm2)"), and each is the one used: the model made without the option is the
# one made with its stated default.
"$recur" make-model --help | awk '/^  -/ { if (l) print l; l = $0; next } { l = l " " $0 } END { print l }' > "$dir/help"
per_arch=$(grep -E '\(default [^)]* for [a-z0-9_]+, ' "$dir/help" || true)
grep -q -- '--full-attention-interval' <<< "$per_arch" || fail "make-model --help gives one default for --full-attention-interval"
while read -r line; do
  opt=$(sed -E 's/^ *--([a-z0-9-]+).*/\1/' <<< "$line")
  IFS=',' read -ra pairs <<< "$(sed -E 's/.*\(default ([^)]*)\).*/\1/' <<< "$line")"
  for pair in "${pairs[@]}"; do
    read -r value _ arch <<< "$pair"
    "$recur" make-model --force --arch "$arch" --layers 4 "$dir/d0" > /dev/null
    "$recur" make-model --force --arch "$arch" --layers 4 "--$opt" "$value" "$dir/d1" > /dev/null
    cmp -s "$dir/d0/config.json" "$dir/d1/config.json" || fail "--$opt's default for --arch $arch is not $value"
  done
done <<< "$per_arch"

echo "recur make-model, generate, score: OK"
