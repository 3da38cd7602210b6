# tests/model_test.sh's data and own checks for flash-linear-attention's GLA, RetNet, HGRN2 and
# hybrid models (fla's config.json and tensor names, f32 and bf16):
# - the head takes its own format (--head), untied or tied: a tied embedding is the head's
#   matrix and is quantized with it.
tolerance=1e-5
fixtures=13
golden_states="gla-conv gla-hybrid hgrn2-hybrid retnet"
golden_made=("--arch gla --vocab 300 --hidden 32 --layers 3 --heads 4 --kv-heads 2 --short-conv --attn-layers 1 --attn-heads 4 --attn-kv-heads 2"
             "--arch hgrn2 --vocab 300 --hidden 32 --layers 3 --expand-ratio 8 --short-conv"
             "--arch retnet --hidden 32 --heads 2 --tie-embeddings --no-output-gate")
# q8 and q4: the projections (and the attention layers' q, k, v, o), the MLP and the head.
quantized="gla hgrn2 gla-hybrid" quant_chunks="1 64"
reference_expectations=expected_nll.txt

family_checks() {
  local name head_tensor
  for name in gla gla-nogate; do
    "$recur" quantize "$fx/$name" "$tmp/$name-q4h8" --type q4 --head q8 > /dev/null 2> "$tmp/err" ||
      { cat "$tmp/err" >&2; fail "recur quantize $name --type q4 --head q8"; }
    head_tensor=lm_head.weight
    [[ $name == gla-nogate ]] && head_tensor=model.embeddings.weight
    dtypes "$tmp/$name-q4h8" > "$tmp/dtypes"
    grep -qx "$head_tensor I8" "$tmp/dtypes" ||
      fail "$name --type q4 --head q8: $head_tensor is $(grep "^$head_tensor " "$tmp/dtypes"), not the head's q8 codes (I8)"
    grep -qx "model.layers.0.mlp.up_proj.weight U8" "$tmp/dtypes" || fail "$name --type q4 --head q8: the MLP is not q4"
    "$recur" score -m "$tmp/$name-q4h8" --token-ids "$ids" > /dev/null 2> "$tmp/err" ||
      { cat "$tmp/err" >&2; fail "recur score on $name --type q4 --head q8"; }
    grep -q "weights: q4 (head q8)" "$tmp/err" || fail "$name: the weights line is not 'q4 (head q8)': $(cat "$tmp/err")"
  done
  say "--head q8 quantizes the head of an untied and of a tied model in q8, the rest in q4"
}
