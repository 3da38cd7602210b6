#!/usr/bin/env bash
# Mamba-2 and its hybrids (tests/mamba2: transformers' mamba2 layout with one, two and four
# groups, biases, clamps, bf16; state-spaces' mamba_ssm layout with the norm before the gate;
# Granite 4.0-H; tests/nemotron_h: Nemotron-H) through the recur binary:
# - recur score on each committed random-weight checkpoint within 1e-6 relative of the float64
#   reference (tests/mamba2/reference.py) that wrote expected_nll.txt;
# - the same 17 digits at chunk sizes 1, 7, 64 and 300, on 1-3 threads, and under every
#   instruction set; the reference's 8 greedy ids after the prompt;
# - a state saved after a prompt continues as one run, under every instruction set, and is the
#   same size after 100 and 100,000 tokens;
# - recur quantize to q8 and q4 (A_log, dt_bias, D, the norms and the convolution stay as
#   stored) and convert keep the digits at every chunking;
# - make-model --arch mamba2 (both layouts), granitemoehybrid and nemotron_h write models that
#   read back with the same digits.
#
#   tests/mamba2_model_test.sh RECUR SOURCE_DIR
set -euo pipefail
recur="$1" src="$2"
fx="$src/tests/mamba2"
nfx="$src/tests/nemotron_h"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAILED: $*" >&2; exit 1; }
ids="$fx/prompt_ids.txt"
score() { "$recur" score --json "$@" 2> "$tmp/err" || { cat "$tmp/err" >&2; fail "recur score $*"; }; }
gen() { "$recur" generate --ids --greedy --ignore-eos "$@" 2> "$tmp/err" || { cat "$tmp/err" >&2; fail "recur generate $*"; }; }
nll() { sed 's/.*"mean_nll": \([^,]*\),.*/\1/' <<< "$1"; }
within() {  # within A B TOL: |A - B| / |B| < TOL
  awk -v a="$1" -v b="$2" -v t="$3" 'BEGIN { d = (a - b) / b; if (d < 0) d = -d; exit !(d < t) }'
}
relative() { awk -v a="$1" -v b="$2" 'BEGIN { d = (a - b) / b; printf "%.2g", d < 0 ? -d : d }'; }
isas=$("$recur" isa --available)

[[ $(wc -l < "$ids") == 300 ]] || fail "$ids should hold 300 ids"
[[ $(wc -l < "$fx/expected_nll.txt") == 6 ]] || fail "$fx/expected_nll.txt should list 6 fixtures"
[[ $(wc -l < "$nfx/expected_nll.txt") == 2 ]] || fail "$nfx/expected_nll.txt should list 2 fixtures"
declare -A got_nll
for dir in "$fx" "$nfx"; do
while read -r name want; do
  path="$dir/$name"
  got_json=$(score -m "$path" --token-ids "$ids")
  got=$(nll "$got_json")
  got_nll[$name]=$got
  within "$got" "$want" 1e-6 ||
    fail "$name: recur's mean NLL $got, the float64 reference's $want (more than 1e-6 apart)"
  echo "mamba2_model_test: $name: mean NLL $got, reference $want, relative difference $(relative "$got" "$want")"
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
  want_greedy=$(/usr/bin/python3 -c 'import json, sys; print(" ".join(map(str, json.load(open(sys.argv[1]))["fixtures"][sys.argv[2]]["greedy_ids"])) + " ")' "$dir/expected.json" "$name")
  [[ "$greedy" == "$want_greedy" ]] || fail "$name: greedy ids $greedy, the reference's $want_greedy"
  echo "mamba2_model_test: $name: the same digits at chunks 1, 7, 64, 300, threads 1-3 and under $(tr '\n' ' ' <<< "$isas"); the reference's greedy ids $greedy"
done < "$dir/expected_nll.txt"
done

# A saved state continues as one run, saved under one instruction set and continued under each.
head -n 40 "$ids" > "$tmp/p.txt"
first_isa=$(tail -n 1 <<< "$isas")
for m in "$fx/mamba2-groups" "$fx/mamba-ssm" "$fx/granite-hybrid" "$nfx/nemotron-h-hybrid"; do
  name=$(basename "$m")
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
  echo "mamba2_model_test: $name: a state saved after 5 ids continues as one run of 12, under every instruction set"
done
state_at() {  # state_at MODEL N: the state's bytes after N + 1 tokens
  awk -v n="$2" 'NR <= 300 { id[NR] = $1 } END { for (i = 0; i < n; ++i) print id[i % 300 + 1] }' "$ids" > "$tmp/long.txt"
  gen -m "$1" --prompt-ids "$tmp/long.txt" -n 1 --chunk 512 > /dev/null
  local line
  line=$(sed -n 's/^state: *\([0-9]*\) bytes.*after \([0-9]*\) tokens.*/\1 \2/p' "$tmp/err")
  [[ $(cut -d' ' -f2 <<< "$line") == $(($2 + 1)) ]] || fail "no state line after $2 tokens: $(cat "$tmp/err")"
  cut -d' ' -f1 <<< "$line"
}
s100=$(state_at "$fx/mamba2-plain" 100)
s100k=$(state_at "$fx/mamba2-plain" 100000)
[[ "$s100" == "$s100k" ]] || fail "mamba2-plain: the state holds $s100 bytes after 101 tokens, $s100k after 100,001"
echo "mamba2_model_test: mamba2-plain's state holds $s100 bytes after 101 tokens and after 100,001"
# granite-hybrid's grows by its two attention layers' keys and values (2 kv heads of 16) alone
# (3,000 tokens: the attention over 100,000 would take minutes).
g100=$(state_at "$fx/granite-hybrid" 100)
g3k=$(state_at "$fx/granite-hybrid" 3000)
[[ $((g3k - g100)) == $((2900 * 2 * 2 * 2 * 16 * 4)) ]] ||
  fail "granite-hybrid: the state grew by $((g3k - g100)) bytes over 2,900 tokens, not 2,900 x 512"
echo "mamba2_model_test: granite-hybrid's state grows from $g100 bytes by 512 a token, its attention layers' KV cache"

# quantize q8 / q4 and convert: the projections and the head quantized, the rest as stored.
dtypes() {
  /usr/bin/python3 -c 'import json, struct, sys; f = open(sys.argv[1], "rb"); n = struct.unpack("<Q", f.read(8))[0]
for k, v in sorted(json.loads(f.read(n)).items()):
    if k != "__metadata__": print(k, v["dtype"])' "$1/model.safetensors"
}
for model in "$fx/mamba2-groups" "$fx/mamba-ssm" "$fx/granite-hybrid" "$nfx/nemotron-h-hybrid"; do
  name=$(basename "$model")
  for type in q8 q4; do
    q="$tmp/$type-$name"
    "$recur" quantize "$model" "$q" --type "$type" > /dev/null 2> "$tmp/err" ||
      { cat "$tmp/err" >&2; fail "recur quantize $name --type $type"; }
    dtypes "$q" > "$tmp/dtypes"
    kept=$(grep -E '(A_log|dt_bias|mixer\.D|conv1d\.(weight|bias)|norm\.weight|norm_f\.weight) ' "$tmp/dtypes" | awk '$2 != "F32"' || true)
    [[ -z "$kept" ]] || fail "$name $type: quantized what must stay float: $kept"
    grep -qE 'in_proj\.weight (I8|U8)$' "$tmp/dtypes" || fail "$name $type: in_proj was not quantized"
    got_json=$(score -m "$q" --token-ids "$ids" --chunk 1 --threads 1)
    got=$(nll "$got_json")
    within "$got" "${got_nll[$name]}" 0.05 || fail "$name $type: mean NLL $got, the float model's ${got_nll[$name]}"
    for chunk in 7 300; do
      [[ "$(score -m "$q" --token-ids "$ids" --chunk "$chunk" --threads 2)" == "$got_json" ]] ||
        fail "$name $type: chunk $chunk gave other digits"
    done
    echo "mamba2_model_test: $name quantized $type: mean NLL $got (float ${got_nll[$name]}), the same digits at chunks 1, 7, 300"
  done
  "$recur" convert "$model" "$tmp/conv-$name" > /dev/null 2> "$tmp/err" ||
    { cat "$tmp/err" >&2; fail "recur convert $name"; }
  [[ "$(nll "$(score -m "$tmp/conv-$name" --token-ids "$ids")")" == "${got_nll[$name]}" ]] ||
    fail "$name: converted, it scores otherwise"
done

made_digits() {  # made_digits DIR ARGS...: make-model DIR ARGS, then score at chunks 1 and 64
  local dir=$1
  shift
  "$recur" make-model "$dir" --vocab 300 --hidden 32 --layers 2 "$@" > /dev/null 2> "$tmp/err" ||
    { cat "$tmp/err" >&2; fail "make-model $*"; }
  local made
  made=$(score -m "$dir" --token-ids "$ids")
  [[ "$(score -m "$dir" --token-ids "$ids" --chunk 1 --threads 2)" == "$made" ]] || fail "make-model $*: chunk 1 gave other digits"
  [[ "$(score -m "$dir" --token-ids "$ids" --chunk 64 --threads 3)" == "$made" ]] || fail "make-model $*: chunk 64 gave other digits"
}
made_digits "$tmp/made" --arch mamba2 --ssm-groups 2 --ssm-dt-max 0.08 --ssm-bias
grep -q '"model_type": "mamba2"' "$tmp/made/config.json" || fail "make-model --arch mamba2 wrote another layout"
made_digits "$tmp/made-ssm" --arch mamba2 --mamba-ssm-layout --norm-before-gate --tie-embeddings
grep -q '"ssm_cfg"' "$tmp/made-ssm/config.json" || fail "--mamba-ssm-layout wrote no ssm_cfg"
made_digits "$tmp/made-granite" --arch granitemoehybrid --heads 4 --attn-kv-heads 2 --layer-types MAMA --multipliers
made_digits "$tmp/made-granite-dense" --arch granitemoehybrid --heads 4 --layer-types AA --rope --tie-embeddings
made_digits "$tmp/made-nemotron" --arch nemotron_h --heads 4 --attn-kv-heads 2 --pattern 'M-*M' --ssm-groups 2
grep -q '"hybrid_override_pattern": "M-\*M"' "$tmp/made-nemotron/config.json" || fail "make-model --arch nemotron_h wrote another pattern"
echo "mamba2_model_test: make-model --arch mamba2 (both layouts), granitemoehybrid and nemotron_h writes models that read back with the same digits at chunks 1 and 64"
