#!/usr/bin/env bash
# Golden outputs of every model family and weight format: the bytes recur gives today, pinned so
# that a change to the model layer that is meant to change nothing is checked to change nothing.
#
#   tests/golden/golden.sh RECUR SOURCE_DIR            compare with tests/golden/expected.txt
#   tests/golden/golden.sh RECUR SOURCE_DIR --write    write expected.txt and the saved states
#
# For each model (the fixtures of tests/golden/models, tests/fla, tests/based, tests/rwkv7,
# tests/gdn, tests/lfm2, tests/mamba2 and tests/nemotron_h):
# - `score --json` on 120 ids: the tokens, the mean NLL's 17 digits, the bits;
# - 12 greedy ids after a 40-id prompt, and the SHA-256 of the state saved after them (the
#   state's bytes, the model's fingerprint in its header, the tokens and the sampler's state);
# - for the models of tests/golden/states: the state committed there, written by the binary of
#   the day the goldens were taken, loaded and continued for 8 greedy ids, and the SHA-256 of
#   the state saved after them. An old state must keep loading and continue bit for bit.
# - make-model's files (config.json and the random weights) for a model of every family.
# Any difference fails, naming the model and the line.
set -euo pipefail
recur="$1" src="$2" mode="${3:-}"
here="$src/tests/golden"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAILED: $*" >&2; exit 1; }
run() { "$recur" "$@" 2> "$tmp/err" || { cat "$tmp/err" >&2; fail "recur $*"; }; }
sha() { sha256sum "$1" | cut -c1-64; }

ids="$src/tests/fla/prompt_ids.txt"
head -n 120 "$ids" > "$tmp/score_ids"
head -n 40 "$ids" > "$tmp/prompt_ids"
sed -n '41,44p' "$ids" > "$tmp/more_ids"

# name and directory of every model pinned.
models=()
for d in "$here"/models/*/; do models+=("$(basename "$d") $d"); done
for d in "$src"/tests/fla/*/; do [[ -f "$d/config.json" ]] && models+=("fla-$(basename "$d") $d"); done
for name in tiny tiny-bf16; do models+=("based-$name $src/tests/based/$name"); done
# RWKV-7: BlinkDL's .pth (f32, bf16, f16, layer 0's v0/v1/v2) and fla-hub's folders (both layouts).
for name in h2x16-f32.pth h2x16-bf16.pth h2x16-f16.pth h1x64-bf16.pth h2x16-fla h1x64-fla-bf16 h2x16-fla-xx-bf16; do
  models+=("rwkv7-$name $src/tests/rwkv7/$name")
done
# Gated DeltaNet: Qwen3.5 (multimodal f32, tied bf16, text-only), fla's gated_deltanet and delta_net.
for d in "$src"/tests/gdn/*/; do [[ -f "$d/config.json" ]] && models+=("gdn-$(basename "$d") $d"); done
# Mamba-2: transformers' mamba2 layout and mamba_ssm's; Granite 4.0(-H) (granitemoehybrid).
for d in "$src"/tests/mamba2/*/; do [[ -f "$d/config.json" ]] && models+=("mamba2-$(basename "$d") $d"); done
# LFM2: both config forms (f32 tied, bf16 untied with conv biases), the aliases.
for d in "$src"/tests/lfm2/*/; do [[ -f "$d/config.json" ]] && models+=("lfm2-$(basename "$d") $d"); done
# Nemotron-H: Mamba-2, attention and MLP blocks (f32 untied; bf16 tied with biases).
for d in "$src"/tests/nemotron_h/*/; do [[ -f "$d/config.json" ]] && models+=("nemotron_h-$(basename "$d") $d"); done
# The models whose states are committed (tests/golden/states/NAME.state).
keep=" la-elu la-gqa-norm tar-gelu la-q4 fla-gla-conv fla-gla-hybrid fla-hgrn2-hybrid fla-retnet based-tiny rwkv7-h2x16-f32.pth rwkv7-h1x64-fla-bf16 gdn-qwen35-hybrid gdn-fla-gdn-plain mamba2-mamba2-groups mamba2-granite-hybrid lfm2-lfm2.5-later nemotron_h-nemotron-h-hybrid "

out="$tmp/expected.txt"
: > "$out"
# make-model's random weights and config.json, for every family: the files' SHA-256.
i=0
while read -r args; do
  i=$((i + 1))
  # shellcheck disable=SC2086
  run make-model "$tmp/made$i" $args > /dev/null
  echo "make-model $i $args: $(cat "$tmp/made$i"/config.json "$tmp/made$i"/model.safetensors | sha256sum | cut -c1-64)" >> "$out"
done <<'ARGS'
--feature-map hedgehog --normalized --kv-heads 2 --dtype bf16
--feature-map elementwise_product --tie-feature-maps --no-affine
--feature-map t2r --tie-embeddings
--feature-map dpfp --dtype f16
--arch transformers_are_rnns --hidden-act gelu
--arch based --vocab 300 --hidden 32 --layers 5 --heads 2 --la-layers 1,3 --window-layers 2
--arch gla --vocab 300 --hidden 32 --layers 3 --heads 4 --kv-heads 2 --short-conv --attn-layers 1 --attn-heads 4 --attn-kv-heads 2
--arch hgrn2 --vocab 300 --hidden 32 --layers 3 --expand-ratio 8 --short-conv
--arch retnet --hidden 32 --heads 2 --tie-embeddings --no-output-gate
--builtin
--arch rwkv7 --vocab 300 --hidden 32 --layers 2 --heads 2 --lora-ranks 4,3,2,8 --dtype bf16
--arch qwen35 --vocab 300 --hidden 32 --layers 4 --heads 2 --attn-kv-heads 1 --gdn-k-heads 2 --gdn-v-heads 4 --dtype bf16
--arch gated_deltanet --vocab 300 --hidden 32 --layers 2 --heads 2 --gdn-v-heads 4 --allow-neg-eigval --tie-embeddings
--arch mamba2 --vocab 300 --hidden 32 --layers 2 --ssm-groups 2 --ssm-dt-max 0.08 --dtype bf16
--arch granitemoehybrid --vocab 300 --hidden 32 --heads 4 --attn-kv-heads 2 --layer-types MAMA --multipliers
--arch lfm2 --vocab 300 --hidden 32 --layers 4 --heads 4 --attn-kv-heads 2 --conv-taps 4 --conv-bias --dtype bf16
--arch lfm2 --vocab 300 --hidden 32 --layers 3 --heads 2 --first-form --tie-embeddings
--arch nemotron_h --vocab 300 --hidden 32 --heads 4 --attn-kv-heads 2 --pattern M-*M- --ssm-groups 2 --dtype bf16
ARGS
for entry in "${models[@]}"; do
  read -r name dir <<< "$entry"
  json=$(run score --json -m "$dir" --token-ids "$tmp/score_ids" --chunk 7 --threads 2)
  echo "$name score $json" >> "$out"
  gen=$(run generate -m "$dir" --prompt-ids "$tmp/prompt_ids" --greedy -n 12 --ids \
        --chunk 16 --save-state "$tmp/$name.state" | tr '\n' ' ')
  echo "$name greedy $gen" >> "$out"
  echo "$name state $(sha "$tmp/$name.state")" >> "$out"
  if [[ "$keep" == *" $name "* ]]; then
    [[ "$mode" == --write ]] && cp "$tmp/$name.state" "$here/states/$name.state"
    [[ -f "$here/states/$name.state" ]] || fail "$name: no committed state tests/golden/states/$name.state"
    cont=$(run generate -m "$dir" --load-state "$here/states/$name.state" \
           --prompt-ids "$tmp/more_ids" --greedy -n 8 --ids --save-state "$tmp/$name.next" | tr '\n' ' ')
    echo "$name continued $cont" >> "$out"
    echo "$name continued-state $(sha "$tmp/$name.next")" >> "$out"
  fi
done

if [[ "$mode" == --write ]]; then
  cp "$out" "$here/expected.txt"
  echo "golden: wrote $here/expected.txt ($(wc -l < "$out") lines) and the states"
  exit 0
fi
if ! diff -u "$here/expected.txt" "$out" > "$tmp/diff"; then
  cat "$tmp/diff" >&2
  fail "the outputs above differ from tests/golden/expected.txt (- committed, + now)"
fi
echo "golden: $(wc -l < "$out") lines identical to tests/golden/expected.txt (${#models[@]} models)"
