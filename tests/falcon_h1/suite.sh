# tests/model_test.sh's data and own checks for Falcon-H1 (transformers' falcon_h1 layout
# without the gated norm, with it before and after the gate, every multiplier, biases, bf16).
# Its prompt is tests/mamba2's. quantize keeps A_log, dt_bias, D, the norms and the convolution
# as stored; convert keeps the digits (tests/mamba2's family_checks).
# shellcheck source=../mamba2/suite.sh
source "$src/tests/mamba2/suite.sh"
ids="$src/tests/mamba2/prompt_ids.txt"
tolerance=1e-6
fixtures=3
greedy=8
golden_states="falcon-h1"
golden_made=("--arch falcon_h1 --vocab 300 --hidden 32 --heads 4 --attn-kv-heads 2 --ssm-groups 2 --ssm-rms-norm --multipliers --dtype bf16")
saved="falcon-h1 falcon-h1-norm"
# falcon-h1: attention in both layers, a key and a value of 2 kv heads of 8 floats: 256 bytes a token.
constant_state="" growing_state="falcon-h1 3000 256"
quantized="falcon-h1 falcon-h1-norm falcon-h1-after-gate" quant_chunks="7 300" quant_threads=2
made=("--vocab 300 --hidden 32 --layers 2 --arch falcon_h1 --heads 4 --attn-kv-heads 2 --ssm-groups 2 --ssm-rms-norm --multipliers" '"model_type": "falcon_h1"'
      "--vocab 300 --hidden 32 --layers 2 --arch falcon_h1 --heads 2 --ssm-heads 3 --ssm-head-dim 16 --tie-embeddings" '"model_type": "falcon_h1"')

# The projections and the head are quantized; A_log, dt_bias, D, the convolution and the norms
# stay as stored (float32, or bfloat16 in falcon-h1-norm).
quantized_checks() {  # NAME TYPE DIR
  dtypes "$3" > "$tmp/dtypes"
  dtypes "$fx/$1" > "$tmp/stored"
  local kept
  kept=$(grep -E '(A_log|dt_bias|mamba\.D|conv1d\.(weight|bias)|norm\.weight|layernorm\.weight) ' "$tmp/dtypes" || true)
  [[ -n "$kept" ]] || fail "$1 $2: no A_log, dt_bias, D, convolution or norm found in the file"
  kept=$(grep -vxF -f "$tmp/stored" <<< "$kept" || true)
  [[ -z "$kept" ]] || fail "$1 $2: changed what must stay as stored: $kept"
  grep -qE 'in_proj\.weight (I8|U8)$' "$tmp/dtypes" || fail "$1 $2: in_proj was not quantized"
}
