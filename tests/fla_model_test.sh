#!/usr/bin/env bash
# flash-linear-attention's GLA, RetNet, HGRN2 and hybrid models (tests/fla) through the recur
# binary:
# - recur score on each committed random-weight checkpoint (fla's config.json and tensor names,
#   f32 and bf16) within 1e-5 relative of the float64 reference (tests/fla/reference.py) that
#   wrote expected_nll.txt;
# - the same 17 digits at chunk sizes 1, 7, 64 and 300, on 1-3 threads, and under every
#   instruction set;
# - recur quantize (q8, q4) on GLA, HGRN2 and a hybrid: the quantized model loads, scores
#   near the float one, and gives the same digits at chunk sizes 1 and 64 on 1 and 2 threads;
# - when PyTorch is there (/usr/bin/python3 with torch, Debian's python3-torch), the reference
#   recomputes every committed expectation.
#
#   tests/fla_model_test.sh RECUR SOURCE_DIR
set -euo pipefail
recur="$1" src="$2"
fla="$src/tests/fla"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAILED: $*" >&2; exit 1; }
ids="$fla/prompt_ids.txt"
score() { "$recur" score --json "$@" 2> "$tmp/err" || { cat "$tmp/err" >&2; fail "recur score $*"; }; }
nll() { sed 's/.*"mean_nll": \([^,]*\),.*/\1/' <<< "$1"; }

[[ $(wc -l < "$ids") == 300 ]] || fail "$ids should hold 300 ids"
while read -r name want; do
  dir="$fla/$name"
  got_json=$(score -m "$dir" --token-ids "$ids")
  got=$(nll "$got_json")
  awk -v a="$got" -v b="$want" 'BEGIN { d = (a - b) / b; if (d < 0) d = -d; exit !(d < 1e-5) }' ||
    fail "$name: recur's mean NLL $got, the float64 reference's $want (more than 1e-5 apart)"
  rel=$(awk -v a="$got" -v b="$want" 'BEGIN { d = (a - b) / b; printf "%.2g", d < 0 ? -d : d }')
  echo "fla_model_test: $name: mean NLL $got, reference $want, relative difference $rel"
  for chunk in 1 7 64 300; do
    for threads in 1 2 3; do
      [[ "$(score -m "$dir" --token-ids "$ids" --chunk "$chunk" --threads "$threads")" == "$got_json" ]] ||
        fail "$name: chunk $chunk, threads $threads gave other digits"
    done
  done
  for isa in $("$recur" isa --available); do
    [[ "$(RECUR_ISA=$isa score -m "$dir" --token-ids "$ids" --chunk 64)" == "$got_json" ]] ||
      fail "$name: RECUR_ISA=$isa gave other digits"
  done
  echo "fla_model_test: $name: the same digits at chunks 1, 7, 64, 300, threads 1-3 and under $("$recur" isa --available | tr '\n' ' ')"
done < "$fla/expected_nll.txt"

# recur quantize on fla models: the projections (and the attention layers' q, k, v, o), the MLP
# and the head become q8 or q4; the quantized model scores near the float one (a sanity bound,
# not an accuracy claim: random weights) and prefill equals stepping to the digit.
kQuantSanity=0.05
for name in gla hgrn2 gla-hybrid; do
  float=$(nll "$(score -m "$fla/$name" --token-ids "$ids")")
  for type in q8 q4; do
    q="$tmp/$name-$type"
    "$recur" quantize "$fla/$name" "$q" --type "$type" > /dev/null 2> "$tmp/err" ||
      { cat "$tmp/err" >&2; fail "recur quantize $name --type $type"; }
    grep -q "\"quantization_config\"" "$q/config.json" || fail "$name $type: no quantization_config"
    got_json=$(score -m "$q" --token-ids "$ids" --chunk 1 --threads 1)
    got=$(nll "$got_json")
    awk -v a="$got" -v b="$float" -v tol="$kQuantSanity" \
      'BEGIN { d = (a - b) / b; if (d < 0) d = -d; exit !(d < tol) }' ||
      fail "$name $type: mean NLL $got, the float model's $float (more than $kQuantSanity apart)"
    for chunk in 1 64; do
      for threads in 1 2; do
        [[ "$(score -m "$q" --token-ids "$ids" --chunk "$chunk" --threads "$threads")" == "$got_json" ]] ||
          fail "$name $type: chunk $chunk, threads $threads gave other digits"
      done
    done
    echo "fla_model_test: $name quantized $type: mean NLL $got (float $float), the same digits at chunks 1, 64, threads 1, 2"
  done
done

# The head takes its own format (--head), untied or tied: a tied embedding is the head's matrix
# and is quantized with it.
dtype_of() {  # the stored dtype of tensor $2 in $1/model.safetensors
  /usr/bin/python3 -c 'import json, struct, sys; f = open(sys.argv[1], "rb"); n = struct.unpack("<Q", f.read(8))[0]; print(json.loads(f.read(n))[sys.argv[2]]["dtype"])' "$1/model.safetensors" "$2"
}
for name in gla gla-nogate; do
  "$recur" quantize "$fla/$name" "$tmp/$name-q4h8" --type q4 --head q8 > /dev/null 2> "$tmp/err" ||
    { cat "$tmp/err" >&2; fail "recur quantize $name --type q4 --head q8"; }
  head_tensor=lm_head.weight
  [[ $name == gla-nogate ]] && head_tensor=model.embeddings.weight
  [[ "$(dtype_of "$tmp/$name-q4h8" "$head_tensor")" == I8 ]] ||
    fail "$name --type q4 --head q8: $head_tensor is $(dtype_of "$tmp/$name-q4h8" "$head_tensor"), not the head's q8 codes (I8)"
  [[ "$(dtype_of "$tmp/$name-q4h8" model.layers.0.mlp.up_proj.weight)" == U8 ]] ||
    fail "$name --type q4 --head q8: the MLP is not q4"
  "$recur" score -m "$tmp/$name-q4h8" --token-ids "$ids" > /dev/null 2> "$tmp/err" ||
    { cat "$tmp/err" >&2; fail "recur score on $name --type q4 --head q8"; }
  grep -q "weights: q4 (head q8)" "$tmp/err" || fail "$name: the weights line is not 'q4 (head q8)': $(cat "$tmp/err")"
done
echo "fla_model_test: --head q8 quantizes the head of an untied and of a tied model in q8, the rest in q4"

# The committed expectations are the reference's own numbers (where PyTorch is installed).
if /usr/bin/python3 -c 'import torch' 2> /dev/null; then
  /usr/bin/python3 "$fla/reference.py" --check-expected "$fla/expected_nll.txt" ||
    fail "reference.py no longer gives the committed expected_nll.txt"
  echo "fla_model_test: reference.py recomputes every committed mean NLL"
else
  echo "fla_model_test: no PyTorch (/usr/bin/python3 -c 'import torch'): the committed expectations are not recomputed"
fi
