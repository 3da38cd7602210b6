# tests/model_test.sh's data and own checks for RWKV-7 (BlinkDL's .pth in f32, bf16 and f16,
# given as a file or as a folder holding it; fla-hub's folders, including fla's first layout
# with attn.x_x):
# - a folder holding one .pth and no config.json reads as the .pth;
# - the .pth and the fla folder of one model agree where the reference says they do;
# - recur convert of a .pth writes a folder that scores the same digits, and a state saved from
#   the .pth continues in it; the world vocabulary beside a .pth is its tokenizer, and convert
#   copies it;
# - recur quantize to q8 and q4 quantizes only the big matrices;
# - without its tokenizer text is refused, but for a byte-level model; a head wider than its
#   tokenizer never samples an id the tokenizer cannot decode.
tolerance=1e-5
fixtures=7
# The reference's smallest top-2 margin among its 16 greedy ids is 0.0046, far above float32's
# error in the logits.
greedy=16 greedy_key=greedy
golden_states="h2x16-f32.pth h1x64-fla-bf16"
golden_made=("--arch rwkv7 --vocab 300 --hidden 32 --layers 2 --heads 2 --lora-ranks 4,3,2,8 --dtype bf16")
saved=h2x16-f32.pth
constant_state=h2x16-f32.pth
quantized="h2x16-f32.pth h2x16-fla"
made=("--arch rwkv7 --vocab 300 --hidden 64 --layers 3 --heads 2 --lora-ranks 4,3,2,8" '"decay_low_rank_dim": 4'
      "--arch rwkv7 --vocab 300 --hidden 64 --layers 3 --heads 2 --lora-ranks 4,3,2,8 --tie-embeddings" '"decay_low_rank_dim": 4')
reference_expectations=expected.json

fixture_checks() {  # NAME PATH JSON: a folder holding the .pth alone (no config.json) is the same
  [[ $1 == *.pth ]] || return 0
  mkdir "$tmp/dir-$1"
  cp "$2" "$tmp/dir-$1/"
  [[ "$(score -m "$tmp/dir-$1" --token-ids "$ids")" == "$3" ]] ||
    fail "$1: the folder holding it gave other digits than the file"
  say "$1: the folder holding it alone reads as the .pth"
}

# r, k, v, o, the FFN's key and value and the head are quantized; the LoRAs, lerps, k_k, k_a,
# r_k, norms and the embedding stay as stored.
quantized_checks() {  # NAME TYPE DIR
  local code=I8 got want
  [[ $2 == q4 ]] && code=U8
  got=$(dtypes "$3" | awk -v c="$code" '$2 == c { print $1 }' | sed 's/^\(blocks\|model\.layers\)\.[0-9]*\.//' | sort -u | tr '\n' ' ')
  case $1 in
    *.pth) want="att.key.weight att.output.weight att.receptance.weight att.value.weight ffn.key.weight ffn.value.weight head.weight " ;;
    *) want="attn.k_proj.weight attn.o_proj.weight attn.r_proj.weight attn.v_proj.weight ffn.key.weight ffn.value.weight lm_head.weight " ;;
  esac
  [[ "$got" == "$want" ]] || fail "$1 $2: the $code tensors are '$got', expected '$want'"
}

family_checks() {
  layouts_agree
  convert_continues
  tokenizer_beside_pth
  tokenizer_refusals
  wide_head
}

# The two layouts of one model. h1x64: the only difference of the publishers' rules is the kk
# normalisation (the reference: 8.9e-11 apart), so recur's two readings agree far inside 1e-7.
# h2x16: ln_x's eps differs (64e-5 against head_dim * norm_eps = 16e-5), 1.7e-4 in the reference;
# recur's two readings must differ by that, not agree.
layouts_agree() {
  within "${got_nll[h1x64-bf16.pth]}" "${got_nll[h1x64-fla-bf16]}" 1e-7 ||
    fail "h1x64: the .pth (${got_nll[h1x64-bf16.pth]}) and the fla folder (${got_nll[h1x64-fla-bf16]}) disagree"
  within "${got_nll[h2x16-f32.pth]}" "${got_nll[h2x16-fla]}" 1e-4 &&
    fail "h2x16: the .pth and the fla folder agree within 1e-4: ln_x's eps is not each publisher's"
  say ".pth and fla folder of h1x64 agree ($(relative "${got_nll[h1x64-bf16.pth]}" "${got_nll[h1x64-fla-bf16]}")), of h2x16 differ by ln_x's eps ($(relative "${got_nll[h2x16-f32.pth]}" "${got_nll[h2x16-fla]}"), the reference 1.7e-4)"
}

# recur convert FILE.pth OUT: a folder of safetensors and config.json with the same digits, in
# which the .pth's saved state continues.
convert_continues() {
  local m="$fx/h2x16-f32.pth"
  "$recur" convert "$m" "$tmp/conv" > /dev/null 2> "$tmp/err" || { cat "$tmp/err" >&2; fail "recur convert $m"; }
  [[ -f "$tmp/conv/config.json" && -f "$tmp/conv/model.safetensors" ]] || fail "convert wrote no folder"
  [[ "$(score -m "$tmp/conv" --token-ids "$ids")" == "$(score -m "$m" --token-ids "$ids")" ]] ||
    fail "the converted folder scores other digits than the .pth"
  gen -m "$tmp/conv" --load-state "$tmp/s-h2x16-f32.pth" -n 7 > "$tmp/c"
  cmp -s "$tmp/c" "$tmp/b-h2x16-f32.pth" || fail "the .pth's saved state continues otherwise in the converted folder"
  "$recur" convert "$fx/h1x64-bf16.pth" "$tmp/conv64" > /dev/null 2> "$tmp/err" ||
    { cat "$tmp/err" >&2; fail "recur convert h1x64-bf16.pth"; }
  [[ "$(score -m "$tmp/conv64" --token-ids "$ids")" == "$(score -m "$fx/h1x64-bf16.pth" --token-ids "$ids")" ]] ||
    fail "h1x64-bf16.pth converted (bf16, layer 0's unused v0/v1/v2) scores other digits"
  say "recur convert of a .pth writes a folder with the same digits, and the .pth's state continues there"
}

# The tokenizer beside a .pth (RWKV's world vocabulary file) is found from the file and from its
# folder, and convert copies it.
tokenizer_beside_pth() {
  local path
  mkdir "$tmp/tok"
  cp "$fx/h2x16-f32.pth" "$src/tests/world/rwkv_vocab_v20230424.txt" "$tmp/tok/"
  for path in "$tmp/tok/h2x16-f32.pth" "$tmp/tok"; do
    "$recur" score -m "$path" --token-ids "$ids" > /dev/null 2> "$tmp/err" || { cat "$tmp/err" >&2; fail "recur score -m $path"; }
    grep -q "^tokenizer: RWKV world vocabulary" "$tmp/err" || fail "-m $path: the world vocabulary beside it was not found: $(cat "$tmp/err")"
  done
  "$recur" convert "$tmp/tok/h2x16-f32.pth" "$tmp/tok-conv" > /dev/null 2> "$tmp/err" || { cat "$tmp/err" >&2; fail "recur convert with a tokenizer"; }
  cmp -s "$tmp/tok/rwkv_vocab_v20230424.txt" "$tmp/tok-conv/rwkv_vocab_v20230424.txt" || fail "convert did not copy the world vocabulary beside the .pth"
  say "the world vocabulary beside a .pth is its tokenizer (file or folder), and convert copies it"
}

# make-model refuses heads that do not divide the width in 16s; without its tokenizer, text is
# refused (bytes would be another model's ids) and ids work, but a byte-level model (vocab 256)
# needs no file: its ids are the bytes.
tokenizer_refusals() {
  if "$recur" make-model "$tmp/bad" --arch rwkv7 --hidden 64 --heads 3 > /dev/null 2> "$tmp/err"; then
    fail "make-model took 3 heads of a width 64"
  fi
  grep -q "multiple of 16" "$tmp/err" || fail "the refusal of --heads 3 does not say why: $(cat "$tmp/err")"
  "$recur" make-model "$tmp/made" --arch rwkv7 --vocab 300 --hidden 64 --layers 3 --heads 2 \
    --lora-ranks 4,3,2,8 > /dev/null 2> "$tmp/err" || { cat "$tmp/err" >&2; fail "make-model --arch rwkv7"; }
  if "$recur" generate -m "$tmp/made" -p "And God said" -n 2 > /dev/null 2> "$tmp/err"; then
    fail "text ran through an RWKV-7 model without its tokenizer"
  fi
  grep -q "rwkv_vocab_v20230424.txt" "$tmp/err" && grep -q -- "--tokenizer" "$tmp/err" ||
    fail "the missing tokenizer's error does not name the world vocabulary and --tokenizer: $(cat "$tmp/err")"
  "$recur" make-model "$tmp/bytes" --arch rwkv7 --vocab 256 --hidden 64 --layers 2 --heads 2 > /dev/null 2> "$tmp/err" ||
    { cat "$tmp/err" >&2; fail "make-model --arch rwkv7 --vocab 256"; }
  "$recur" generate -m "$tmp/bytes" -p "And God said" -n 2 --greedy > /dev/null 2> "$tmp/err" ||
    fail "text was refused by a byte-level RWKV-7 model: $(tail -1 "$tmp/err")"
  say "without a tokenizer text is refused, but for a byte-level model"
}

# A head wider than its tokenizer (the world models: 65,536 rows, 65,530 ids): here 65,536 rows
# and the world vocabulary of tests/world (3,002 ids), the head's rows of real ids scaled down so
# that the padding rows hold the highest logits. generate never draws an id the tokenizer cannot
# decode, greedy or sampled, as text or as --ids; the control: without the tokenizer (ids in, ids
# out, nothing to mask) the greedy ids are padding rows.
wide_head() {
  "$recur" make-model "$tmp/wide" --arch rwkv7 --vocab 65536 --hidden 64 --layers 1 --heads 2 \
    --lora-ranks 4,3,2,8 > /dev/null 2> "$tmp/err" || { cat "$tmp/err" >&2; fail "make-model --vocab 65536"; }
  python3 - "$tmp/wide/model.safetensors" 3002 <<'PY' || fail "could not scale the head's rows"
import array, json, struct, sys
path, real = sys.argv[1], int(sys.argv[2])
with open(path, "r+b") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    header = json.loads(f.read(n))
    head = header["lm_head.weight"]
    assert head["dtype"] == "F32", head
    rows, cols = head["shape"]
    start = 8 + n + head["data_offsets"][0]
    f.seek(start)
    v = array.array("f", f.read(real * cols * 4))
    f.seek(start)
    f.write(array.array("f", (x / 50 for x in v)).tobytes())
PY
  mkdir "$tmp/wide-tok"
  cp "$src/tests/world/rwkv_vocab_v20230424.txt" "$tmp/wide-tok/"
  printf '1\n2\n3\n' > "$tmp/wide-prompt"
  "$recur" generate -m "$tmp/wide" --prompt-ids "$tmp/wide-prompt" --greedy -n 8 --ids --ignore-eos > "$tmp/ids" 2> "$tmp/err" ||
    { cat "$tmp/err" >&2; fail "generate --ids without a tokenizer"; }
  awk '$1 < 3002 { low = 1 } END { exit low }' "$tmp/ids" ||
    fail "the control: without a tokenizer, greedy ids of the scaled head below 3002: $(tr '\n' ' ' < "$tmp/ids")"
  local wide=(-m "$tmp/wide" --tokenizer "$tmp/wide-tok" --prompt-ids "$tmp/wide-prompt" --ignore-eos -n 24) sampling
  for sampling in "--greedy" "--temperature 1 --top-k 0 --top-p 1 --seed 3" "--temperature 2 --top-k 5 --seed 4"; do
    # shellcheck disable=SC2086
    "$recur" generate "${wide[@]}" $sampling --ids > "$tmp/ids" 2> "$tmp/err" ||
      fail "generate --ids $sampling with a head of 65,536 rows and a tokenizer of 3,002 ids: $(tail -1 "$tmp/err")"
    [[ $(wc -l < "$tmp/ids") == 24 ]] || fail "generate --ids $sampling gave $(wc -l < "$tmp/ids") ids"
    awk '$1 >= 3002 { past = 1 } END { exit past }' "$tmp/ids" ||
      fail "generate $sampling drew an id past the tokenizer's 3,002: $(tr '\n' ' ' < "$tmp/ids")"
    # shellcheck disable=SC2086
    "$recur" generate "${wide[@]}" $sampling > "$tmp/out" 2> "$tmp/err" ||
      fail "generate $sampling as text: $(tail -1 "$tmp/err")"
  done
  say "a head of 65,536 rows never samples an id its 3,002-id tokenizer cannot decode (greedy and sampled, text and --ids)"
}
