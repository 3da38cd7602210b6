#!/usr/bin/env bash
# Issue 44's speed table in one command, for a quiet machine: recur beside llama.cpp at the
# shapes of Granite 4.0-H-1B, LFM2-1.2B and Falcon-H1-1.5B (bench/peer/shapes.tsv), bf16 and
# q8, 1 and 2 threads, pp512, pp4096 and tg64 after 512 tokens, with the ratio
# (bench/peer/llama_cpp.sh); then recur's own measures against the machine: decode as a
# multiple of the time to read the weights once (x_read_time) and prefill as a fraction of the
# FMA peak (peak_frac), from bench_mamba2 (a 40-layer Mamba-2 stack at Granite 4.0-H-1B's Mamba
# shape) and bench_lfm2 (LFM2-1.2B).
#
#   bench/peer/hybrids.sh [--out FILE] [--rounds N] [--bench-filter REGEX] [-- LLAMA_CPP_SH ARGS]
#
# --out defaults to build/peer/hybrids.md, --rounds to 3; --bench-filter is the two benches'
# --benchmark_filter (default: every benchmark); arguments after -- go to llama_cpp.sh after
# this script's own (a later --shapes or --threads wins: for a quick check of the pipeline).
# Everything the two engines need is made under build/peer on the first run (llama.cpp's build,
# about 25 GB of weights for the three shapes: 8.4 GB Granite's, 6.7 GB LFM2's) and reused
# after. Both engines' table and the two benches' counters go to the one file, with the date,
# the CPU and the load average.
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
recur_build="${RECUR_BUILD:-$root/build/release}"
out="$root/build/peer/hybrids.md" rounds=3 filter="." peer_args=()
while (($#)); do
  case "$1" in
    --out) out="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --bench-filter) filter="$2"; shift 2 ;;
    --) shift; peer_args=("$@"); break ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "hybrids.sh: unknown argument '$1' (--help)" >&2; exit 2 ;;
  esac
done
mkdir -p "$(dirname "$out")"
table="$out.peer"

"$root/bench/peer/llama_cpp.sh" --shapes granite-4.0-h-1B,lfm2-1.2B,falcon-h1-1.5B \
  --formats bf16,q8 --threads 1,2 --rounds "$rounds" --tg 64 --depth 512 --out "$table" \
  "${peer_args[@]}"

cmake --build "$recur_build" -j2 --target bench_mamba2 bench_lfm2 >&2
{
  echo "# recur beside llama.cpp at issue 44's shapes"
  echo
  cat "$table"
  for bench in bench_mamba2 bench_lfm2; do
    echo
    echo "## $bench: decode over the weights' read time, prefill over the FMA peak"
    echo
    echo '```'
    "$recur_build/bench/$bench" --benchmark_counters_tabular=true --benchmark_filter="$filter" 2>&1
    echo '```'
  done
} > "$out"
rm -f "$table"
echo "hybrids.sh: the table is in $out" >&2
