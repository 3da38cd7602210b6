#!/usr/bin/env bash
# Based (HazyResearch's published layout) through the recur binary:
# - recur score on the committed random-weight checkpoints (tests/based: pytorch_model.bin as the
#   hub publishes it, and safetensors) within 1e-5 relative of the float64 reference
#   (tests/based/reference.py, PyTorch) that wrote expected_nll.txt;
# - the same 17 digits at every chunk size and thread count, under every instruction set, from
#   the .bin and from safetensors, and after `recur convert`;
# - a state saved from the .bin model continues in the converted one bit for bit;
# - a model without a tokenizer takes ids, and says --tokenizer for text; padding ids refused.
#
#   tests/based_model_test.sh RECUR SOURCE_DIR
set -euo pipefail
recur="$1" src="$2"
based="$src/tests/based"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAILED: $*" >&2; exit 1; }
ids="$based/prompt_ids.txt"
score() { "$recur" score --json "$@" 2> "$tmp/err" || { cat "$tmp/err" >&2; fail "recur score $*"; }; }
nll() { sed 's/.*"mean_nll": \([^,]*\),.*/\1/' <<< "$1"; }

while read -r name want; do
  dir="$based/$name"
  got_json=$(score -m "$dir" --token-ids "$ids")
  got=$(nll "$got_json")
  awk -v a="$got" -v b="$want" 'BEGIN { d = (a - b) / b; if (d < 0) d = -d; exit !(d < 1e-5) }' ||
    fail "$name: recur's mean NLL $got, the float64 reference's $want (more than 1e-5 apart)"
  rel=$(awk -v a="$got" -v b="$want" 'BEGIN { d = (a - b) / b; printf "%.2g", d < 0 ? -d : d }')
  echo "based_model_test: $name: mean NLL $got, reference $want, relative difference $rel"
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
  echo "based_model_test: $name: the same digits at chunks 1, 7, 64, 300, threads 1-3 and under $("$recur" isa --available | tr '\n' ' ')"
done < "$based/expected_nll.txt"

# The .bin alone, the safetensors alone, and the .bin converted: one model.
mkdir "$tmp/bin" "$tmp/st"
cp "$based/tiny/config.json" "$based/tiny/pytorch_model.bin" "$tmp/bin/"
cp "$based/tiny/config.json" "$based/tiny/model.safetensors" "$tmp/st/"
from_bin=$(score -m "$tmp/bin" --token-ids "$ids")
[[ "$(score -m "$tmp/st" --token-ids "$ids")" == "$from_bin" ]] || fail "the .bin and the safetensors disagree"
"$recur" convert "$tmp/bin" "$tmp/converted" > /dev/null || fail "recur convert"
[[ -f "$tmp/converted/model.safetensors" && -f "$tmp/converted/config.json" ]] || fail "convert wrote no model"
[[ "$(score -m "$tmp/converted" --token-ids "$ids")" == "$from_bin" ]] || fail "the converted model disagrees"
if "$recur" convert "$tmp/bin" "$tmp/converted" 2> "$tmp/err"; then fail "convert replaced a model without --force"; fi
grep -q -- "--force" "$tmp/err" || fail "convert's refusal does not say --force: $(cat "$tmp/err")"
echo "based_model_test: pytorch_model.bin, model.safetensors and recur convert's output give the same digits"

# A safetensors file converted from the Lightning checkpoint keeps the trainer's int64 metric
# counters; like the .bin's, they are left out, and the model is the same one.
mkdir "$tmp/metrics"
cp "$based/tiny/config.json" "$tmp/metrics/"
/usr/bin/python3 - "$based/tiny/model.safetensors" "$tmp/metrics/model.safetensors" <<'PY'
import json, struct, sys
data = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", data[:8])[0]
header, body = json.loads(data[8:8 + n]), data[8 + n:]
extra = b""
for name, count in (("train_metrics.perplexity.count", 3), ("val_metrics.num_tokens.total", 7)):
    header[name] = {"dtype": "I64", "shape": [], "data_offsets": [len(body) + len(extra), len(body) + len(extra) + 8]}
    extra += struct.pack("<q", count)
text = json.dumps(header).encode()
open(sys.argv[2], "wb").write(struct.pack("<Q", len(text)) + text + body + extra)
PY
[[ "$(score -m "$tmp/metrics" --token-ids "$ids")" == "$from_bin" ]] ||
  fail "the safetensors with the trainer's I64 counters is not the .bin's model"
echo "based_model_test: the trainer's int64 metric counters are left out of safetensors as of the .bin"

# A state saved from the .bin continues in the converted model (the same fingerprint).
head -n 40 "$ids" > "$tmp/p.txt"
"$recur" generate -m "$tmp/bin" --prompt-ids "$tmp/p.txt" --ids --greedy -n 12 --ignore-eos 2> /dev/null > "$tmp/whole"
"$recur" generate -m "$tmp/bin" --prompt-ids "$tmp/p.txt" --ids --greedy -n 5 --ignore-eos --save-state "$tmp/s" 2> /dev/null > "$tmp/a"
"$recur" generate -m "$tmp/converted" --load-state "$tmp/s" --ids --greedy -n 7 --ignore-eos 2> /dev/null > "$tmp/b"
[[ "$(cat "$tmp/a" "$tmp/b")" == "$(cat "$tmp/whole")" ]] ||
  fail "save in the .bin model and load in the converted one: $(cat "$tmp/a" "$tmp/b" | tr '\n' ' ') against $(tr '\n' ' ' < "$tmp/whole")"
echo "based_model_test: a state saved from the .bin model continues in the converted model"

# No tokenizer: ids only, and text asks for --tokenizer; with one, text works.
if "$recur" generate -m "$tmp/bin" -p "And God said" -n 3 2> "$tmp/err" > /dev/null; then fail "text ran without a tokenizer"; fi
grep -q -- "--tokenizer" "$tmp/err" || fail "the missing tokenizer's error does not name --tokenizer: $(cat "$tmp/err")"
"$recur" generate -m "$tmp/bin" --tokenizer "$src/models/kjv" -p "And God said" -n 8 --greedy 2> /dev/null > "$tmp/text" ||
  fail "generate with --tokenizer"
[[ -s "$tmp/text" ]] || fail "generate with --tokenizer wrote nothing"
# vocab_size 4093 with 4096 embedding rows: the padding rows are no token.
printf '1\n4094\n' > "$tmp/pad.txt"
if "$recur" score -m "$tmp/bin" --token-ids "$tmp/pad.txt" 2> "$tmp/err" > /dev/null; then fail "a padding id was scored"; fi
grep -q "4094" "$tmp/err" || fail "the padding id's error does not name it: $(cat "$tmp/err")"
echo "based_model_test: ids without a tokenizer, text with --tokenizer, padding ids refused"

# make-model writes the published layout, which reads back.
"$recur" make-model "$tmp/made" --arch based --vocab 500 --hidden 32 --layers 4 --heads 2 \
  --la-layers 1 --window-layers 2 --feature-dim 4 --window-size 8 > /dev/null || fail "make-model --arch based"
grep -q '"alt_mixer_layers": \[1\]' "$tmp/made/config.json" || fail "make-model's config lacks alt_mixer_layers"
printf '%s\n' 5 17 3 99 250 7 1 2 3 4 5 6 7 8 9 10 11 12 > "$tmp/ids2.txt"
[[ "$(score -m "$tmp/made" --token-ids "$tmp/ids2.txt" --chunk 1)" == "$(score -m "$tmp/made" --token-ids "$tmp/ids2.txt" --chunk 5 --threads 2)" ]] ||
  fail "make-model's Based model: chunk 1 and chunk 5 disagree"
echo "based_model_test: make-model --arch based writes a model that reads back"
