#!/usr/bin/env bash
# The Gated DeltaNet models (tests/gdn: Qwen3.5 multimodal and text-only, fla gated_deltanet with
# and without convolutions and gate, with its softmax layer, fla delta_net) through the recur
# binary:
# - recur score on each committed random-weight checkpoint within 1e-5 relative of the float64
#   reference (tests/gdn/reference.py) that wrote expected_nll.txt;
# - the same 17 digits at chunk sizes 1, 7, 64 and 300, on 1-3 threads, and under every
#   instruction set;
# - the reference's 16 greedy ids after the prompt (expected.json);
# - a state saved after a prompt continues as one run, under every instruction set;
# - the pure models' state is the same size after 100 and 100,000 tokens; the hybrids' grows by
#   the attention layers' KV cache and nothing else;
# - recur quantize to q8 and q4: A_log, dt_bias, the norms and the convolutions stay as stored,
#   the model scores near the float one and gives the same digits at every chunking;
# - make-model --arch qwen35 and gated_deltanet write models that read back with the same digits
#   at every chunking.
#
#   tests/gdn_model_test.sh RECUR SOURCE_DIR
set -euo pipefail
recur="$1" src="$2"
fx="$src/tests/gdn"
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
[[ $(wc -l < "$fx/expected_nll.txt") == 8 ]] || fail "expected_nll.txt should list 8 fixtures"
declare -A got_nll
while read -r name want; do
  path="$fx/$name"
  got_json=$(score -m "$path" --token-ids "$ids")
  got=$(nll "$got_json")
  got_nll[$name]=$got
  within "$got" "$want" 1e-5 ||
    fail "$name: recur's mean NLL $got, the float64 reference's $want (more than 1e-5 apart)"
  echo "gdn_model_test: $name: mean NLL $got, reference $want, relative difference $(relative "$got" "$want")"
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
  echo "gdn_model_test: $name: the same digits at chunks 1, 7, 64, 300, threads 1-3 and under $(tr '\n' ' ' <<< "$isas")"
  greedy=$(gen -m "$path" --prompt-ids "$ids" -n 16 | tr '\n' ' ')
  want_greedy=$(/usr/bin/python3 -c 'import json, sys; print(" ".join(map(str, json.load(open(sys.argv[1]))["fixtures"][sys.argv[2]]["greedy_ids"])) + " ")' "$fx/expected.json" "$name")
  [[ "$greedy" == "$want_greedy" ]] || fail "$name: greedy ids $greedy, the reference's $want_greedy"
  echo "gdn_model_test: $name: the reference's 16 greedy ids: $greedy"
done < "$fx/expected_nll.txt"

# A saved state continues as one run: a hybrid (its KV cache in the state) and a pure model,
# saved under one instruction set and continued under every other.
head -n 40 "$ids" > "$tmp/p.txt"
first_isa=$(tail -n 1 <<< "$isas")
for name in qwen35-hybrid fla-gdn-plain; do
  m="$fx/$name"
  gen -m "$m" --prompt-ids "$tmp/p.txt" -n 12 > "$tmp/whole"
  gen -m "$m" --prompt-ids "$tmp/p.txt" -n 5 --save-state "$tmp/s" > "$tmp/a"
  gen -m "$m" --load-state "$tmp/s" -n 7 > "$tmp/b"
  [[ $(wc -l < "$tmp/whole") == 12 ]] || fail "generate wrote $(wc -l < "$tmp/whole") ids, not 12"
  [[ "$(cat "$tmp/a" "$tmp/b")" == "$(cat "$tmp/whole")" ]] ||
    fail "$name: saved and continued: $(cat "$tmp/a" "$tmp/b" | tr '\n' ' ') against one run $(tr '\n' ' ' < "$tmp/whole")"
  RECUR_ISA=$first_isa gen -m "$m" --prompt-ids "$tmp/p.txt" -n 5 --save-state "$tmp/s-isa" > /dev/null
  cmp -s "$tmp/s" "$tmp/s-isa" || fail "$name: the state saved under $first_isa differs from the default's"
  for isa in $isas; do
    RECUR_ISA=$isa gen -m "$m" --load-state "$tmp/s-isa" -n 7 > "$tmp/b-isa"
    cmp -s "$tmp/b" "$tmp/b-isa" || fail "$name: the state saved under $first_isa continues otherwise under $isa"
  done
  echo "gdn_model_test: $name: a state saved after 5 ids continues as one run of 12 ($(tr '\n' ' ' < "$tmp/whole")), under every instruction set"
done

# The state's size after 100 and 100,000 tokens (generate's "state:" line): the same for a pure
# model; for a hybrid, larger by the full-attention layers' keys and values of the 99,900 tokens
# between (qwen35-hybrid: one layer, 1 kv head of 32: 256 bytes a token).
state_at() {  # state_at MODEL N: the state's bytes after N + 1 tokens
  awk -v n="$2" 'NR <= 300 { id[NR] = $1 } END { for (i = 0; i < n; ++i) print id[i % 300 + 1] }' "$ids" > "$tmp/long.txt"
  gen -m "$1" --prompt-ids "$tmp/long.txt" -n 1 --chunk 512 > /dev/null
  local line
  line=$(sed -n 's/^state: *\([0-9]*\) bytes.*after \([0-9]*\) tokens.*/\1 \2/p' "$tmp/err")
  [[ $(cut -d' ' -f2 <<< "$line") == $(($2 + 1)) ]] || fail "no state line after $2 tokens: $(cat "$tmp/err")"
  cut -d' ' -f1 <<< "$line"
}
pure100=$(state_at "$fx/qwen35-gdn" 100)
pure100k=$(state_at "$fx/qwen35-gdn" 100000)
[[ "$pure100" == "$pure100k" ]] || fail "qwen35-gdn: the state holds $pure100 bytes after 101 tokens, $pure100k after 100,001"
long_nll=$(nll "$(score -m "$fx/qwen35-gdn" --token-ids "$tmp/long.txt" --chunk 256)")
awk -v a="$long_nll" 'BEGIN { exit !(a > 0 && a < 100) }' || fail "the mean NLL over 100,000 tokens is $long_nll"
hyb100=$(state_at "$fx/qwen35-hybrid" 100)
hyb100k=$(state_at "$fx/qwen35-hybrid" 100000)
[[ $((hyb100k - hyb100)) == $((99900 * 256)) ]] ||
  fail "qwen35-hybrid: the state grew by $((hyb100k - hyb100)) bytes over 99,900 tokens, not 99,900 x 256"
echo "gdn_model_test: qwen35-gdn's state holds $pure100 bytes after 101 tokens and after 100,001 (mean NLL over 100,000 tokens $long_nll); qwen35-hybrid's grows from $hyb100 by 256 bytes a token, its KV cache"

# recur quantize to q8 and q4: the projections and the head; A_log, dt_bias, the norms, the
# convolutions and the embedding stay as stored.
dtypes() {  # name dtype per line of $1/model.safetensors
  /usr/bin/python3 -c 'import json, struct, sys; f = open(sys.argv[1], "rb"); n = struct.unpack("<Q", f.read(8))[0]
for k, v in sorted(json.loads(f.read(n)).items()):
    if k != "__metadata__": print(k, v["dtype"])' "$1/model.safetensors"
}
kQuantSanity=0.05
for name in qwen35-hybrid fla-gdn; do
  for type in q8 q4; do
    q="$tmp/$type-$name"
    "$recur" quantize "$fx/$name" "$q" --type "$type" > /dev/null 2> "$tmp/err" ||
      { cat "$tmp/err" >&2; fail "recur quantize $name --type $type"; }
    dtypes "$q" > "$tmp/dtypes"
    kept=$(grep -E '(A_log|dt_bias|conv1d\.weight|norm\.weight|embed_tokens\.weight|embeddings\.weight) ' "$tmp/dtypes" | awk '$2 != "F32"' || true)
    [[ -z "$kept" ]] || fail "$name $type: quantized what must stay float: $kept"
    n_float=$(grep -cE '(A_log|dt_bias|conv1d\.weight|norm\.weight) F32$' "$tmp/dtypes")
    [[ $n_float -gt 0 ]] || fail "$name $type: no A_log, dt_bias, conv or norm found in the file"
    code=I8
    [[ $type == q4 ]] && code=U8
    n_quant=$(awk -v c="$code" '$2 == c' "$tmp/dtypes" | wc -l)
    [[ $n_quant -gt 0 ]] || fail "$name $type: nothing was quantized"
    float="${got_nll[$name]}"
    got_json=$(score -m "$q" --token-ids "$ids" --chunk 1 --threads 1)
    got=$(nll "$got_json")
    within "$got" "$float" "$kQuantSanity" ||
      fail "$name $type: mean NLL $got, the float model's $float (more than $kQuantSanity apart)"
    for chunk in 7 64 300; do
      for threads in 1 2; do
        [[ "$(score -m "$q" --token-ids "$ids" --chunk "$chunk" --threads "$threads")" == "$got_json" ]] ||
          fail "$name $type: chunk $chunk, threads $threads gave other digits"
      done
    done
    echo "gdn_model_test: $name quantized $type ($n_quant $code matrices; $n_float A_log, dt_bias, conv and norm tensors kept F32): mean NLL $got (float $float, $(relative "$got" "$float") apart), the same digits at chunks 1, 7, 64, 300"
  done
done

# make-model writes both layouts, which read back and keep their digits at every chunking.
made_digits() {  # made_digits DIR ARGS...: make-model DIR ARGS, then score at chunks 1 and 64
  local dir=$1
  shift
  "$recur" make-model "$dir" --vocab 300 --hidden 64 --layers 4 "$@" > /dev/null 2> "$tmp/err" ||
    { cat "$tmp/err" >&2; fail "make-model $*"; }
  local made
  made=$(score -m "$dir" --token-ids "$ids")
  [[ "$(score -m "$dir" --token-ids "$ids" --chunk 1 --threads 2)" == "$made" ]] || fail "make-model $*: chunk 1 gave other digits"
  [[ "$(score -m "$dir" --token-ids "$ids" --chunk 64 --threads 2)" == "$made" ]] || fail "make-model $*: chunk 64 gave other digits"
}
made_digits "$tmp/made-q35" --arch qwen35 --heads 2 --attn-kv-heads 1 --gdn-k-heads 2 --gdn-v-heads 4
grep -q '"text_config"' "$tmp/made-q35/config.json" || fail "make-model --arch qwen35 wrote no text_config"
made_digits "$tmp/made-q35t" --arch qwen35 --heads 2 --text-only --tie-embeddings --gdn-head-dim 24
grep -q '"model_type": "qwen3_5_text"' "$tmp/made-q35t/config.json" || fail "--text-only wrote another layout"
made_digits "$tmp/made-fla" --arch gated_deltanet --heads 2 --gdn-v-heads 4 --allow-neg-eigval --gdn-no-conv
echo "gdn_model_test: make-model --arch qwen35 (multimodal and text-only) and gated_deltanet write models that read back with the same digits at chunks 1 and 64"
