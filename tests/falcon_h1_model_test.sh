#!/usr/bin/env bash
# Falcon-H1 (tests/falcon_h1: transformers' falcon_h1 layout without the gated norm, with it
# before and after the gate, every multiplier, biases, bf16) through the recur binary:
# - recur score on each committed random-weight checkpoint within 1e-6 relative of the float64
#   reference (tests/falcon_h1/reference.py) that wrote expected_nll.txt;
# - the same 17 digits at chunk sizes 1, 7, 64 and 300, on 1-3 threads, and under every
#   instruction set; the reference's 8 greedy ids after the prompt;
# - a state saved after a prompt continues as one run, under every instruction set; it grows by
#   the attention's keys and values alone;
# - recur quantize to q8 and q4 (A_log, dt_bias, D, the norms and the convolution stay as
#   stored) and convert keep the digits at every chunking;
# - make-model --arch falcon_h1 writes models that read back with the same digits.
#
#   tests/falcon_h1_model_test.sh RECUR SOURCE_DIR
set -euo pipefail
recur="$1" src="$2"
fx="$src/tests/falcon_h1"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAILED: $*" >&2; exit 1; }
ids="$src/tests/mamba2/prompt_ids.txt"
score() { "$recur" score --json "$@" 2> "$tmp/err" || { cat "$tmp/err" >&2; fail "recur score $*"; }; }
gen() { "$recur" generate --ids --greedy --ignore-eos "$@" 2> "$tmp/err" || { cat "$tmp/err" >&2; fail "recur generate $*"; }; }
nll() { sed 's/.*"mean_nll": \([^,]*\),.*/\1/' <<< "$1"; }
within() {  # within A B TOL: |A - B| / |B| < TOL
  awk -v a="$1" -v b="$2" -v t="$3" 'BEGIN { d = (a - b) / b; if (d < 0) d = -d; exit !(d < t) }'
}
isas=$("$recur" isa --available)
say() { echo "falcon_h1_model_test: $*"; }

[[ $(wc -l < "$fx/expected_nll.txt") == 3 ]] || fail "expected_nll.txt should list 3 fixtures"
declare -A got_nll
while read -r name want; do
  path="$fx/$name"
  got_json=$(score -m "$path" --token-ids "$ids")
  got=$(nll "$got_json")
  got_nll[$name]=$got
  within "$got" "$want" 1e-6 ||
    fail "$name: recur's mean NLL $got, the float64 reference's $want (more than 1e-6 apart)"
  say "$name: mean NLL $got, reference $want"
  for chunk in 1 7 64 300; do
    for threads in 1 2 3; do
      [[ "$(score -m "$path" --token-ids "$ids" --chunk "$chunk" --threads "$threads")" == "$got_json" ]] ||
        fail "$name: chunk $chunk, threads $threads gave other digits"
    done
  done
  for isa in $isas; do
    [[ "$(RECUR_ISA=$isa score -m "$path" --token-ids "$ids" --chunk 64)" == "$got_json" ]] ||
      fail "$name: RECUR_ISA=$isa gave other digits"
  done
  greedy=$(gen -m "$path" --prompt-ids "$ids" -n 8 | tr '\n' ' ')
  want_greedy=$(/usr/bin/python3 -c 'import json, sys; print(" ".join(map(str, json.load(open(sys.argv[1]))["fixtures"][sys.argv[2]]["greedy_ids"])) + " ")' "$fx/expected.json" "$name")
  [[ "$greedy" == "$want_greedy" ]] || fail "$name: greedy ids $greedy, the reference's $want_greedy"
  say "$name: the same digits at chunks 1, 7, 64, 300, threads 1-3 and under $(tr '\n' ' ' <<< "$isas"); the reference's greedy ids $greedy"
done < "$fx/expected_nll.txt"

# A saved state continues as one run, saved under one instruction set and continued under each.
head -n 40 "$ids" > "$tmp/p.txt"
first_isa=$(tail -n 1 <<< "$isas")
for name in falcon-h1 falcon-h1-norm; do
  m="$fx/$name"
  gen -m "$m" --prompt-ids "$tmp/p.txt" -n 12 > "$tmp/whole"
  gen -m "$m" --prompt-ids "$tmp/p.txt" -n 5 --save-state "$tmp/s" > "$tmp/a"
  gen -m "$m" --load-state "$tmp/s" -n 7 > "$tmp/b"
  [[ "$(cat "$tmp/a" "$tmp/b")" == "$(cat "$tmp/whole")" ]] ||
    fail "$name: saved and continued: $(cat "$tmp/a" "$tmp/b" | tr '\n' ' ') against one run $(tr '\n' ' ' < "$tmp/whole")"
  RECUR_ISA=$first_isa gen -m "$m" --prompt-ids "$tmp/p.txt" -n 5 --save-state "$tmp/s-isa" > /dev/null
  cmp -s "$tmp/s" "$tmp/s-isa" || fail "$name: the state saved under $first_isa differs from the default's"
  for isa in $isas; do
    RECUR_ISA=$isa gen -m "$m" --load-state "$tmp/s-isa" -n 7 > "$tmp/b-isa"
    cmp -s "$tmp/b" "$tmp/b-isa" || fail "$name: the state saved under $first_isa continues otherwise under $isa"
  done
  say "$name: a state saved after 5 ids continues as one run of 12, under every instruction set"
done
state_at() {  # state_at MODEL N: the state's bytes after N + 1 tokens
  awk -v n="$2" 'NR <= 300 { id[NR] = $1 } END { for (i = 0; i < n; ++i) print id[i % 300 + 1] }' "$ids" > "$tmp/long.txt"
  gen -m "$1" --prompt-ids "$tmp/long.txt" -n 1 --chunk 512 > /dev/null
  local line
  line=$(sed -n 's/^state: *\([0-9]*\) bytes.*after \([0-9]*\) tokens.*/\1 \2/p' "$tmp/err")
  [[ $(cut -d' ' -f2 <<< "$line") == $(($2 + 1)) ]] || fail "no state line after $2 tokens: $(cat "$tmp/err")"
  cut -d' ' -f1 <<< "$line"
}
# falcon-h1: 2 layers, each a key and a value of 2 kv heads of 8 floats a token.
s100=$(state_at "$fx/falcon-h1" 100)
s3k=$(state_at "$fx/falcon-h1" 3000)
[[ $((s3k - s100)) == $((2900 * 2 * 2 * 2 * 8 * 4)) ]] ||
  fail "falcon-h1: the state grew by $((s3k - s100)) bytes over 2,900 tokens, not 2,900 x 256"
say "falcon-h1's state grows from $s100 bytes by 256 a token, the attention's KV cache"

# quantize q8 / q4 and convert: the projections and the head quantized, the rest as stored.
dtypes() {
  /usr/bin/python3 -c 'import json, struct, sys; f = open(sys.argv[1], "rb"); n = struct.unpack("<Q", f.read(8))[0]
for k, v in sorted(json.loads(f.read(n)).items()):
    if k != "__metadata__": print(k, v["dtype"])' "$1/model.safetensors"
}
while read -r name _; do
  for type in q8 q4; do
    q="$tmp/$type-$name"
    "$recur" quantize "$fx/$name" "$q" --type "$type" > /dev/null 2> "$tmp/err" ||
      { cat "$tmp/err" >&2; fail "recur quantize $name --type $type"; }
    dtypes "$q" > "$tmp/dtypes"
    kept=$(grep -E '(A_log|dt_bias|mamba\.D|conv1d\.(weight|bias)|norm\.weight|layernorm\.weight) ' "$tmp/dtypes" | awk '$2 != "F32" && $2 != "BF16"' || true)
    [[ -z "$kept" ]] || fail "$name $type: quantized what must stay float: $kept"
    for t in mamba.in_proj self_attn.q_proj feed_forward.down_proj; do
      grep -qE "$t\.weight (I8|U8)$" "$tmp/dtypes" || fail "$name $type: $t was not quantized"
    done
    got_json=$(score -m "$q" --token-ids "$ids" --chunk 1 --threads 1)
    got=$(nll "$got_json")
    within "$got" "${got_nll[$name]}" 0.05 || fail "$name $type: mean NLL $got, the float model's ${got_nll[$name]}"
    for chunk in 7 300; do
      [[ "$(score -m "$q" --token-ids "$ids" --chunk "$chunk" --threads 2)" == "$got_json" ]] ||
        fail "$name $type: chunk $chunk gave other digits"
    done
    say "$name quantized $type: mean NLL $got (float ${got_nll[$name]}), the same digits at chunks 1, 7, 300"
  done
  "$recur" convert "$fx/$name" "$tmp/conv-$name" > /dev/null 2> "$tmp/err" ||
    { cat "$tmp/err" >&2; fail "recur convert $name"; }
  [[ "$(nll "$(score -m "$tmp/conv-$name" --token-ids "$ids")")" == "${got_nll[$name]}" ]] ||
    fail "$name: converted, it scores otherwise"
done < "$fx/expected_nll.txt"

for args in "--heads 4 --attn-kv-heads 2 --ssm-groups 2 --ssm-rms-norm --multipliers" \
            "--heads 2 --ssm-heads 3 --ssm-head-dim 16 --tie-embeddings"; do
  # shellcheck disable=SC2086
  "$recur" make-model "$tmp/made" --arch falcon_h1 --vocab 300 --hidden 32 --layers 2 $args > /dev/null 2> "$tmp/err" ||
    { cat "$tmp/err" >&2; fail "make-model --arch falcon_h1 $args"; }
  made=$(score -m "$tmp/made" --token-ids "$ids")
  [[ "$(score -m "$tmp/made" --token-ids "$ids" --chunk 1 --threads 2)" == "$made" ]] || fail "make-model $args: chunk 1 gave other digits"
  [[ "$(score -m "$tmp/made" --token-ids "$ids" --chunk 64 --threads 3)" == "$made" ]] || fail "make-model $args: chunk 64 gave other digits"
  rm -rf "$tmp/made"
done
say "make-model --arch falcon_h1 writes models that read back with the same digits at chunks 1 and 64"
