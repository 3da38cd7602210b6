# tests/model_test.sh's data and own checks for the Gated DeltaNet models (Qwen3.5 multimodal and
# text-only, fla gated_deltanet with and without convolutions and gate, with its softmax layer,
# fla delta_net): quantize keeps A_log, dt_bias, the norms and the convolutions as stored.
tolerance=1e-5
fixtures=8
greedy=16
golden_states="qwen35-hybrid fla-gdn-plain"
golden_made=("--arch qwen35 --vocab 300 --hidden 32 --layers 4 --heads 2 --attn-kv-heads 1 --gdn-k-heads 2 --gdn-v-heads 4 --dtype bf16"
             "--arch gated_deltanet --vocab 300 --hidden 32 --layers 2 --heads 2 --gdn-v-heads 4 --allow-neg-eigval --tie-embeddings")
# A hybrid (its KV cache in the state) and a pure model.
saved="qwen35-hybrid fla-gdn-plain"
constant_state=qwen35-gdn
# qwen35-hybrid: one full-attention layer, 1 kv head of 32: 256 bytes a token.
growing_state="qwen35-hybrid 3000 256"
quantized="qwen35-hybrid fla-gdn"
made=("--vocab 300 --hidden 64 --layers 4 --arch qwen35 --heads 2 --attn-kv-heads 1 --gdn-k-heads 2 --gdn-v-heads 4" '"text_config"'
      "--vocab 300 --hidden 64 --layers 4 --arch qwen35 --heads 2 --text-only --tie-embeddings --gdn-head-dim 24" '"model_type": "qwen3_5_text"'
      "--vocab 300 --hidden 64 --layers 4 --arch gated_deltanet --heads 2 --gdn-v-heads 4 --allow-neg-eigval --gdn-no-conv" '"model_type": "gated_deltanet"')

# The projections and the head are quantized; A_log, dt_bias, the norms, the convolutions and
# the embedding stay float32.
quantized_checks() {  # NAME TYPE DIR
  dtypes "$3" > "$tmp/dtypes"
  local kept n_float code=I8 n_quant
  kept=$(grep -E '(A_log|dt_bias|conv1d\.weight|norm\.weight|embed_tokens\.weight|embeddings\.weight) ' "$tmp/dtypes" | awk '$2 != "F32"' || true)
  [[ -z "$kept" ]] || fail "$1 $2: quantized what must stay float: $kept"
  n_float=$(grep -cE '(A_log|dt_bias|conv1d\.weight|norm\.weight) F32$' "$tmp/dtypes")
  ((n_float > 0)) || fail "$1 $2: no A_log, dt_bias, conv or norm found in the file"
  [[ $2 == q4 ]] && code=U8
  n_quant=$(awk -v c="$code" '$2 == c' "$tmp/dtypes" | wc -l)
  ((n_quant > 0)) || fail "$1 $2: nothing was quantized"
  say "$1 $2: $n_quant $code matrices; $n_float A_log, dt_bias, conv and norm tensors kept F32"
}
