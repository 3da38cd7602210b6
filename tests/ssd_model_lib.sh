# The checks tests/mamba2_model_test.sh and tests/falcon_h1_model_test.sh share, sourced by both:
# recur's score and greedy ids against a float64 reference's expected.json, the digits at every
# chunking, thread count and instruction set, a saved state continued, the state's bytes after
# N tokens, a quantized model's dtypes and digits. The caller sets recur, tmp, ids (a prompt of
# ids), isas (`recur isa --available`) and name (its messages' prefix) first.

fail() { echo "FAILED: $*" >&2; exit 1; }
say() { echo "${name}: $*"; }
score() { "$recur" score --json "$@" 2> "$tmp/err" || { cat "$tmp/err" >&2; fail "recur score $*"; }; }
gen() { "$recur" generate --ids --greedy --ignore-eos "$@" 2> "$tmp/err" || { cat "$tmp/err" >&2; fail "recur generate $*"; }; }
nll() { sed 's/.*"mean_nll": \([^,]*\),.*/\1/' <<< "$1"; }
within() {  # within A B TOL: |A - B| / |B| < TOL
  awk -v a="$1" -v b="$2" -v t="$3" 'BEGIN { d = (a - b) / b; if (d < 0) d = -d; exit !(d < t) }'
}
relative() { awk -v a="$1" -v b="$2" 'BEGIN { d = (a - b) / b; printf "%.2g", d < 0 ? -d : d }'; }

# check_fixtures DIR: each line `fixture mean_nll` of DIR/expected_nll.txt: recur's mean NLL
# within 1e-6, the same digits at chunks 1, 7, 64, 300 on 1-3 threads and under every
# instruction set, the greedy ids of DIR/expected.json. Leaves recur's NLL in got_nll[fixture].
declare -A got_nll
check_fixtures() {
  local dir=$1 fixture want path got_json got chunk threads isa greedy want_greedy
  while read -r fixture want; do
    path="$dir/$fixture"
    got_json=$(score -m "$path" --token-ids "$ids")
    got=$(nll "$got_json")
    got_nll[$fixture]=$got
    within "$got" "$want" 1e-6 ||
      fail "$fixture: recur's mean NLL $got, the float64 reference's $want (more than 1e-6 apart)"
    say "$fixture: mean NLL $got, reference $want, relative difference $(relative "$got" "$want")"
    for chunk in 1 7 64 300; do
      for threads in 1 2 3; do
        [[ "$(score -m "$path" --token-ids "$ids" --chunk "$chunk" --threads "$threads")" == "$got_json" ]] ||
          fail "$fixture: chunk $chunk, threads $threads gave other digits"
      done
    done
    for isa in $isas; do
      [[ "$(RECUR_ISA=$isa score -m "$path" --token-ids "$ids" --chunk 64)" == "$got_json" ]] ||
        fail "$fixture: RECUR_ISA=$isa gave other digits"
    done
    greedy=$(gen -m "$path" --prompt-ids "$ids" -n 8 | tr '\n' ' ')
    want_greedy=$(/usr/bin/python3 -c 'import json, sys; print(" ".join(map(str, json.load(open(sys.argv[1]))["fixtures"][sys.argv[2]]["greedy_ids"])) + " ")' "$dir/expected.json" "$fixture")
    [[ "$greedy" == "$want_greedy" ]] || fail "$fixture: greedy ids $greedy, the reference's $want_greedy"
    say "$fixture: the same digits at chunks 1, 7, 64, 300, threads 1-3 and under $(tr '\n' ' ' <<< "$isas"); the reference's greedy ids $greedy"
  done < "$dir/expected_nll.txt"
}

# check_saved_state MODEL: a state saved after 5 ids of a 40-id prompt continues as one run of
# 12, saved under one instruction set and continued under each.
check_saved_state() {
  local m=$1 first_isa isa
  head -n 40 "$ids" > "$tmp/p.txt"
  first_isa=$(tail -n 1 <<< "$isas")
  gen -m "$m" --prompt-ids "$tmp/p.txt" -n 12 > "$tmp/whole"
  gen -m "$m" --prompt-ids "$tmp/p.txt" -n 5 --save-state "$tmp/s" > "$tmp/a"
  gen -m "$m" --load-state "$tmp/s" -n 7 > "$tmp/b"
  [[ "$(cat "$tmp/a" "$tmp/b")" == "$(cat "$tmp/whole")" ]] ||
    fail "$m: saved and continued: $(cat "$tmp/a" "$tmp/b" | tr '\n' ' ') against one run $(tr '\n' ' ' < "$tmp/whole")"
  RECUR_ISA=$first_isa gen -m "$m" --prompt-ids "$tmp/p.txt" -n 5 --save-state "$tmp/s-isa" > /dev/null
  cmp -s "$tmp/s" "$tmp/s-isa" || fail "$m: the state saved under $first_isa differs from the default's"
  for isa in $isas; do
    RECUR_ISA=$isa gen -m "$m" --load-state "$tmp/s-isa" -n 7 > "$tmp/b-isa"
    cmp -s "$tmp/b" "$tmp/b-isa" || fail "$m: the state saved under $first_isa continues otherwise under $isa"
  done
  say "$(basename "$m"): a state saved after 5 ids continues as one run of 12, under every instruction set"
}

state_at() {  # state_at MODEL N: the state's bytes after N + 1 tokens
  awk -v n="$2" 'NR <= 300 { id[NR] = $1 } END { for (i = 0; i < n; ++i) print id[i % 300 + 1] }' "$ids" > "$tmp/long.txt"
  gen -m "$1" --prompt-ids "$tmp/long.txt" -n 1 --chunk 512 > /dev/null
  local line
  line=$(sed -n 's/^state: *\([0-9]*\) bytes.*after \([0-9]*\) tokens.*/\1 \2/p' "$tmp/err")
  [[ $(cut -d' ' -f2 <<< "$line") == $(($2 + 1)) ]] || fail "no state line after $2 tokens: $(cat "$tmp/err")"
  cut -d' ' -f1 <<< "$line"
}

dtypes() {  # dtypes DIR: each tensor of DIR/model.safetensors and its dtype
  /usr/bin/python3 -c 'import json, struct, sys; f = open(sys.argv[1], "rb"); n = struct.unpack("<Q", f.read(8))[0]
for k, v in sorted(json.loads(f.read(n)).items()):
    if k != "__metadata__": print(k, v["dtype"])' "$1/model.safetensors"
}

# check_quantized MODEL KEPT_REGEX QUANTIZED_REGEX: quantize q8 and q4; the tensors KEPT_REGEX
# matches stay float, those QUANTIZED_REGEX matches are codes; the mean NLL within 5% of the
# float model's (got_nll), the same digits at chunks 1, 7, 300; then convert scores the same.
check_quantized() {
  local m=$1 kept_re=$2 quant_re=$3 fixture type q kept got_json got chunk
  fixture=$(basename "$m")
  for type in q8 q4; do
    q="$tmp/$type-$fixture"
    "$recur" quantize "$m" "$q" --type "$type" > /dev/null 2> "$tmp/err" ||
      { cat "$tmp/err" >&2; fail "recur quantize $fixture --type $type"; }
    dtypes "$q" > "$tmp/dtypes"
    kept=$(grep -E "$kept_re" "$tmp/dtypes" | awk '$2 != "F32" && $2 != "BF16"' || true)
    [[ -z "$kept" ]] || fail "$fixture $type: quantized what must stay float: $kept"
    [[ $(grep -cE "$quant_re" "$tmp/dtypes") == $(grep -E "$quant_re" "$tmp/dtypes" | grep -cE ' (I8|U8)$') ]] &&
      grep -qE "$quant_re" "$tmp/dtypes" || fail "$fixture $type: not every tensor $quant_re names was quantized"
    got_json=$(score -m "$q" --token-ids "$ids" --chunk 1 --threads 1)
    got=$(nll "$got_json")
    within "$got" "${got_nll[$fixture]}" 0.05 || fail "$fixture $type: mean NLL $got, the float model's ${got_nll[$fixture]}"
    for chunk in 7 300; do
      [[ "$(score -m "$q" --token-ids "$ids" --chunk "$chunk" --threads 2)" == "$got_json" ]] ||
        fail "$fixture $type: chunk $chunk gave other digits"
    done
    say "$fixture quantized $type: mean NLL $got (float ${got_nll[$fixture]}), the same digits at chunks 1, 7, 300"
  done
  "$recur" convert "$m" "$tmp/conv-$fixture" > /dev/null 2> "$tmp/err" ||
    { cat "$tmp/err" >&2; fail "recur convert $fixture"; }
  [[ "$(nll "$(score -m "$tmp/conv-$fixture" --token-ids "$ids")")" == "${got_nll[$fixture]}" ]] ||
    fail "$fixture: converted, it scores otherwise"
}

# check_made DIR ARGS...: make-model DIR ARGS (300 ids, hidden 32, 2 layers), the same digits
# at chunks 1 and 64 as at the default.
check_made() {
  local dir=$1 made
  shift
  "$recur" make-model "$dir" --vocab 300 --hidden 32 --layers 2 "$@" > /dev/null 2> "$tmp/err" ||
    { cat "$tmp/err" >&2; fail "make-model $*"; }
  made=$(score -m "$dir" --token-ids "$ids")
  [[ "$(score -m "$dir" --token-ids "$ids" --chunk 1 --threads 2)" == "$made" ]] || fail "make-model $*: chunk 1 gave other digits"
  [[ "$(score -m "$dir" --token-ids "$ids" --chunk 64 --threads 3)" == "$made" ]] || fail "make-model $*: chunk 64 gave other digits"
}
