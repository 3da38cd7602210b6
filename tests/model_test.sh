#!/usr/bin/env bash
# One model family's committed fixtures through the recur binary. The family's folder of tests/
# holds the fixtures, their expectations and suite.sh, which says as data what differs (the
# tolerance, the chunkings, which fixtures are saved, quantized or made) and adds the family's
# own checks. For every family:
# - recur score on each fixture of expected_nll.txt within the family's tolerance of the float64
#   reference (reference.py beside it) that wrote it;
# - the same 17 digits at each of the family's chunk sizes and thread counts, and under every
#   instruction set;
# - where the family pins them, the reference's greedy ids after the prompt (expected.json);
# - a state saved after a prompt continues as one run, and the state saved under one instruction
#   set has the same bytes and continues the same under every other;
# - a pure model's state is the same size after 100 and 100,000 tokens, with a finite mean NLL
#   over them; a hybrid's grows by its attention layers' keys and values and nothing else;
# - recur quantize to q8 and q4: the model scores near the float one (a sanity bound, not an
#   accuracy claim: random weights), gives the same digits at every chunking, and keeps as
#   stored what the family says must stay (suite.sh's quantized_checks);
# - make-model writes models that read back with the same digits at every chunking;
# - when PyTorch is there, the reference recomputes every committed expectation.
#
#   tests/model_test.sh RECUR SOURCE_DIR FAMILY      (FAMILY: tests/FAMILY/suite.sh)
#
# suite.sh sets (the defaults in brackets):
#   tolerance                 recur's mean NLL against the reference's, relative
#   fixtures                  how many lines expected_nll.txt must hold [not checked]
#   chunks, threads           the chunk sizes and thread counts of the digits ["1 7 64 300", "1 2 3"]
#   greedy, greedy_key        how many greedy ids expected.json pins, under which key [0, greedy_ids]
#   saved, saved_prompts      the fixtures whose states are saved, after prompts of these lengths [none, 40]
#   constant_state            a pure fixture, the same size after 100,000 tokens [none]
#   growing_state             "FIXTURE TOKENS BYTES": a hybrid's state grows by BYTES a token [none]
#   quantized, quant_chunks, quant_threads   fixtures quantized q8 and q4, their chunkings [none, "7 64 300", "1 2"]
#   made, made_ids, made_chunks   pairs of make-model arguments and a pattern config.json must
#                             hold, the ids they score, the chunk sizes compared [none, the prompt, "1 64"]
#   ids                       the prompt: 300 ids [the folder's prompt_ids.txt]
#   reference_expectations    the file `reference.py --check-expected` recomputes [none]
# and may define fixture_checks NAME PATH JSON (after a fixture's digits), quantized_checks NAME
# TYPE DIR (after each quantization) and family_checks (at the end). Files the checks leave in
# $tmp for family_checks: s-NAME (the state saved after the first saved prompt and 5 ids) and
# b-NAME (the 7 ids that continue it).
set -euo pipefail
recur="$1" src="$2" family="$3"
fx="$src/tests/$family"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAILED: $*" >&2; exit 1; }
say() { echo "${family}_model_test: $*"; }
ids="$fx/prompt_ids.txt"
score() { "$recur" score --json "$@" 2> "$tmp/err" || { cat "$tmp/err" >&2; fail "recur score $*"; }; }
gen() { "$recur" generate --ids --greedy --ignore-eos "$@" 2> "$tmp/err" || { cat "$tmp/err" >&2; fail "recur generate $*"; }; }
nll() { sed 's/.*"mean_nll": \([^,]*\),.*/\1/' <<< "$1"; }
within() {  # within A B TOL: |A - B| / |B| < TOL
  awk -v a="$1" -v b="$2" -v t="$3" 'BEGIN { d = (a - b) / b; if (d < 0) d = -d; exit !(d < t) }'
}
relative() { awk -v a="$1" -v b="$2" 'BEGIN { d = (a - b) / b; printf "%.2g", d < 0 ? -d : d }'; }
same_digits() {  # same_digits WHAT MODEL IDS JSON "CHUNKS" "THREADS": every chunking scores JSON
  local chunk t
  for chunk in $5; do
    for t in $6; do
      [[ "$(score -m "$2" --token-ids "$3" --chunk "$chunk" --threads "$t")" == "$4" ]] ||
        fail "$1: chunk $chunk, threads $t gave other digits"
    done
  done
}
dtypes() {  # name dtype per line of $1/model.safetensors
  /usr/bin/python3 -c 'import json, struct, sys; f = open(sys.argv[1], "rb"); n = struct.unpack("<Q", f.read(8))[0]
for k, v in sorted(json.loads(f.read(n)).items()):
    if k != "__metadata__": print(k, v["dtype"])' "$1/model.safetensors"
}
isas=$("$recur" isa --available)
first_isa=$(tail -n 1 <<< "$isas")

fixtures="" chunks="1 7 64 300" threads="1 2 3" greedy=0 greedy_key=greedy_ids
saved="" saved_prompts=40 constant_state="" growing_state=""
quantized="" quant_chunks="7 64 300" quant_threads="1 2"
made=() made_ids="" made_chunks="1 64" reference_expectations=""
fixture_checks() { :; }
quantized_checks() { :; }
family_checks() { :; }
# shellcheck source=/dev/null
source "$fx/suite.sh"
: "${tolerance:?tests/$family/suite.sh sets no tolerance}"
: "${made_ids:=$ids}"

# Every fixture: the reference's mean NLL, the same digits at every chunking, thread count and
# instruction set, and the reference's greedy ids.
[[ $(wc -l < "$ids") == 300 ]] || fail "$ids should hold 300 ids"
[[ -z $fixtures || $(wc -l < "$fx/expected_nll.txt") == "$fixtures" ]] ||
  fail "expected_nll.txt should list $fixtures fixtures"
declare -A got_nll
while read -r name want; do
  path="$fx/$name"
  got_json=$(score -m "$path" --token-ids "$ids")
  got=$(nll "$got_json")
  got_nll[$name]=$got
  within "$got" "$want" "$tolerance" ||
    fail "$name: recur's mean NLL $got, the float64 reference's $want (more than $tolerance apart)"
  say "$name: mean NLL $got, reference $want, relative difference $(relative "$got" "$want")"
  same_digits "$name" "$path" "$ids" "$got_json" "$chunks" "$threads"
  for isa in $isas; do
    [[ "$(RECUR_ISA=$isa score -m "$path" --token-ids "$ids" --chunk 64)" == "$got_json" ]] ||
      fail "$name: RECUR_ISA=$isa gave other digits"
  done
  say "$name: the same digits at chunks $chunks, threads $threads and under $(tr '\n' ' ' <<< "$isas")"
  if ((greedy > 0)); then
    got_greedy=$(gen -m "$path" --prompt-ids "$ids" -n "$greedy" | tr '\n' ' ')
    want_greedy=$(/usr/bin/python3 -c 'import json, sys; print(" ".join(map(str, json.load(open(sys.argv[1]))["fixtures"][sys.argv[2]][sys.argv[3]])) + " ")' "$fx/expected.json" "$name" "$greedy_key")
    [[ "$got_greedy" == "$want_greedy" ]] || fail "$name: greedy ids $got_greedy, the reference's $want_greedy"
    say "$name: the reference's $greedy greedy ids: $got_greedy"
  fi
  fixture_checks "$name" "$path" "$got_json"
done < "$fx/expected_nll.txt"

# A saved state continues as one run; saved under one instruction set it has the same bytes, and
# it continues the same under every other.
for name in $saved; do
  m="$fx/$name"
  for n in $saved_prompts; do
    head -n "$n" "$ids" > "$tmp/p.txt"
    gen -m "$m" --prompt-ids "$tmp/p.txt" -n 12 > "$tmp/whole"
    gen -m "$m" --prompt-ids "$tmp/p.txt" -n 5 --save-state "$tmp/s" > "$tmp/a"
    gen -m "$m" --load-state "$tmp/s" -n 7 > "$tmp/b"
    [[ $(wc -l < "$tmp/whole") == 12 ]] || fail "generate wrote $(wc -l < "$tmp/whole") ids, not 12"
    [[ "$(cat "$tmp/a" "$tmp/b")" == "$(cat "$tmp/whole")" ]] ||
      fail "$name: saved after $n + 5 ids and continued: $(cat "$tmp/a" "$tmp/b" | tr '\n' ' ') against one run $(tr '\n' ' ' < "$tmp/whole")"
    [[ -f "$tmp/s-$name" ]] || { cp "$tmp/s" "$tmp/s-$name"; cp "$tmp/b" "$tmp/b-$name"; }
  done
  head -n "${saved_prompts%% *}" "$ids" > "$tmp/p.txt"
  RECUR_ISA=$first_isa gen -m "$m" --prompt-ids "$tmp/p.txt" -n 5 --save-state "$tmp/s-isa" > /dev/null
  cmp -s "$tmp/s-$name" "$tmp/s-isa" || fail "$name: the state saved under $first_isa differs from the default's"
  for isa in $isas; do
    RECUR_ISA=$isa gen -m "$m" --load-state "$tmp/s-isa" -n 7 > "$tmp/b-isa"
    cmp -s "$tmp/b-$name" "$tmp/b-isa" || fail "$name: the state saved under $first_isa continues otherwise under $isa"
  done
  say "$name: states saved after $saved_prompts (+ 5) ids continue as one run of 12 ($(tr '\n' ' ' < "$tmp/whole")); saved under $first_isa (the same bytes) and continued under $(tr '\n' ' ' <<< "$isas")"
done

# The state's size after N + 1 tokens (generate's "state:" line), the prompt repeated to N ids
# in $tmp/long.txt.
state_at() {  # state_at FIXTURE N
  awk -v n="$2" 'NR <= 300 { id[NR] = $1 } END { for (i = 0; i < n; ++i) print id[i % 300 + 1] }' "$ids" > "$tmp/long.txt"
  gen -m "$fx/$1" --prompt-ids "$tmp/long.txt" -n 1 --chunk 512 > /dev/null
  local line
  line=$(sed -n 's/^state: *\([0-9]*\) bytes.*after \([0-9]*\) tokens.*/\1 \2/p' "$tmp/err")
  [[ $(cut -d' ' -f2 <<< "$line") == $(($2 + 1)) ]] || fail "$1: no state line after $2 tokens: $(cat "$tmp/err")"
  cut -d' ' -f1 <<< "$line"
}
if [[ -n $constant_state ]]; then
  s100=$(state_at "$constant_state" 100)
  s100k=$(state_at "$constant_state" 100000)
  [[ "$s100" == "$s100k" ]] ||
    fail "$constant_state: the state holds $s100 bytes after 101 tokens, $s100k after 100,001"
  long_nll=$(nll "$(score -m "$fx/$constant_state" --token-ids "$tmp/long.txt" --chunk 256)")
  awk -v a="$long_nll" 'BEGIN { exit !(a > 0 && a < 100) }' || fail "$constant_state: the mean NLL over 100,000 tokens is $long_nll"
  say "$constant_state: the state holds $s100 bytes after 101 tokens and after 100,001; mean NLL over 100,000 tokens $long_nll"
fi
if [[ -n $growing_state ]]; then
  # The attention over 100,000 tokens would take a CPU-minute: the growth is exact at any length.
  read -r name tokens per_token <<< "$growing_state"
  g100=$(state_at "$name" 100)
  glong=$(state_at "$name" "$tokens")
  [[ $((glong - g100)) == $(((tokens - 100) * per_token)) ]] ||
    fail "$name: the state grew by $((glong - g100)) bytes over $((tokens - 100)) tokens, not $((tokens - 100)) x $per_token"
  say "$name: the state grows from $g100 bytes by $per_token a token over $((tokens - 100)) tokens, its attention layers' keys and values"
fi

# recur quantize to q8 and q4.
kQuantSanity=0.05
for name in $quantized; do
  for type in q8 q4; do
    q="$tmp/$type-$name"
    "$recur" quantize "$fx/$name" "$q" --type "$type" > /dev/null 2> "$tmp/err" ||
      { cat "$tmp/err" >&2; fail "recur quantize $name --type $type"; }
    grep -q '"quantization_config"' "$q/config.json" || fail "$name $type: no quantization_config"
    quantized_checks "$name" "$type" "$q"
    float="${got_nll[$name]}"
    got_json=$(score -m "$q" --token-ids "$ids" --chunk 1 --threads 1)
    got=$(nll "$got_json")
    within "$got" "$float" "$kQuantSanity" ||
      fail "$name $type: mean NLL $got, the float model's $float (more than $kQuantSanity apart)"
    same_digits "$name $type" "$q" "$ids" "$got_json" "$quant_chunks" "$quant_threads"
    say "$name quantized $type: mean NLL $got (float $float, $(relative "$got" "$float") apart), the same digits at chunks 1 $quant_chunks"
  done
done

# make-model's models read back, with the same digits at every chunking.
for ((i = 0; i < ${#made[@]}; i += 2)); do
  args=${made[i]} pattern=${made[i + 1]} dir="$tmp/made$i"
  read -ra argv <<< "$args"  # split on spaces, never globbed (nemotron_h's --pattern M-*M)
  "$recur" make-model "$dir" "${argv[@]}" > /dev/null 2> "$tmp/err" || { cat "$tmp/err" >&2; fail "make-model $args"; }
  grep -q "$pattern" "$dir/config.json" || fail "make-model $args: config.json has no $pattern"
  digits=$(score -m "$dir" --token-ids "$made_ids")
  same_digits "make-model $args" "$dir" "$made_ids" "$digits" "$made_chunks" "2 3"
  say "make-model $args: reads back with the same digits at chunks $made_chunks"
done

family_checks

# The committed expectations are the reference's own numbers (where PyTorch is installed).
if [[ -n $reference_expectations ]]; then
  if /usr/bin/python3 -c 'import torch' 2> /dev/null; then
    /usr/bin/python3 "$fx/reference.py" --check-expected "$fx/$reference_expectations" > /dev/null ||
      fail "reference.py no longer gives the committed $reference_expectations"
    say "reference.py recomputes every committed expectation"
  else
    say "no PyTorch (/usr/bin/python3 -c 'import torch'): the committed expectations are not recomputed"
  fi
fi
