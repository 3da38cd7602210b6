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
# The main job: the built-in model with no arguments.
out=$("$recur" generate -n 20 2> /dev/null)
[[ "$out" == "And it came to pass"* && ${#out} -gt 30 ]] || fail "generate with no arguments printed: $out"
echo "built-in model: 2 passed, 0 failed"
