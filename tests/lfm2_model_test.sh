#!/usr/bin/env bash
# LFM2 / LFM2.5 (tests/lfm2: both config forms, the options) through the recur binary:
# - recur score on each committed random-weight checkpoint within 1e-6 relative of the float64
#   reference (tests/lfm2/reference.py) that wrote expected_nll.txt;
# - the same 17 digits at chunk sizes 1, 7 and 300, on 1 and 2 threads, and under every
#   instruction set; the reference's 16 greedy ids after the prompt (expected.json);
# - a state saved after a prompt shorter than the convolution's taps continues as one run;
# - recur quantize to q8 and q4: the convolutions and norms stay as stored, the model scores near
#   the float one and gives the same digits at every chunking;
# - make-model --arch lfm2 writes either config form, which reads back with the same digits.
#
#   tests/lfm2_model_test.sh RECUR SOURCE_DIR
set -euo pipefail
recur="$1" src="$2"
fx="$src/tests/lfm2"
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
[[ $(wc -l < "$fx/expected_nll.txt") == 3 ]] || fail "expected_nll.txt should list 3 fixtures"
declare -A got_nll
while read -r name want; do
  path="$fx/$name"
  got_json=$(score -m "$path" --token-ids "$ids")
  got=$(nll "$got_json")
  got_nll[$name]=$got
  within "$got" "$want" 1e-6 ||
    fail "$name: recur's mean NLL $got, the float64 reference's $want (more than 1e-6 apart)"
  for chunk in 1 7 300; do
    for threads in 1 2; do
      [[ "$(score -m "$path" --token-ids "$ids" --chunk "$chunk" --threads "$threads")" == "$got_json" ]] ||
        fail "$name: chunk $chunk, threads $threads gave other digits"
    done
  done
  for isa in $isas; do
    [[ "$(RECUR_ISA=$isa score -m "$path" --token-ids "$ids" --chunk 64)" == "$got_json" ]] ||
      fail "$name: RECUR_ISA=$isa gave other digits"
  done
  greedy=$(gen -m "$path" --prompt-ids "$ids" -n 16 | tr '\n' ' ')
  want_greedy=$(/usr/bin/python3 -c 'import json, sys; print(" ".join(map(str, json.load(open(sys.argv[1]))["fixtures"][sys.argv[2]]["greedy_ids"])) + " ")' "$fx/expected.json" "$name")
  [[ "$greedy" == "$want_greedy" ]] || fail "$name: greedy ids $greedy, the reference's $want_greedy"
  echo "lfm2_model_test: $name: mean NLL $got, reference $want ($(relative "$got" "$want") apart); the same digits at chunks 1, 7, 300, threads 1-2 and under $(tr '\n' ' ' <<< "$isas"); the reference's greedy ids"
done < "$fx/expected_nll.txt"

# A state saved after 2 ids (fewer than the 4 taps of lfm2.5-later's convolutions) and after 40
# continues as one run.
m="$fx/lfm2.5-later"
head -n 40 "$ids" > "$tmp/p.txt"
head -n 2 "$ids" > "$tmp/p2.txt"
for p in p2 p; do
  gen -m "$m" --prompt-ids "$tmp/$p.txt" -n 12 > "$tmp/whole"
  gen -m "$m" --prompt-ids "$tmp/$p.txt" -n 5 --save-state "$tmp/s" > "$tmp/a"
  gen -m "$m" --load-state "$tmp/s" -n 7 > "$tmp/b"
  [[ "$(cat "$tmp/a" "$tmp/b")" == "$(cat "$tmp/whole")" ]] ||
    fail "lfm2.5-later ($p): saved and continued: $(cat "$tmp/a" "$tmp/b" | tr '\n' ' ') against one run $(tr '\n' ' ' < "$tmp/whole")"
done
echo "lfm2_model_test: lfm2.5-later: states saved after 2 + 5 and 40 + 5 ids continue as one run"

# recur quantize to q8 and q4: the projections, the MLP and the head; the convolutions' taps and
# the norms stay as stored (float32 or bfloat16).
dtypes() {
  /usr/bin/python3 -c 'import json, struct, sys; f = open(sys.argv[1], "rb"); n = struct.unpack("<Q", f.read(8))[0]
for k, v in sorted(json.loads(f.read(n)).items()):
    if k != "__metadata__": print(k, v["dtype"])' "$1/model.safetensors"
}
for name in lfm2-first lfm2.5-later; do
  for type in q8 q4; do
    q="$tmp/$type-$name"
    "$recur" quantize "$fx/$name" "$q" --type "$type" > /dev/null 2> "$tmp/err" ||
      { cat "$tmp/err" >&2; fail "recur quantize $name --type $type"; }
    dtypes "$q" > "$tmp/dtypes"
    dtypes "$fx/$name" > "$tmp/stored"
    kept=$(grep -E '(conv\.conv\.(weight|bias)|norm\.weight|layernorm\.weight) ' "$tmp/dtypes" || true)
    [[ -n "$kept" ]] || fail "$name $type: no convolution or norm found in the file"
    changed=$(grep -vxF -f "$tmp/stored" <<< "$kept" || true)
    [[ -z "$changed" ]] || fail "$name $type: changed what must stay as stored: $changed"
    code=I8
    [[ $type == q4 ]] && code=U8
    n_quant=$(awk -v c="$code" '$2 == c' "$tmp/dtypes" | wc -l)
    [[ $n_quant -gt 0 ]] || fail "$name $type: nothing was quantized"
    got_json=$(score -m "$q" --token-ids "$ids" --chunk 1 --threads 1)
    got=$(nll "$got_json")
    within "$got" "${got_nll[$name]}" 0.05 || fail "$name $type: mean NLL $got, the float model's ${got_nll[$name]}"
    for chunk in 7 300; do
      [[ "$(score -m "$q" --token-ids "$ids" --chunk "$chunk" --threads 2)" == "$got_json" ]] ||
        fail "$name $type: chunk $chunk gave other digits"
    done
    echo "lfm2_model_test: $name $type ($n_quant $code matrices, convolutions and norms as stored): mean NLL $got (float ${got_nll[$name]}), the same digits at chunks 1, 7, 300"
  done
done

# make-model writes both config forms; each reads back with the same digits at every chunking.
for form in "" --first-form; do
  dir="$tmp/made$form"
  "$recur" make-model "$dir" --arch lfm2 --vocab 256 --hidden 64 --layers 4 --heads 4 \
    --attn-kv-heads 2 --conv-taps 4 --conv-bias $form > /dev/null 2> "$tmp/err" ||
    { cat "$tmp/err" >&2; fail "make-model --arch lfm2 $form"; }
  made=$(score -m "$dir" --token-ids "$ids")
  [[ "$(score -m "$dir" --token-ids "$ids" --chunk 1 --threads 2)" == "$made" ]] || fail "make-model $form: chunk 1 gave other digits"
  key=layer_types
  [[ -n $form ]] && key=full_attn_idxs
  grep -q "\"$key\"" "$dir/config.json" || fail "make-model $form wrote no $key"
done
echo "lfm2_model_test: make-model --arch lfm2 writes both config forms, which read back with the same digits at chunks 1 and 64"
