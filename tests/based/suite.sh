# tests/model_test.sh's data and own checks for Based (HazyResearch's published layout; the
# fixtures: pytorch_model.bin as the hub publishes it, and safetensors):
# - the .bin, the safetensors and `recur convert`'s output are one model, and a state saved from
#   the .bin continues in the converted one bit for bit;
# - the trainer's int64 metric counters in a converted safetensors are left out;
# - a model without a tokenizer takes ids, and says --tokenizer for text; padding ids refused.
tolerance=1e-5
fixtures=3
golden_models="tiny tiny-bf16"
golden_states="tiny"
golden_made=("--arch based --vocab 300 --hidden 32 --layers 5 --heads 2 --la-layers 1,3 --window-layers 2")
# make-model writes the published layout (vocab 500: the ids below it).
printf '%s\n' 5 17 3 99 250 7 1 2 3 4 5 6 7 8 9 10 11 12 > "$tmp/ids2.txt"
made_ids="$tmp/ids2.txt" made_chunks="1 5"
made=("--arch based --vocab 500 --hidden 32 --layers 4 --heads 2 --la-layers 1 --window-layers 2 --feature-dim 4 --window-size 8"
      '"alt_mixer_layers": \[1\]')

family_checks() {
  # The .bin alone, the safetensors alone, and the .bin converted: one model.
  mkdir "$tmp/bin" "$tmp/st"
  cp "$fx/tiny/config.json" "$fx/tiny/pytorch_model.bin" "$tmp/bin/"
  cp "$fx/tiny/config.json" "$fx/tiny/model.safetensors" "$tmp/st/"
  local from_bin
  from_bin=$(score -m "$tmp/bin" --token-ids "$ids")
  [[ "$(score -m "$tmp/st" --token-ids "$ids")" == "$from_bin" ]] || fail "the .bin and the safetensors disagree"
  "$recur" convert "$tmp/bin" "$tmp/converted" > /dev/null || fail "recur convert"
  [[ -f "$tmp/converted/model.safetensors" && -f "$tmp/converted/config.json" ]] || fail "convert wrote no model"
  [[ "$(score -m "$tmp/converted" --token-ids "$ids")" == "$from_bin" ]] || fail "the converted model disagrees"
  if "$recur" convert "$tmp/bin" "$tmp/converted" 2> "$tmp/err"; then fail "convert replaced a model without --force"; fi
  grep -q -- "--force" "$tmp/err" || fail "convert's refusal does not say --force: $(cat "$tmp/err")"
  say "pytorch_model.bin, model.safetensors and recur convert's output give the same digits"

  # A safetensors file converted from the Lightning checkpoint keeps the trainer's int64 metric
  # counters; like the .bin's, they are left out, and the model is the same one.
  mkdir "$tmp/metrics"
  cp "$fx/tiny/config.json" "$tmp/metrics/"
  /usr/bin/python3 - "$fx/tiny/model.safetensors" "$tmp/metrics/model.safetensors" <<'PY'
import json, struct, sys
data = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", data[:8])[0]
header, body = json.loads(data[8:8 + n]), data[8 + n:]
extra = b""
for name, count in (("train_metrics.perplexity.count", 3), ("val_metrics.num_tokens.total", 7)):
    header[name] = {"dtype": "I64", "shape": [], "data_offsets": [len(body) + len(extra), len(body) + len(extra) + 8]}
    extra += struct.pack("<q", count)
text = json.dumps(header).encode()
open(sys.argv[2], "wb").write(struct.pack("<Q", len(text)) + text + body + extra)
PY
  [[ "$(score -m "$tmp/metrics" --token-ids "$ids")" == "$from_bin" ]] ||
    fail "the safetensors with the trainer's I64 counters is not the .bin's model"
  say "the trainer's int64 metric counters are left out of safetensors as of the .bin"

  # A state saved from the .bin continues in the converted model (the same fingerprint).
  head -n 40 "$ids" > "$tmp/p.txt"
  gen -m "$tmp/bin" --prompt-ids "$tmp/p.txt" -n 12 > "$tmp/whole"
  gen -m "$tmp/bin" --prompt-ids "$tmp/p.txt" -n 5 --save-state "$tmp/s" > "$tmp/a"
  gen -m "$tmp/converted" --load-state "$tmp/s" -n 7 > "$tmp/b"
  [[ "$(cat "$tmp/a" "$tmp/b")" == "$(cat "$tmp/whole")" ]] ||
    fail "save in the .bin model and load in the converted one: $(cat "$tmp/a" "$tmp/b" | tr '\n' ' ') against $(tr '\n' ' ' < "$tmp/whole")"
  say "a state saved from the .bin model continues in the converted model"

  # No tokenizer: ids only, and text asks for --tokenizer; with one, text works.
  if "$recur" generate -m "$tmp/bin" -p "And God said" -n 3 2> "$tmp/err" > /dev/null; then fail "text ran without a tokenizer"; fi
  grep -q -- "--tokenizer" "$tmp/err" || fail "the missing tokenizer's error does not name --tokenizer: $(cat "$tmp/err")"
  "$recur" generate -m "$tmp/bin" --tokenizer "$src/models/kjv" -p "And God said" -n 8 --greedy 2> /dev/null > "$tmp/text" ||
    fail "generate with --tokenizer"
  [[ -s "$tmp/text" ]] || fail "generate with --tokenizer wrote nothing"
  # vocab_size 4093 with 4096 embedding rows: the padding rows are no token.
  printf '1\n4094\n' > "$tmp/pad.txt"
  if "$recur" score -m "$tmp/bin" --token-ids "$tmp/pad.txt" 2> "$tmp/err" > /dev/null; then fail "a padding id was scored"; fi
  grep -q "4094" "$tmp/err" || fail "the padding id's error does not name it: $(cat "$tmp/err")"
  say "ids without a tokenizer, text with --tokenizer, padding ids refused"
}
