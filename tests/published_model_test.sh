#!/usr/bin/env bash
# The published config.json files kept verbatim in tests/fixtures/published (SOURCES.md there)
# through the recur binary: each is copied with its widths and depth reduced (hidden_size,
# intermediate_size, num_hidden_layers and the layer list cut to match; every other field as
# published), `recur make-model --config` writes random weights for the copy, and `recur score`
# runs them. The full-size configs are read field for field by test_model ("[published]").
# A config that is refused names its field, and this test prints the refusal.
#
#   tests/published_model_test.sh RECUR SOURCE_DIR
set -euo pipefail
recur="$1" src="$2"
fx="$src/tests/fixtures/published"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAILED: $*" >&2; exit 1; }

# shrink IN OUT: the config with 4 layers of width 64 (MLP 128); Qwen3.5's text_config or the
# top level, whichever holds the text model.
shrink() {
  python3 - "$1" "$2" <<'PY'
import json, sys
src, out = sys.argv[1], sys.argv[2]
with open(src, encoding="utf-8") as f:
    cfg = json.load(f)
text = cfg.get("text_config", cfg)
text["hidden_size"], text["num_hidden_layers"] = 64, 4
if "intermediate_size" in text:
    text["intermediate_size"] = 128
if isinstance(text.get("layer_types"), list):
    text["layer_types"] = text["layer_types"][:4]
with open(out, "w", encoding="utf-8") as f:
    json.dump(cfg, f, indent=2)
PY
}

printf '%s\n' 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 > "$tmp/ids.txt"
n=0
for dir in "$fx"/*/; do
  name=$(basename "$dir")
  [[ -f "$dir/config.json" ]] || continue
  shrink "$dir/config.json" "$tmp/$name.json"
  "$recur" make-model --config "$tmp/$name.json" --dtype bf16 "$tmp/$name" > /dev/null 2> "$tmp/err" ||
    { cat "$tmp/err" >&2; fail "make-model --config $name (reduced)"; }
  out=$("$recur" score --json -m "$tmp/$name" --token-ids "$tmp/ids.txt" 2> "$tmp/err") ||
    { cat "$tmp/err" >&2; fail "score $name (reduced)"; }
  grep -q '"mean_nll": [0-9]' <<< "$out" || fail "score $name printed no mean_nll: $out"
  # The copy make-model writes keeps the fields that decide the model.
  grep -q '"hidden_size": 64' "$tmp/$name/config.json" || fail "$name: make-model's config lost hidden_size"
  n=$((n + 1))
done
((n > 0)) || fail "no config.json under $fx"
echo "published configs: $n reduced copies made and scored"
