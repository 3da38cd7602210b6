# tests/model_test.sh's data and own checks for Mamba-2 (transformers' mamba2 layout with one,
# two and four groups, biases, clamps, bf16; state-spaces' mamba_ssm layout with the norm before
# the gate) and Granite 4.0(-H) (granitemoehybrid): quantize keeps A_log, dt_bias, D, the norms
# and the convolution as stored; convert keeps the digits.
tolerance=1e-6
fixtures=6
greedy=8
golden_states="mamba2-groups granite-hybrid"
golden_made=("--arch mamba2 --vocab 300 --hidden 32 --layers 2 --ssm-groups 2 --ssm-dt-max 0.08 --dtype bf16"
             "--arch granitemoehybrid --vocab 300 --hidden 32 --heads 4 --attn-kv-heads 2 --layer-types MAMA --multipliers")
saved="mamba2-groups mamba-ssm granite-hybrid"
constant_state=mamba2-plain
# granite-hybrid: two attention layers of 2 kv heads of 16: 512 bytes a token.
growing_state="granite-hybrid 3000 512"
quantized="mamba2-groups mamba-ssm granite-hybrid" quant_chunks="7 300" quant_threads=2
made=("--vocab 300 --hidden 32 --layers 2 --arch mamba2 --ssm-groups 2 --ssm-dt-max 0.08 --ssm-bias" '"model_type": "mamba2"'
      "--vocab 300 --hidden 32 --layers 2 --arch mamba2 --mamba-ssm-layout --norm-before-gate --tie-embeddings" '"ssm_cfg"'
      "--vocab 300 --hidden 32 --layers 2 --arch granitemoehybrid --heads 4 --attn-kv-heads 2 --layer-types MAMA --multipliers" '"model_type": "granitemoehybrid"'
      "--vocab 300 --hidden 32 --layers 2 --arch granitemoehybrid --heads 4 --layer-types AA --rope --tie-embeddings" '"model_type": "granitemoehybrid"')

# The projections and the head are quantized; A_log, dt_bias, D, the convolution and the norms
# stay float32.
quantized_checks() {  # NAME TYPE DIR
  dtypes "$3" > "$tmp/dtypes"
  local kept
  kept=$(grep -E '(A_log|dt_bias|mixer\.D|conv1d\.(weight|bias)|norm\.weight|norm_f\.weight) ' "$tmp/dtypes" | awk '$2 != "F32"' || true)
  [[ -z "$kept" ]] || fail "$1 $2: quantized what must stay float: $kept"
  grep -qE 'in_proj\.weight (I8|U8)$' "$tmp/dtypes" || fail "$1 $2: in_proj was not quantized"
}

family_checks() {
  local name
  for name in $quantized; do
    "$recur" convert "$fx/$name" "$tmp/conv-$name" > /dev/null 2> "$tmp/err" ||
      { cat "$tmp/err" >&2; fail "recur convert $name"; }
    [[ "$(nll "$(score -m "$tmp/conv-$name" --token-ids "$ids")")" == "${got_nll[$name]}" ]] ||
      fail "$name: converted, it scores otherwise"
  done
  say "recur convert of $quantized keeps the digits"
}
