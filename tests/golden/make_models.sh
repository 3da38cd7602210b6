#!/usr/bin/env bash
# Writes the golden fixtures of tests/golden/models with `recur make-model` and `recur quantize`:
# the layouts and formats that tests/fla and tests/based do not already cover. Run once, with
# the binary whose bytes are pinned; the files are committed, so a later change to make-model's
# random weights or to quantize leaves the goldens as they are.
#
#   tests/golden/make_models.sh RECUR
set -euo pipefail
recur="$1"
out="$(cd "$(dirname "$0")" && pwd)/models"
rm -rf "$out"
mkdir -p "$out"
small=(--vocab 256 --hidden 32 --layers 2 --heads 2 --intermediate 64)
make() { local name="$1"; shift; "$recur" make-model "$out/$name" "$@" > /dev/null; }
for map in elu relu identity hedgehog t2r dpfp elementwise_product; do
  make "la-$map" --arch linear_attn --feature-map "$map" "${small[@]}" --seed 3
done
# Grouped kv heads, the normalized form with norm_q and norm_k, one map for q and k, expand_k.
make la-gqa-norm --arch linear_attn --feature-map hedgehog --vocab 256 --hidden 32 --layers 2 \
  --heads 4 --kv-heads 2 --expand-k 2 --intermediate 64 --normalized --norm-q --norm-k \
  --tie-feature-maps --seed 4
# bf16 weights, tied embeddings, an output norm without weight.
make la-bf16 --arch linear_attn --feature-map elu "${small[@]}" --dtype bf16 --tie-embeddings \
  --no-affine --seed 5
make tar-relu --arch transformers_are_rnns --feature-map elu --hidden-act relu "${small[@]}" --seed 6
make tar-gelu --arch transformers_are_rnns --feature-map relu --hidden-act gelu "${small[@]}" --seed 7
# Quantized weights: the projections and the MLP in q8 or q4, the head in its own format.
quant() { "$recur" quantize "$1" "$out/$2" --type "$3" "${@:4}" > /dev/null 2>&1; }
quant "$out/la-elu" la-q8 q8
quant "$out/la-elu" la-q4 q4 --head q8
src="$(dirname "$0")/.."
quant "$src/fla/gla-hybrid" gla-q8 q8
quant "$src/fla/hgrn2" hgrn2-q4 q4
quant "$src/based/tiny" based-q8 q8
du -sh "$out"
