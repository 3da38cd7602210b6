#!/usr/bin/env bash
# tools/quant_reader.py (numpy alone) against recur's own dequantization: every quantized tensor
# of a q8 and a q4 model, byte for byte; and the float tensors as they are.
#   tests/quant_reader_test.sh RECUR DEQUANTIZE_TOOL PYTHON
set -euo pipefail
recur="$1" tool="$2" python="$3"
here=$(cd "$(dirname "$0")/.." && pwd)
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
# Tied embeddings (the head is the embedding, quantized) and an MLP width of 80, not a multiple
# of 32: the down projection stays f32.
"$recur" make-model "$dir/m" --hidden 64 --vocab 320 --intermediate 80 --tie-embeddings \
  --feature-map hedgehog > /dev/null
checks=0
for type in q8 q4; do
  "$recur" quantize "$dir/m" "$dir/$type" --type "$type" > /dev/null 2>&1
  list=$("$python" "$here/tools/quant_reader.py" "$dir/$type")
  quantized=$(grep -c ": $type, " <<< "$list" || true)
  [[ "$quantized" -eq 13 ]] || fail "$type: the reader lists $quantized quantized tensors, expected 13: $list"
  grep -q "down_proj.weight: F32 (64, 80)" <<< "$list" || fail "$type: down_proj is not kept as F32: $list"
  while read -r name; do
    "$python" "$here/tools/quant_reader.py" "$dir/$type" "$name" --out "$dir/py.f32"
    "$tool" "$dir/$type" "$name" "$dir/recur.f32"
    cmp -s "$dir/py.f32" "$dir/recur.f32" || fail "$type: $name differs between the reader and recur"
    checks=$((checks + 1))
  done < <(grep ": $type, " <<< "$list" | sed 's/:.*//')
  # A float tensor reads back as the original model's.
  "$python" "$here/tools/quant_reader.py" "$dir/$type" model.norm.weight --out "$dir/a.f32"
  "$python" "$here/tools/quant_reader.py" "$dir/m" model.norm.weight --out "$dir/b.f32"
  cmp -s "$dir/a.f32" "$dir/b.f32" || fail "$type: model.norm.weight changed"
  checks=$((checks + 1))
done
echo "$checks passed, 0 failed"
