#!/usr/bin/env bash
# recur bench with a small stream: the CSV, the plot and the summary are all produced.
set -euo pipefail
recur="$1"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$recur" bench --tokens 2048 --layers 2 --heads 2 --d-head 16 --window 8 --out "$dir/b" > "$dir/summary.txt"
fail() { echo "FAIL: $*"; cat "$dir/summary.txt"; exit 1; }
[[ "$(head -1 "$dir/b.csv")" == "impl,context,ns_per_token,rss_bytes,state_bytes" ]] || fail "CSV header"
grep -q '^linear,1024,' "$dir/b.csv" || fail "no linear row at 1024"
grep -q '^kv,1024,' "$dir/b.csv" || fail "no kv row at 1024"
(( $(grep -c '^linear,' "$dir/b.csv") == $(grep -c '^kv,' "$dir/b.csv") )) || fail "row counts differ"
# Every linear row holds the same state bytes; kv bytes grow with the context.
(( $(grep '^linear,' "$dir/b.csv" | cut -d, -f5 | sort -u | wc -l) == 1 )) || fail "linear state size changed"
kv_first=$(grep '^kv,' "$dir/b.csv" | head -1 | cut -d, -f5)
kv_last=$(grep '^kv,' "$dir/b.csv" | tail -1 | cut -d, -f5)
(( kv_last > 8 * kv_first )) || fail "kv bytes did not grow: $kv_first -> $kv_last"
grep -q '<svg' "$dir/b.svg" && grep -q '<polyline' "$dir/b.svg" || fail "SVG has no lines"
grep -q 'linear is faster per token from context' "$dir/summary.txt" || fail "no crossover line"
grep -q 'the longest context both reached' "$dir/summary.txt" || fail "no longest-context line"
grep -q 'resident memory grew by' "$dir/summary.txt" || fail "no memory-growth line"
# A cap below the first window's needs stops the KV run cleanly.
"$recur" bench --tokens 4096 --layers 1 --heads 1 --d-head 8 --kv-cap 1M --out "$dir/c" > "$dir/cap.txt" 2>&1 || fail "capped run failed"
# Bad options fail with a message naming them.
if "$recur" bench --tokens x 2> "$dir/err.txt"; then fail "accepted --tokens x"; fi
grep -q -- '--tokens must be a whole number' "$dir/err.txt" || fail "unclear error: $(cat "$dir/err.txt")"
echo "recur bench: CSV, SVG and summary OK"
