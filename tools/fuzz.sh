#!/usr/bin/env bash
# Builds the libFuzzer harnesses (clang, ASan + UBSan) and runs each from its committed seeds.
#
#   tools/fuzz.sh [SECONDS] [RUNS]   each harness for SECONDS (default 60), or until RUNS
#                                    executions when RUNS is given (e.g. 10000000); as many
#                                    harnesses at a time as there are cores
#
# A crash, a sanitizer report, a leak, an exception other than recur::Error or a run over the
# time or memory limits stops the script with a non-zero status; libFuzzer writes the input
# that did it to build/fuzz/findings/. The corpora grow in build/fuzz/corpus/, never in the
# committed seeds (tests/fuzz/corpus/).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"
runs="${2:--1}"

packages=(clang libclang-rt-14-dev libomp-14-dev cmake ninja-build libeigen3-dev libfmt-dev libspdlog-dev
          pkg-config libpcre2-dev libutf8proc-dev libhwy-dev libzip-dev)
bash tools/packages.sh "${packages[@]}"

cmake --preset fuzz -DRECUR_WERROR="${RECUR_WERROR:-OFF}" > /dev/null
cmake --build --preset fuzz -j "$(nproc)"
bin=build/fuzz/tests/fuzz
mkdir -p build/fuzz/findings
# A valid state for fuzz_state's model, made fresh so that it follows the current format.
RECUR_FUZZ_SEED_OUT=tests/fuzz/corpus/state/five_tokens.state "$bin/fuzz_state" -runs=0 > /dev/null 2>&1

# One harness, its log in build/fuzz/fuzz_NAME.log; the status says whether it found anything.
fuzz_one() {
  local name="$1" work="build/fuzz/corpus/$1" log="build/fuzz/fuzz_$1.log"
  mkdir -p "$work"
  cp -n tests/fuzz/corpus/"$name"/* "$work"/ 2> /dev/null || true
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    "$bin/fuzz_$name" "$work" -max_total_time="$seconds" -runs="$runs" -timeout=10 \
    -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 \
    -artifact_prefix=build/fuzz/findings/"$name"- > "$log" 2>&1
}

# The harnesses run as many at a time as there are cores (each is one process on one core), so
# SECONDS bounds each of them and the whole run takes about SECONDS times harnesses / cores.
names=(json config safetensors index state tokenizer world_vocab pytorch request template)
at_once=$(nproc)
for ((i = 0; i < ${#names[@]}; i += at_once)); do
  batch=("${names[@]:i:at_once}")
  pids=()
  for name in "${batch[@]}"; do
    echo "fuzz_$name: up to ${seconds}s$( ((runs > 0)) && echo " or $runs runs")"
    fuzz_one "$name" &
    pids+=($!)
  done
  failed=false
  for j in "${!batch[@]}"; do
    name="${batch[j]}" log="build/fuzz/fuzz_${batch[j]}.log"
    if wait "${pids[j]}"; then
      execs=$(grep -o "stat::number_of_executed_units: *[0-9]*" "$log" | grep -o "[0-9]*$")
      echo "fuzz_$name: $execs executions, nothing found"
    else
      tail -n 60 "$log"
      echo "fuzz.sh: fuzz_$name found a problem (log: $log)" >&2
      failed=true
    fi
  done
  ! $failed || exit 1
done
