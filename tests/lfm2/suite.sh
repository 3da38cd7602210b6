# tests/model_test.sh's data and own checks for LFM2 and LFM2.5 (both config forms, the
# options): a state saved after fewer ids than the convolution's taps continues; quantize keeps
# the convolutions and norms as stored (float32 or bfloat16).
tolerance=1e-6
fixtures=3
chunks="1 7 300" threads="1 2"
greedy=16
golden_states="lfm2.5-later"
golden_made=("--arch lfm2 --vocab 300 --hidden 32 --layers 4 --heads 4 --attn-kv-heads 2 --conv-taps 4 --conv-bias --dtype bf16"
             "--arch lfm2 --vocab 300 --hidden 32 --layers 3 --heads 2 --first-form --tie-embeddings")
# lfm2.5-later's convolutions have 4 taps: a state saved after 2 ids holds fewer.
saved="lfm2.5-later" saved_prompts="2 40"
quantized="lfm2-first lfm2.5-later" quant_chunks="7 300" quant_threads=2
made=("--arch lfm2 --vocab 256 --hidden 64 --layers 4 --heads 4 --attn-kv-heads 2 --conv-taps 4 --conv-bias" '"layer_types"'
      "--arch lfm2 --vocab 256 --hidden 64 --layers 4 --heads 4 --attn-kv-heads 2 --conv-taps 4 --conv-bias --first-form" '"full_attn_idxs"')

# The projections, the MLP and the head are quantized; the convolutions' taps and the norms stay
# as stored.
quantized_checks() {  # NAME TYPE DIR
  dtypes "$3" > "$tmp/dtypes"
  dtypes "$fx/$1" > "$tmp/stored"
  local kept changed code=I8 n_quant
  kept=$(grep -E '(conv\.conv\.(weight|bias)|norm\.weight|layernorm\.weight) ' "$tmp/dtypes" || true)
  [[ -n "$kept" ]] || fail "$1 $2: no convolution or norm found in the file"
  changed=$(grep -vxF -f "$tmp/stored" <<< "$kept" || true)
  [[ -z "$changed" ]] || fail "$1 $2: changed what must stay as stored: $changed"
  [[ $2 == q4 ]] && code=U8
  n_quant=$(awk -v c="$code" '$2 == c' "$tmp/dtypes" | wc -l)
  ((n_quant > 0)) || fail "$1 $2: nothing was quantized"
  say "$1 $2: $n_quant $code matrices, convolutions and norms as stored"
}
