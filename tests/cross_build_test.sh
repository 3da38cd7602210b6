#!/usr/bin/env bash
# Two runs of recur on different instruction sets (two builds, two forced kernels, or two
# architectures) must give the same bytes: the same score digits and the same greedy tokens, on
# models of several layouts.
#   tests/cross_build_test.sh "RECUR_A" "RECUR_B"
# Each is a command, split at spaces: "env RECUR_ISA=scalar build/release/tools/recur" works.
set -euo pipefail
read -r -a a <<< "$1"
read -r -a b <<< "$2"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
printf 'Two builds, one order of operations: the same bytes on every CPU.\n' > "$dir/text"
checks=0
"${a[@]}" make-model "$dir/m1" --feature-map hedgehog --normalized --kv-heads 2 --dtype bf16 > /dev/null
"${a[@]}" make-model "$dir/m2" --feature-map dpfp --dtype f16 > /dev/null
"${a[@]}" make-model "$dir/m3" --arch transformers_are_rnns --hidden-act gelu > /dev/null
# Quantized weights (q8 with a tied embedding as the head; q4 with an MLP width of 80, whose down
# projection stays f32): integer dot products and one float order over the blocks.
"${a[@]}" make-model "$dir/f5" --feature-map hedgehog --normalized --tie-embeddings > /dev/null
"${a[@]}" quantize "$dir/f5" "$dir/m5" --type q8 > /dev/null 2>&1
"${a[@]}" make-model "$dir/f6" --intermediate 80 --dtype bf16 > /dev/null
"${a[@]}" quantize "$dir/f6" "$dir/m6" --type q4 > /dev/null 2>&1
for m in "$dir/m1" "$dir/m2" "$dir/m3" "$dir/m5" "$dir/m6" builtin; do
  model=(-m "$m"); [[ "$m" == builtin ]] && model=()
  sa=$("${a[@]}" score "${model[@]}" -f "$dir/text" --json --chunk 7)
  sb=$("${b[@]}" score "${model[@]}" -f "$dir/text" --json --chunk 64 --threads 1)
  [[ "$sa" == "$sb" ]] || fail "score differs for $m: $sa vs $sb"
  ga=$("${a[@]}" generate "${model[@]}" -p "Same" -n 24 --greedy --ids 2> /dev/null)
  gb=$("${b[@]}" generate "${model[@]}" -p "Same" -n 24 --greedy --ids --chunk 1 2> /dev/null)
  [[ "$ga" == "$gb" ]] || fail "greedy tokens differ for $m"
  checks=$((checks + 2))
done
# Based (BaseConv, Taylor linear attention, a window with rotary): no tokenizer, so ids in and out.
"${a[@]}" make-model "$dir/m4" --arch based --vocab 300 --hidden 32 --layers 5 --heads 2 \
  --la-layers 1,4 --window-layers 2 --feature-dim 8 --window-size 8 > /dev/null
"${a[@]}" quantize "$dir/m4" "$dir/m7" --type q4 --head q8 > /dev/null 2>&1
seq 1 97 | awk '{ print ($1 * 37) % 300 }' > "$dir/ids"
for m in "$dir/m4" "$dir/m7"; do
  sa=$("${a[@]}" score -m "$m" --token-ids "$dir/ids" --json --chunk 7)
  sb=$("${b[@]}" score -m "$m" --token-ids "$dir/ids" --json --chunk 64 --threads 1)
  [[ "$sa" == "$sb" ]] || fail "score differs for the Based model $m: $sa vs $sb"
  ga=$("${a[@]}" generate -m "$m" --prompt-ids "$dir/ids" -n 24 --greedy --ids 2> /dev/null)
  gb=$("${b[@]}" generate -m "$m" --prompt-ids "$dir/ids" -n 24 --greedy --ids --chunk 1 2> /dev/null)
  [[ "$ga" == "$gb" ]] || fail "greedy tokens differ for the Based model $m"
  checks=$((checks + 2))
done
# fla's GLA (short convolutions, grouped kv heads, a full softmax layer) and HGRN2 (lower bounds).
"${a[@]}" make-model "$dir/g5" --arch gla --vocab 300 --hidden 32 --layers 3 --heads 4 --kv-heads 2 \
  --short-conv --attn-layers 1 --attn-heads 4 --attn-kv-heads 2 > /dev/null
"${a[@]}" make-model "$dir/g6" --arch hgrn2 --vocab 300 --hidden 32 --layers 3 --expand-ratio 8 \
  --dtype bf16 > /dev/null
for m in "$dir/g5" "$dir/g6"; do
  sa=$("${a[@]}" score -m "$m" --token-ids "$dir/ids" --json --chunk 7)
  sb=$("${b[@]}" score -m "$m" --token-ids "$dir/ids" --json --chunk 64 --threads 1)
  [[ "$sa" == "$sb" ]] || fail "score differs for $m: $sa vs $sb"
  ga=$("${a[@]}" generate -m "$m" --prompt-ids "$dir/ids" -n 24 --greedy --ids 2> /dev/null)
  gb=$("${b[@]}" generate -m "$m" --prompt-ids "$dir/ids" -n 24 --greedy --ids --chunk 1 2> /dev/null)
  [[ "$ga" == "$gb" ]] || fail "greedy tokens differ for $m"
  checks=$((checks + 2))
done
# The delta-rule models: the scores, the greedy ids, and a state saved by one run is the same
# bytes from the other and continues there as it does here.
#   same_state_across LABEL MODEL...
same_state_across() {
  local label="$1" m sa sb ga gb ca cb
  shift
  for m in "$@"; do
    sa=$("${a[@]}" score -m "$m" --token-ids "$dir/ids" --json --chunk 7)
    sb=$("${b[@]}" score -m "$m" --token-ids "$dir/ids" --json --chunk 64 --threads 1)
    [[ "$sa" == "$sb" ]] || fail "score differs for the $label model $m: $sa vs $sb"
    ga=$("${a[@]}" generate -m "$m" --prompt-ids "$dir/ids" -n 6 --greedy --ids --save-state "$dir/sa" 2> /dev/null)
    gb=$("${b[@]}" generate -m "$m" --prompt-ids "$dir/ids" -n 6 --greedy --ids --chunk 1 --save-state "$dir/sb" 2> /dev/null)
    [[ "$ga" == "$gb" ]] || fail "greedy tokens differ for the $label model $m"
    cmp -s "$dir/sa" "$dir/sb" || fail "the $label model $m saved other state bytes"
    ca=$("${a[@]}" generate -m "$m" --load-state "$dir/sb" -n 12 --greedy --ids 2> /dev/null)
    cb=$("${b[@]}" generate -m "$m" --load-state "$dir/sa" -n 12 --greedy --ids 2> /dev/null)
    [[ "$ca" == "$cb" ]] || fail "a state saved by one run continues otherwise in the other for the $label model $m"
    checks=$((checks + 4))
  done
}
# RWKV-7 (the delta-rule walk, the LoRAs, the per-head group norm), bf16 and q8 (its LoRAs and
# small tensors kept as stored).
"${a[@]}" make-model "$dir/r1" --arch rwkv7 --vocab 300 --hidden 64 --layers 3 --heads 2 \
  --lora-ranks 4,3,2,8 --dtype bf16 > /dev/null 2>&1
"${a[@]}" quantize "$dir/r1" "$dir/r2" --type q8 > /dev/null 2>&1
same_state_across RWKV-7 "$dir/r1" "$dir/r2"
# Qwen3.5 (Gated DeltaNet with grouped value heads, a gated full-attention layer with partial
# rotary and its KV cache), bf16 and q4; fla's gated_deltanet with allow_neg_eigval.
"${a[@]}" make-model "$dir/q1" --arch qwen35 --vocab 300 --hidden 64 --layers 4 --heads 2 \
  --attn-kv-heads 1 --dtype bf16 > /dev/null 2>&1
"${a[@]}" quantize "$dir/q1" "$dir/q2" --type q4 > /dev/null 2>&1
"${a[@]}" make-model "$dir/q3" --arch gated_deltanet --vocab 300 --hidden 64 --layers 2 --heads 2 \
  --allow-neg-eigval > /dev/null 2>&1
same_state_across "Gated DeltaNet" "$dir/q1" "$dir/q2" "$dir/q3"
echo "$checks passed, 0 failed"
