#!/usr/bin/env bash
# The command line as a hostile or careless user meets it: each check here is one finding of the
# hardening review (docs/cli.md), and fails on the code before its fix.
set -euo pipefail
recur="$1"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
# Runs a command that must fail; its stderr must contain the pattern.
refused() {
  local pattern="$1"; shift
  if "$@" > "$dir/out" 2> "$dir/err"; then fail "accepted: $*"; fi
  grep -q -- "$pattern" "$dir/err" || fail "for '$*' expected '$pattern', got: $(cat "$dir/err")"
}
checks=0
ok() { checks=$((checks + 1)); }
text="$dir/text.txt"  # a short text to score: the checks are about the tool, not the model
printf 'The quick brown fox jumps over the lazy dog.\n\tTabs, "quotes" and \\ slashes.\n' > "$text"

# make-model over a directory that holds a model: refused, and with --force every old model
# file goes, so the new config is never paired with old shards.
"$recur" make-model "$dir/m" --shards 3 --hidden 32 > /dev/null
refused "already holds a model" "$recur" make-model "$dir/m" --hidden 64
[[ -f "$dir/m/model.safetensors.index.json" ]] || fail "a refused make-model changed the directory"
touch "$dir/m/notes.txt"
"$recur" make-model "$dir/m" --hidden 64 --force > /dev/null
[[ ! -e "$dir/m/model.safetensors.index.json" && -f "$dir/m/notes.txt" ]] || fail "--force left the old index or removed other files"
ls "$dir/m" | grep -q "model-0000" && fail "--force left old shards"
"$recur" score -m "$dir/m" -f "$text" --json > /dev/null || fail "the replaced model does not load"
ok

# --shards reports the files written, not the number asked for.
"$recur" make-model "$dir/s" --shards 1000 > "$dir/out"
n=$(ls "$dir/s"/*.safetensors | wc -l)
grep -q "$n weight files" "$dir/out" || fail "reported $(cat "$dir/out") for $n files"
ok

# A seeded, sampled continuation after --load-state (no -p: no default prompt is added) is the
# run that was never interrupted: the sampler's state and the history are saved with the state.
args=(-m "$dir/m" -p "Once" --seed 7 --temperature 1.5 --top-k 0 --repetition-penalty 1.3 --raw)
"$recur" generate "${args[@]}" -n 30 > "$dir/full" 2> /dev/null
"$recur" generate "${args[@]}" -n 12 --save-state "$dir/st" > "$dir/p1" 2> /dev/null
"$recur" generate -m "$dir/m" --temperature 1.5 --top-k 0 --repetition-penalty 1.3 --raw -n 18 --load-state "$dir/st" > "$dir/p2" 2> /dev/null
{ head -c -1 "$dir/p1"; cat "$dir/p2"; } | cmp -s - "$dir/full" || fail "the sampled continuation differs"
ok

# --tokens is a count everywhere; score's old --tokens FILE says what replaced it.
refused "now --token-ids" "$recur" score -m "$dir/m" --tokens "$dir/full"
ok

# Sizes that overflow are refused, not wrapped.
refused "expected 0 to" "$recur" generate -n 99999999999G
refused "expected" "$recur" bench --kv-cap 99999999999G
refused "expected" "$recur" demo --tokens 9223372036854775807T
ok

# Work this machine cannot hold is refused before it starts; out of memory is named.
refused "more than this machine" "$recur" bench --layers 1024 --heads 1024 --d-head 1024
refused "more than this machine" "$recur" bench --kv-cap 512G
refused "more than this machine" "$recur" demo --heads 4096 --d-key 4096 --d-value 4096
# (AddressSanitizer reserves terabytes of address space, so a limit on it cannot run there.)
if [[ -z "${RECUR_SANITIZED:-}" ]]; then
  if (ulimit -v 400000; "$recur" make-model "$dir/big" --hidden 4096 --vocab 65536 --layers 1 > /dev/null 2> "$dir/err"); then
    fail "made a 1 GB model in 400 MB"
  fi
  grep -q "out of memory" "$dir/err" || fail "unclear out-of-memory message: $(cat "$dir/err")"
fi
ok

# Output paths: checked before the work, only regular files replaced, links followed, nothing
# left behind by a failed save.
[[ -c /dev/null ]] || fail "/dev/null is not a device on this machine (restore it: mknod -m 666 /dev/null c 1 3)"
refused "not a regular file" "$recur" generate -n 2 --save-state /dev/null
[[ -c /dev/null ]] || fail "/dev/null was replaced"
mkfifo "$dir/fifo"
refused "not a regular file" "$recur" generate -n 2 --save-state "$dir/fifo"
refused "is a directory" "$recur" generate -n 2 --save-state "$dir"
refused "does not exist" "$recur" generate -n 2 --save-state "$dir/no/such/dir/state"
refused "does not exist" "$recur" bench --tokens 256 --out "$dir/no/such/prefix"
touch "$dir/target.state"
ln -s target.state "$dir/link.state"
"$recur" generate -n 2 --save-state "$dir/link.state" > /dev/null 2>&1
[[ -L "$dir/link.state" && -s "$dir/target.state" ]] || fail "the link was not followed"
ls "$dir" | grep -q "tmp" && fail "a temporary file was left behind"
ok

# Writes that fail are failures.
if "$recur" score -f "$text" --json > /dev/full 2> "$dir/err"; then fail "exit 0 writing to /dev/full"; fi
grep -q "cannot write to standard output" "$dir/err" || fail "unclear: $(cat "$dir/err")"
if "$recur" generate -n 5 > /dev/full 2> "$dir/err"; then fail "generate: exit 0 writing to /dev/full"; fi
ok

# Text mode shows ids above the byte range instead of dropping them.
"$recur" make-model "$dir/v300" --vocab 300 > /dev/null
"$recur" generate -m "$dir/v300" -p "x" -n 100 --temperature 5 --top-k 0 --seed 3 > "$dir/out" 2> "$dir/err"
grep -q "<|2[5-9][0-9]|>" "$dir/out" || fail "no id above 255 shown: $(cat "$dir/out")"
grep -q "outside the byte range" "$dir/err" || fail "no warning about ids above 255"
ok

# A perplexity too large for a double prints as JSON null, never inf.
"$recur" make-model "$dir/hot" > /dev/null
python3 - "$dir/hot/model.safetensors" <<'PY'
import json, struct, sys
path = sys.argv[1]
data = bytearray(open(path, "rb").read())
n = struct.unpack("<Q", data[:8])[0]
entry = json.loads(data[8:8 + n])["lm_head.weight"]
b, e = (8 + n + o for o in entry["data_offsets"])
vals = struct.unpack(f"<{(e - b) // 4}f", data[b:e])
data[b:e] = struct.pack(f"<{len(vals)}f", *(v * 3e4 for v in vals))
open(path, "wb").write(data)
PY
out=$("$recur" score -m "$dir/hot" -f "$text" --json)
[[ "$out" =~ \"ppl\":\ null, ]] || fail "ppl is not null: $out"
ok

# Input: a directory, an endless device and a missing file are refused by name.
refused "is a directory" "$recur" generate -f "$dir" -n 1
refused "more than the limit" "$recur" score -f /dev/zero
refused "no such file" "$recur" score -f "$dir/nothing"
ok

# --threads above the core count is lowered, with a word, and changes nothing.
a=$("$recur" score -f "$text" --json --threads 64 2> "$dir/err")
grep -q "warning: --threads 64" "$dir/err" || fail "no warning for --threads 64"
[[ "$a" == "$("$recur" score -f "$text" --json --threads 1)" ]] || fail "--threads 64 changed the score"
ok

# Options that conflict or do not apply are refused.
refused "excludes" "$recur" generate --greedy --temperature 2
refused "linear_attn only\|transformers_are_rnns only" "$recur" make-model "$dir/c1" --hidden-act gelu
refused "does not apply to --arch transformers_are_rnns" "$recur" make-model "$dir/c2" --arch transformers_are_rnns --kv-heads 2
refused "does not apply" "$recur" make-model "$dir/c3" --builtin --hidden 12
# Each family's options apply to the layouts that have the field, and nowhere else (options
# that were once ignored there are refused by name).
refused "does not apply to --arch hgrn2: it applies to --arch linear_attn, gla, retnet only" \
  "$recur" make-model "$dir/c4" --arch hgrn2 --kv-heads 2
refused "does not apply to --arch retnet: it applies to --arch gla, hgrn2 only" \
  "$recur" make-model "$dir/c5" --arch retnet --short-conv
refused "does not apply to --arch gla: it applies to --arch based only" \
  "$recur" make-model "$dir/c6" --arch gla --la-layers 1
refused "expected linear_attn, transformers_are_rnns, based, gla, retnet, hgrn2" \
  "$recur" make-model "$dir/c7" --arch mamba
refused "excludes" "$recur" generate --prompt x --prompt-file "$0"
ok

# Parsing is the same everywhere: -n=3, -n3, --tokens=3 and -n 3 agree; -- ends the options;
# --version answers.
a=$("$recur" generate -n 3 --greedy --ids 2> /dev/null)
for form in "-n=3" "-n3" "--tokens=3"; do
  [[ "$("$recur" generate "$form" --greedy --ids 2> /dev/null)" == "$a" ]] || fail "$form differs from -n 3"
done
"$recur" make-model -- "$dir/dashdash" > /dev/null && [[ -f "$dir/dashdash/config.json" ]] || fail "-- DIR"
"$recur" --version | grep -q "^recur [0-9]" || fail "no --version"
"$recur" score --version | grep -q "^recur [0-9]" || fail "no score --version"
ok

# Messages never copy raw control bytes from input to the terminal.
printf '1\n\033[31mred\n' > "$dir/esc_ids.txt"
refused 'x1b' "$recur" score --token-ids "$dir/esc_ids.txt"
grep -q $'\033' "$dir/err" && fail "an escape byte reached the terminal"
ok

# bench's summary says "more memory" when the linear state holds more than the caches.
"$recur" bench --tokens 128 --window 32 --layers 1 --d-head 128 --out "$dir/b" > "$dir/out" 2> /dev/null
grep -q "more memory" "$dir/out" || fail "bench summary: $(grep 'memory' "$dir/out")"
ok

echo "$checks passed, 0 failed"
