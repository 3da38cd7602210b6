#!/usr/bin/env bash
# RWKV-7 (tests/rwkv7) through the recur binary:
# - recur score on each committed random-weight checkpoint (BlinkDL's .pth in f32, bf16 and f16,
#   given as a file or as a folder holding it; fla-hub's folders, including fla's first layout
#   with attn.x_x) within 1e-5 relative of the float64 reference (tests/rwkv7/reference.py)
#   that wrote expected_nll.txt;
# - the same 17 digits at chunk sizes 1, 7, 64 and 300, on 1-3 threads, and under every
#   instruction set;
# - the reference's 16 greedy ids after the prompt (expected.json);
# - a state saved after a prompt and continued gives the ids of one run;
# - the .pth and the fla folder of one model agree where the reference says they do;
# - recur convert of a .pth writes a folder that scores the same digits, and a state saved from
#   the .pth continues in it;
# - recur quantize to q8 and q4: only the big matrices are quantized, the model scores near the float one
#   and gives the same digits at every chunking;
# - when PyTorch is there, the reference recomputes every committed expectation.
#
#   tests/rwkv7_model_test.sh RECUR SOURCE_DIR
set -euo pipefail
recur="$1" src="$2"
fx="$src/tests/rwkv7"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAILED: $*" >&2; exit 1; }
ids="$fx/prompt_ids.txt"
score() { "$recur" score --json "$@" 2> "$tmp/err" || { cat "$tmp/err" >&2; fail "recur score $*"; }; }
nll() { sed 's/.*"mean_nll": \([^,]*\),.*/\1/' <<< "$1"; }
within() {  # within A B TOL: |A - B| / |B| < TOL
  awk -v a="$1" -v b="$2" -v t="$3" 'BEGIN { d = (a - b) / b; if (d < 0) d = -d; exit !(d < t) }'
}
relative() { awk -v a="$1" -v b="$2" 'BEGIN { d = (a - b) / b; printf "%.2g", d < 0 ? -d : d }'; }

[[ $(wc -l < "$ids") == 300 ]] || fail "$ids should hold 300 ids"
[[ $(wc -l < "$fx/expected_nll.txt") == 7 ]] || fail "expected_nll.txt should list 7 fixtures"
declare -A got_nll
while read -r name want; do
  path="$fx/$name"
  got_json=$(score -m "$path" --token-ids "$ids")
  got=$(nll "$got_json")
  got_nll[$name]=$got
  within "$got" "$want" 1e-5 ||
    fail "$name: recur's mean NLL $got, the float64 reference's $want (more than 1e-5 apart)"
  echo "rwkv7_model_test: $name: mean NLL $got, reference $want, relative difference $(relative "$got" "$want")"
  for chunk in 1 7 64 300; do
    for threads in 1 2 3; do
      [[ "$(score -m "$path" --token-ids "$ids" --chunk "$chunk" --threads "$threads")" == "$got_json" ]] ||
        fail "$name: chunk $chunk, threads $threads gave other digits"
    done
  done
  for isa in $("$recur" isa --available); do
    [[ "$(RECUR_ISA=$isa score -m "$path" --token-ids "$ids" --chunk 64)" == "$got_json" ]] ||
      fail "$name: RECUR_ISA=$isa gave other digits"
  done
  echo "rwkv7_model_test: $name: the same digits at chunks 1, 7, 64, 300, threads 1-3 and under $("$recur" isa --available | tr '\n' ' ')"
  # The 16 greedy ids after the prompt (the reference's smallest top-2 margin among them is
  # 0.0046, far above float32's error in the logits).
  greedy=$("$recur" generate -m "$path" --prompt-ids "$ids" --ids --greedy --ignore-eos -n 16 2> "$tmp/err" | tr '\n' ' ') ||
    { cat "$tmp/err" >&2; fail "recur generate on $name"; }
  want_greedy=$(/usr/bin/python3 -c 'import json, sys; print(" ".join(map(str, json.load(open(sys.argv[1]))["fixtures"][sys.argv[2]]["greedy"])) + " ")' "$fx/expected.json" "$name")
  [[ "$greedy" == "$want_greedy" ]] || fail "$name: greedy ids $greedy, the reference's $want_greedy"
  echo "rwkv7_model_test: $name: the reference's 16 greedy ids: $greedy"
  if [[ $name == *.pth ]]; then  # a folder holding the .pth alone (no config.json) is the same
    mkdir "$tmp/dir-$name"
    cp "$path" "$tmp/dir-$name/"
    [[ "$(score -m "$tmp/dir-$name" --token-ids "$ids")" == "$got_json" ]] ||
      fail "$name: the folder holding it gave other digits than the file"
  fi
done < "$fx/expected_nll.txt"
echo "rwkv7_model_test: a folder holding one .pth and no config.json reads as the .pth"

# The two layouts of one model. h1x64: the only difference of the publishers' rules is the kk
# normalisation (the reference: 8.9e-11 apart), so recur's two readings agree far inside 1e-7.
# h2x16: ln_x's eps differs (64e-5 against head_dim * norm_eps = 16e-5), 1.7e-4 in the reference;
# recur's two readings must differ by that, not agree.
within "${got_nll[h1x64-bf16.pth]}" "${got_nll[h1x64-fla-bf16]}" 1e-7 ||
  fail "h1x64: the .pth (${got_nll[h1x64-bf16.pth]}) and the fla folder (${got_nll[h1x64-fla-bf16]}) disagree"
within "${got_nll[h2x16-f32.pth]}" "${got_nll[h2x16-fla]}" 1e-4 &&
  fail "h2x16: the .pth and the fla folder agree within 1e-4: ln_x's eps is not each publisher's"
echo "rwkv7_model_test: .pth and fla folder of h1x64 agree ($(relative "${got_nll[h1x64-bf16.pth]}" "${got_nll[h1x64-fla-bf16]}")), of h2x16 differ by ln_x's eps ($(relative "${got_nll[h2x16-f32.pth]}" "${got_nll[h2x16-fla]}"), the reference 1.7e-4)"

# A saved state continues as one run (the .pth, and the converted folder).
m="$fx/h2x16-f32.pth"
head -n 40 "$ids" > "$tmp/p.txt"
gen() { "$recur" generate --ids --greedy --ignore-eos "$@" 2> "$tmp/err" || { cat "$tmp/err" >&2; fail "recur generate $*"; }; }
gen -m "$m" --prompt-ids "$tmp/p.txt" -n 12 > "$tmp/whole"
gen -m "$m" --prompt-ids "$tmp/p.txt" -n 5 --save-state "$tmp/s" > "$tmp/a"
gen -m "$m" --load-state "$tmp/s" -n 7 > "$tmp/b"
[[ "$(cat "$tmp/a" "$tmp/b")" == "$(cat "$tmp/whole")" ]] ||
  fail "saved and continued: $(cat "$tmp/a" "$tmp/b" | tr '\n' ' ') against one run $(tr '\n' ' ' < "$tmp/whole")"
[[ $(wc -l < "$tmp/whole") == 12 ]] || fail "generate wrote $(wc -l < "$tmp/whole") ids, not 12"
# Saved under one instruction set, continued under every other: the same ids.
isas=$("$recur" isa --available)
first_isa=$(tail -n 1 <<< "$isas")
RECUR_ISA=$first_isa gen -m "$m" --prompt-ids "$tmp/p.txt" -n 5 --save-state "$tmp/s-isa" > /dev/null
cmp -s "$tmp/s" "$tmp/s-isa" || fail "the state saved under $first_isa differs from the default's"
for isa in $isas; do
  RECUR_ISA=$isa gen -m "$m" --load-state "$tmp/s-isa" -n 7 > "$tmp/b-isa"
  cmp -s "$tmp/b" "$tmp/b-isa" || fail "the state saved under $first_isa continues otherwise under $isa"
done
echo "rwkv7_model_test: a state saved after 5 ids continues as one run of 12: $(tr '\n' ' ' < "$tmp/whole"); saved under $first_isa (the same bytes) and continued under $(tr '\n' ' ' <<< "$isas")"

# The state is the same size after 100 and after 100,000 tokens (generate's "state:" line), and
# the scores stay finite.
for n in 100 100000; do
  awk -v n="$n" 'NR <= 300 { id[NR] = $1 } END { for (i = 0; i < n; ++i) print id[i % 300 + 1] }' "$ids" > "$tmp/long.txt"
  gen -m "$m" --prompt-ids "$tmp/long.txt" -n 1 > /dev/null
  sed -n 's/^state: *\([0-9]*\) bytes.*after \([0-9]*\) tokens.*/\1 \2/p' "$tmp/err" > "$tmp/state-$n"
  [[ $(cut -d' ' -f2 "$tmp/state-$n") == $((n + 1)) ]] || fail "no state line after $n tokens: $(cat "$tmp/err")"
done
[[ $(cut -d' ' -f1 "$tmp/state-100") == $(cut -d' ' -f1 "$tmp/state-100000") ]] ||
  fail "the state holds $(cat "$tmp/state-100") bytes and tokens, then $(cat "$tmp/state-100000")"
long_nll=$(nll "$(score -m "$m" --token-ids "$tmp/long.txt" --chunk 256)")
awk -v a="$long_nll" 'BEGIN { exit !(a > 0 && a < 100) }' || fail "the mean NLL over 100,000 tokens is $long_nll"
echo "rwkv7_model_test: the state holds $(cut -d' ' -f1 "$tmp/state-100") bytes after 101 tokens and after 100,001; mean NLL over 100,000 tokens $long_nll"

# recur convert FILE.pth OUT: a folder of safetensors and config.json with the same digits.
"$recur" convert "$m" "$tmp/conv" > /dev/null 2> "$tmp/err" || { cat "$tmp/err" >&2; fail "recur convert $m"; }
[[ -f "$tmp/conv/config.json" && -f "$tmp/conv/model.safetensors" ]] || fail "convert wrote no folder"
[[ "$(score -m "$tmp/conv" --token-ids "$ids")" == "$(score -m "$m" --token-ids "$ids")" ]] ||
  fail "the converted folder scores other digits than the .pth"
gen -m "$tmp/conv" --load-state "$tmp/s" -n 7 > "$tmp/c"
[[ "$(cat "$tmp/c")" == "$(cat "$tmp/b")" ]] || fail "the .pth's saved state continues otherwise in the converted folder"
"$recur" convert "$fx/h1x64-bf16.pth" "$tmp/conv64" > /dev/null 2> "$tmp/err" ||
  { cat "$tmp/err" >&2; fail "recur convert h1x64-bf16.pth"; }
[[ "$(score -m "$tmp/conv64" --token-ids "$ids")" == "$(score -m "$fx/h1x64-bf16.pth" --token-ids "$ids")" ]] ||
  fail "h1x64-bf16.pth converted (bf16, layer 0's unused v0/v1/v2) scores other digits"
echo "rwkv7_model_test: recur convert of a .pth writes a folder with the same digits, and the .pth's state continues there"

# The tokenizer beside a .pth (RWKV's world vocabulary file) is found from the file and from its
# folder, and convert copies it.
mkdir "$tmp/tok"
cp "$m" "$src/tests/world/rwkv_vocab_v20230424.txt" "$tmp/tok/"
for path in "$tmp/tok/h2x16-f32.pth" "$tmp/tok"; do
  "$recur" score -m "$path" --token-ids "$ids" > /dev/null 2> "$tmp/err" || { cat "$tmp/err" >&2; fail "recur score -m $path"; }
  grep -q "^tokenizer: RWKV world vocabulary" "$tmp/err" || fail "-m $path: the world vocabulary beside it was not found: $(cat "$tmp/err")"
done
"$recur" convert "$tmp/tok/h2x16-f32.pth" "$tmp/tok-conv" > /dev/null 2> "$tmp/err" || { cat "$tmp/err" >&2; fail "recur convert with a tokenizer"; }
cmp -s "$tmp/tok/rwkv_vocab_v20230424.txt" "$tmp/tok-conv/rwkv_vocab_v20230424.txt" || fail "convert did not copy the world vocabulary beside the .pth"
echo "rwkv7_model_test: the world vocabulary beside a .pth is its tokenizer (file or folder), and convert copies it"

# recur quantize to q8 and q4: r, k, v, o, the FFN's key and value and the head; the LoRAs,
# lerps, k_k, k_a, r_k, norms and the embedding stay as stored.
dtypes() {  # name dtype per line of $1/model.safetensors
  /usr/bin/python3 -c 'import json, struct, sys; f = open(sys.argv[1], "rb"); n = struct.unpack("<Q", f.read(8))[0]
for k, v in sorted(json.loads(f.read(n)).items()):
    if k != "__metadata__": print(k, v["dtype"])' "$1/model.safetensors"
}
kQuantSanity=0.05
for name in h2x16-f32.pth h2x16-fla; do
 for type in q8 q4; do
  q="$tmp/$type-$name"
  "$recur" quantize "$fx/$name" "$q" --type "$type" > /dev/null 2> "$tmp/err" ||
    { cat "$tmp/err" >&2; fail "recur quantize $name --type $type"; }
  code=I8
  [[ $type == q4 ]] && code=U8
  dtypes "$q" > "$tmp/dtypes"
  quantized=$(awk -v c="$code" '$2 == c { print $1 }' "$tmp/dtypes" | sed 's/^\(blocks\|model\.layers\)\.[0-9]*\.//' | sort -u | tr '\n' ' ')
  case $name in
    *.pth) want="att.key.weight att.output.weight att.receptance.weight att.value.weight ffn.key.weight ffn.value.weight head.weight " ;;
    *) want="attn.k_proj.weight attn.o_proj.weight attn.r_proj.weight attn.v_proj.weight ffn.key.weight ffn.value.weight lm_head.weight " ;;
  esac
  [[ "$quantized" == "$want" ]] || fail "$name $type: the $code tensors are '$quantized', expected '$want'"
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
  echo "rwkv7_model_test: $name quantized $type ($code: $quantized): mean NLL $got (float $float, $(relative "$got" "$float") apart), the same digits at chunks 1, 7, 64, 300"
 done
done

# make-model --arch rwkv7 writes fla-hub's layout, which reads back (tied or not) and keeps its
# digits at every chunking.
for tie in "" --tie-embeddings; do
  "$recur" make-model "$tmp/made$tie" --arch rwkv7 --vocab 300 --hidden 64 --layers 3 --heads 2 \
    --lora-ranks 4,3,2,8 $tie > /dev/null 2> "$tmp/err" || { cat "$tmp/err" >&2; fail "make-model --arch rwkv7 $tie"; }
  grep -q '"decay_low_rank_dim": 4' "$tmp/made$tie/config.json" || fail "make-model's config lacks the ranks"
  made=$(score -m "$tmp/made$tie" --token-ids "$ids")
  for chunk in 1 64; do
    [[ "$(score -m "$tmp/made$tie" --token-ids "$ids" --chunk "$chunk" --threads 2)" == "$made" ]] ||
      fail "make-model --arch rwkv7 $tie: chunk $chunk gave other digits"
  done
done
if "$recur" make-model "$tmp/bad" --arch rwkv7 --hidden 64 --heads 3 > /dev/null 2> "$tmp/err"; then
  fail "make-model took 3 heads of a width 64"
fi
grep -q "multiple of 16" "$tmp/err" || fail "the refusal of --heads 3 does not say why: $(cat "$tmp/err")"
# Without its tokenizer, text is refused (bytes would be another model's ids), ids work.
if "$recur" generate -m "$tmp/made" -p "And God said" -n 2 > /dev/null 2> "$tmp/err"; then
  fail "text ran through an RWKV-7 model without its tokenizer"
fi
grep -q "rwkv_vocab_v20230424.txt" "$tmp/err" && grep -q -- "--tokenizer" "$tmp/err" ||
  fail "the missing tokenizer's error does not name the world vocabulary and --tokenizer: $(cat "$tmp/err")"
# A byte-level model (vocab 256) needs no file: its ids are the bytes.
"$recur" make-model "$tmp/bytes" --arch rwkv7 --vocab 256 --hidden 64 --layers 2 --heads 2 > /dev/null 2> "$tmp/err" ||
  { cat "$tmp/err" >&2; fail "make-model --arch rwkv7 --vocab 256"; }
"$recur" generate -m "$tmp/bytes" -p "And God said" -n 2 --greedy > /dev/null 2> "$tmp/err" ||
  fail "text was refused by a byte-level RWKV-7 model: $(tail -1 "$tmp/err")"
echo "rwkv7_model_test: make-model --arch rwkv7 writes a model that reads back, tied or not; without a tokenizer text is refused, but for a byte-level model"

# A head wider than its tokenizer (the world models: 65,536 rows, 65,530 ids): here 65,536 rows
# and the world vocabulary of tests/world (3,002 ids), the head's rows of real ids scaled down so
# that the padding rows hold the highest logits. generate never draws an id the tokenizer cannot decode, greedy or
# sampled, as text or as --ids; the control: without the tokenizer (ids in, ids out, nothing to
# mask) the greedy ids are padding rows.
"$recur" make-model "$tmp/wide" --arch rwkv7 --vocab 65536 --hidden 64 --layers 1 --heads 2 \
  --lora-ranks 4,3,2,8 > /dev/null 2> "$tmp/err" || { cat "$tmp/err" >&2; fail "make-model --vocab 65536"; }
python3 - "$tmp/wide/model.safetensors" 3002 <<'PY' || fail "could not scale the head's rows"
import array, json, struct, sys
path, real = sys.argv[1], int(sys.argv[2])
with open(path, "r+b") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    header = json.loads(f.read(n))
    head = header["lm_head.weight"]
    assert head["dtype"] == "F32", head
    rows, cols = head["shape"]
    start = 8 + n + head["data_offsets"][0]
    f.seek(start)
    v = array.array("f", f.read(real * cols * 4))
    f.seek(start)
    f.write(array.array("f", (x / 50 for x in v)).tobytes())
PY
mkdir "$tmp/wide-tok"
cp "$src/tests/world/rwkv_vocab_v20230424.txt" "$tmp/wide-tok/"
printf '1\n2\n3\n' > "$tmp/wide-prompt"
"$recur" generate -m "$tmp/wide" --prompt-ids "$tmp/wide-prompt" --greedy -n 8 --ids --ignore-eos > "$tmp/ids" 2> "$tmp/err" ||
  { cat "$tmp/err" >&2; fail "generate --ids without a tokenizer"; }
awk '$1 < 3002 { low = 1 } END { exit low }' "$tmp/ids" ||
  fail "the control: without a tokenizer, greedy ids of the scaled head below 3002: $(tr '\n' ' ' < "$tmp/ids")"
wide=(-m "$tmp/wide" --tokenizer "$tmp/wide-tok" --prompt-ids "$tmp/wide-prompt" --ignore-eos -n 24)
for sampling in "--greedy" "--temperature 1 --top-k 0 --top-p 1 --seed 3" "--temperature 2 --top-k 5 --seed 4"; do
  # shellcheck disable=SC2086
  "$recur" generate "${wide[@]}" $sampling --ids > "$tmp/ids" 2> "$tmp/err" ||
    fail "generate --ids $sampling with a head of 65,536 rows and a tokenizer of 3,002 ids: $(tail -1 "$tmp/err")"
  [[ $(wc -l < "$tmp/ids") == 24 ]] || fail "generate --ids $sampling gave $(wc -l < "$tmp/ids") ids"
  awk '$1 >= 3002 { past = 1 } END { exit past }' "$tmp/ids" ||
    fail "generate $sampling drew an id past the tokenizer's 3,002: $(tr '\n' ' ' < "$tmp/ids")"
  # shellcheck disable=SC2086
  "$recur" generate "${wide[@]}" $sampling > "$tmp/out" 2> "$tmp/err" ||
    fail "generate $sampling as text: $(tail -1 "$tmp/err")"
done
echo "rwkv7_model_test: a head of 65,536 rows never samples an id its 3,002-id tokenizer cannot decode (greedy and sampled, text and --ids)"

# The committed expectations are the reference's own numbers (where PyTorch is installed).
if /usr/bin/python3 -c 'import torch' 2> /dev/null; then
  /usr/bin/python3 "$fx/reference.py" --check-expected "$fx/expected.json" > /dev/null ||
    fail "reference.py no longer gives the committed expected.json"
  echo "rwkv7_model_test: reference.py recomputes every committed expectation"
else
  echo "rwkv7_model_test: no PyTorch (/usr/bin/python3 -c 'import torch'): the committed expectations are not recomputed"
fi
