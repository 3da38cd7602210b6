#!/usr/bin/env bash
# Golden outputs of every model family and weight format: the bytes recur gives today, pinned so
# that a change to the model layer that is meant to change nothing is checked to change nothing.
#
#   tests/golden/golden.sh RECUR SOURCE_DIR            compare with tests/golden/expected.txt
#   tests/golden/golden.sh RECUR SOURCE_DIR --write    write expected.txt and the saved states
#
# For each model (the fixtures of tests/golden/models, and those each family's
# tests/FAMILY/suite.sh names):
# - `score --json` on 120 ids: the tokens, the mean NLL's 17 digits, the bits;
# - 12 greedy ids after a 40-id prompt, and the SHA-256 of the state saved after them (the
#   state's bytes, the model's fingerprint in its header, the tokens and the sampler's state);
# - for the models of tests/golden/states: the state committed there, written by the binary of
#   the day the goldens were taken, loaded and continued for 8 greedy ids, and the SHA-256 of
#   the state saved after them. An old state must keep loading and continue bit for bit.
# - make-model's files (config.json and the random weights) for a model of every family; every
#   --arch of the registry must have one.
# Any difference fails, naming the model and the line. The lines are compared sorted.
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

# family_data FAMILY: what tests/FAMILY/suite.sh pins, a line each: "model NAME" (its
# golden_models; by default every fixture of its expected_nll.txt), "state NAME" (golden_states:
# the fixtures whose states are committed) and "made ARGS" (golden_made: make-model's arguments).
family_data() (
  golden_models=$(cut -d' ' -f1 "$src/tests/$1/expected_nll.txt") golden_states="" golden_made=()
  # shellcheck source=/dev/null
  source "$src/tests/$1/suite.sh"
  printf 'model %s\n' $golden_models
  [[ -z $golden_states ]] || printf 'state %s\n' $golden_states
  ((${#golden_made[@]} == 0)) || printf 'made %s\n' "${golden_made[@]}"
)

# name and directory of every model pinned: tests/golden/models (linear attention in each form,
# the paper's model, quantized models of several families) and the fixtures each family's
# suite.sh names, as FAMILY-NAME. The models whose states are committed
# (tests/golden/states/NAME.state) and make-model's arguments, likewise.
models=()
for d in "$here"/models/*/; do models+=("$(basename "$d") $d"); done
keep=" la-elu la-gqa-norm tar-gelu la-q4 "
made=("--feature-map hedgehog --normalized --kv-heads 2 --dtype bf16"
      "--feature-map elementwise_product --tie-feature-maps --no-affine"
      "--feature-map t2r --tie-embeddings"
      "--feature-map dpfp --dtype f16"
      "--arch transformers_are_rnns --hidden-act gelu"
      "--builtin")
for suite in "$src"/tests/*/suite.sh; do
  family=$(basename "$(dirname "$suite")")
  while read -r kind what; do
    case $kind in
      model) models+=("$family-$what $src/tests/$family/$what") ;;
      state) keep+="$family-$what " ;;
      made) made+=("$what") ;;
    esac
  done < <(family_data "$family")
done
# Every --arch the registry knows (make-model's refusal lists them) has its make-model line: a
# family is pinned by adding its suite.sh.
archs=$({ "$recur" make-model "$tmp/none" --arch "?" 2>&1 || true; } | sed -n 's/.*expected //p' | tr -d ',')
[[ -n $archs ]] || fail "make-model --arch ? did not list the registry's architectures"
for arch in $archs; do
  [[ $arch == linear_attn || " ${made[*]} " == *" --arch $arch "* ]] ||
    fail "--arch $arch: no make-model line pins it (its family's tests/FAMILY/suite.sh, golden_made)"
done

out="$tmp/expected.txt"
: > "$out"
# make-model's random weights and config.json, for every family: the files' SHA-256.
for args in "${made[@]}"; do
  read -ra argv <<< "$args"  # split on spaces, never globbed (nemotron_h's --pattern M-*M-)
  run make-model "$tmp/made" "${argv[@]}" > /dev/null
  echo "make-model $args: $(cat "$tmp/made"/config.json "$tmp/made"/model.safetensors | sha256sum | cut -c1-64)" >> "$out"
  rm -rf "$tmp/made"
done
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

# The lines in one order, whatever the order of the families' folders.
LC_ALL=C sort -o "$out" "$out"
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
