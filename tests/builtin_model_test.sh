#!/usr/bin/env bash
# The built-in model (models/kjv): recur's score of the held-out books agrees with the training
# script's own float64 PyTorch evaluation (eval.json, written by tools/train/train.py) to 1e-5
# relative, on the same number of tokens; and `recur generate` with no arguments runs it.
set -euo pipefail
recur="$1"
model="$2"
fail() { echo "FAIL: $*"; exit 1; }
[[ -f "$model/eval.json" && -f "$model/heldout.txt" ]] || fail "no eval.json or heldout.txt in $model"
ours=$("$recur" score -m "$model" -f "$model/heldout.txt" --json)
# JSON numbers with a few lines of awk: the two files' fields by name.
field() { grep -o "\"$2\": *[-0-9.eE+]*" <<< "$1" | head -1 | sed 's/.*: *//'; }
theirs=$(tr -d '\n' < "$model/eval.json")
for f in tokens predicted bytes; do
  [[ "$(field "$ours" $f)" == "$(field "$theirs" $f)" ]] || fail "$f: recur $(field "$ours" $f), script $(field "$theirs" $f)"
done
for f in mean_nll bits_per_byte; do
  a=$(field "$ours" $f) b=$(field "$theirs" $f)
  awk -v a="$a" -v b="$b" 'BEGIN { d = (a - b) / b; if (d < 0) d = -d; exit !(d <= 1e-5) }' ||
    fail "$f: recur $a, script $b (more than 1e-5 apart)"
  echo "$f: recur $a, script $b"
done
# Quantized (docs/quantization.md): q8 and q4 of the built-in model on a page of held-out text
# keep their bits per byte within 0.5% and 4% of the model as stored (the full held-out figures
# are in that doc).
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
head -c 8000 "$model/heldout.txt" > "$tmp/page.txt"
base=$(field "$("$recur" score -m "$model" -f "$tmp/page.txt" --json)" bits_per_byte)
for q in "q8 0.005" "q4 0.04"; do
  read -r type bound <<< "$q"
  "$recur" quantize "$model" "$tmp/$type" --type "$type" > /dev/null 2>&1
  got=$(field "$("$recur" score -m "$tmp/$type" -f "$tmp/page.txt" --json)" bits_per_byte)
  awk -v a="$got" -v b="$base" -v m="$bound" 'BEGIN { exit !((a - b) / b <= m) }' ||
    fail "$type: $got bits per byte on the page, more than $bound above $base"
  echo "$type: $got bits per byte on a page of held-out text ($base as stored)"
done
# The main job: the built-in model with no arguments.
out=$("$recur" generate -n 20 2> /dev/null)
[[ "$out" == "And it came to pass"* && ${#out} -gt 30 ]] || fail "generate with no arguments printed: $out"
echo "built-in model: 4 passed, 0 failed"
