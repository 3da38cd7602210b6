#!/usr/bin/env bash
# recur beside llama.cpp on the same random weights, in one run: prefill and decode tokens/s of
# both engines at the same shapes, weight formats and thread counts, and their ratio.
#
#   bench/peer/llama_cpp.sh [--shapes qwen35-0.8B,rwkv7-0.4B] [--formats bf16,q8]
#                           [--threads 1,2] [--rounds 3] [--tg 64] [--depth 512]
#                           [--shape 'NAME CONFIG ARCHITECTURE VOCAB PROMPTS FLAGS'] [--out FILE]
#                           [--models-only]
#
# What it does (everything under build/peer/, reused when already there):
#  1. llama.cpp: clones the source bundle that the npm package node-llama-cpp ships
#     ($LLAMA_BUNDLE; `npm pack node-llama-cpp` into build/peer/npm when it is not there) and
#     builds llama-bench and llama-quantize (CPU only, Release, -j2; the ISA: isa_flags below).
#  2. recur: builds recur and bench/bench_model_dir in build/release (-j2).
#  3. Per shape of bench/peer/shapes.tsv: `recur make-model --config shapes/X.json --dtype bf16
#     --seed 1` (random bf16 weights, as the Hub ships these models), `recur quantize --type
#     q8` of them, and llama.cpp's convert_hf_to_gguf.py of the same bf16 weights to GGUF bf16
#     and q8_0 (bench/peer/convert.py: the stand-ins it needs here are listed there).
#  4. bench/peer/compare.py: the two engines alternately, `--rounds` times, the best of each;
#     a Markdown table on stdout (and in --out). --models-only stops before this step.
#
# What the numbers mean (both engines, the same rule; llama-bench's):
#   pp N   tokens/s of one N-token prompt from an empty state, after an untimed warm-up prompt.
#   tg N   tokens/s of N single-token steps (full logits, no sampling) after an untimed
#          --depth-token prompt (llama-bench's "tg N @ d512").
# The weights are random, so only speed means anything. A benchmark, never a test: CI's
# .ci/run does not run it. A shape whose model_type recur cannot make is skipped, saying so.
# bench/peer/hybrids.sh runs this at the Mamba-2 and short-convolution hybrids' shapes (issue 44).
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
here="$root/bench/peer"
peer="${PEER_DIR:-$root/build/peer}"
recur_build="${RECUR_BUILD:-$root/build/release}"
bundle="${LLAMA_BUNDLE:-/tmp/nlc.bMLa/package/llama/gitRelease.bundle}"
python="${PYTHON:-/usr/bin/python3}"   # Debian's: python3-torch and python3-numpy

shapes="" formats="bf16,q8" threads="1,2" rounds=3 tg=64 depth=512 out="" extra=() models_only=""
while (($#)); do
  case "$1" in
    --shapes) shapes="$2"; shift 2 ;;
    --formats) formats="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --tg) tg="$2"; shift 2 ;;
    --depth) depth="$2"; shift 2 ;;
    --shape) extra+=("$2"); shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --models-only) models_only=1; shift ;;
    -h|--help) sed -n '2,30p' "$0"; exit 0 ;;
    *) echo "llama_cpp.sh: unknown argument '$1' (--help)" >&2; exit 2 ;;
  esac
done
mkdir -p "$peer"
log() { echo "[llama_cpp.sh $(date -u +%H:%M:%S)] $*" >&2; }

# --- 1. llama.cpp ---------------------------------------------------------------------------
llama="$peer/llama.cpp"
if [[ ! -d "$llama/.git" ]]; then
  if [[ ! -f "$bundle" ]]; then
    log "no bundle at $bundle: npm pack node-llama-cpp into $peer/npm"
    mkdir -p "$peer/npm" && (cd "$peer/npm" && npm pack node-llama-cpp >/dev/null && tar xzf node-llama-cpp-*.tgz)
    bundle="$peer/npm/package/llama/gitRelease.bundle"
  fi
  log "cloning $bundle"
  git clone -q "$bundle" "$llama"
fi
# The instruction sets: -march=native, except where the CPU lists AMX. ggml's AMX kernels for
# q8_0 died of SIGILL at their first tile load on the Sapphire Rapids KVM guest this was written
# on, so there the ISA is the CPU's own list without AMX (LLAMA_CPP_ISA overrides either).
isa_flags() {
  local cpu; cpu=$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null || true)
  if [[ -n "${LLAMA_CPP_ISA:-}" ]]; then echo "$LLAMA_CPP_ISA"; return; fi
  if [[ " $cpu " != *" amx_tile "* ]]; then echo "-DGGML_NATIVE=ON"; return; fi
  local out="-DGGML_NATIVE=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF" f v
  for f in sse4_2:SSE42 avx:AVX avx2:AVX2 fma:FMA f16c:F16C bmi2:BMI2 avx_vnni:AVX_VNNI \
           avx512f:AVX512 avx512vbmi:AVX512_VBMI avx512_vnni:AVX512_VNNI avx512_bf16:AVX512_BF16; do
    v=OFF; [[ " $cpu " == *" ${f%%:*} "* ]] && v=ON
    out+=" -DGGML_${f#*:}=$v"
  done
  echo "$out"
}
if [[ ! -x "$llama/build/bin/llama-bench" || ! -x "$llama/build/bin/llama-quantize" ]]; then
  log "building llama.cpp (CPU, Release, -j2; about half an hour on two busy cores)"
  # shellcheck disable=SC2046
  cmake -S "$llama" -B "$llama/build" -G Ninja -DCMAKE_BUILD_TYPE=Release $(isa_flags) \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF \
    -DLLAMA_BUILD_APP=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF \
    -DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache >"$peer/cmake.log"
  cmake --build "$llama/build" -j2 --target llama-bench llama-quantize >"$peer/build.log"
fi
llama_commit=$(git -C "$llama" log -1 --format='%h, %cs')

# --- 2. recur -------------------------------------------------------------------------------
if [[ ! -f "$recur_build/build.ninja" ]]; then
  cmake -S "$root" -B "$recur_build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_CXX_COMPILER_LAUNCHER=ccache >"$peer/recur-cmake.log"
fi
log "building recur and bench_model_dir"
cmake --build "$recur_build" -j2 --target recur_cli bench_model_dir >"$peer/recur-build.log"
recur="$recur_build/tools/recur"

# --- 3. the models --------------------------------------------------------------------------
declare -A cfg arch vocab prompts flags
names=()
add_shape() {  # NAME CONFIG ARCHITECTURE VOCAB PROMPTS FLAGS...
  local n="$1" c="$2"
  [[ "$c" == /* ]] || c="$here/shapes/$c"
  cfg[$n]="$c" arch[$n]="$3" vocab[$n]="$4" prompts[$n]="$5"
  shift 5; flags[$n]="$*"; [[ "${flags[$n]}" == "-" ]] && flags[$n]=""
  names+=("$n")
}
while read -r line; do
  [[ -z "$line" || "$line" == \#* ]] && continue
  # shellcheck disable=SC2086
  add_shape $line
done <"$here/shapes.tsv"
for s in "${extra[@]}"; do
  # shellcheck disable=SC2086
  add_shape $s
done
[[ -n "$shapes" ]] || shapes=$(IFS=,; echo "${names[*]}")

models="$peer/models"
mkdir -p "$models"
make_models() {  # NAME: recur's bf16 and q8 directories, llama.cpp's bf16 and q8_0 GGUFs
  local n="$1" d="$models/$1"
  [[ -n "${cfg[$n]:-}" ]] || { echo "llama_cpp.sh: no shape '$n' (shapes.tsv, --shape)" >&2; exit 2; }
  if [[ ! -f "$d/recur-bf16/config.json" ]] || ! cmp -s "${cfg[$n]}" "$d/shape.json"; then
    rm -rf "$d" && mkdir -p "$d" && cp "${cfg[$n]}" "$d/shape.json"
    log "$n: recur make-model (random bf16 weights, seed 1)"
    if ! "$recur" make-model --config "${cfg[$n]}" --dtype bf16 --seed 1 "$d/recur-bf16" \
           >&2 2>"$d/make-model.log"; then
      # A family recur does not read yet is left out of the table, saying so.
      if grep -q "model_type is '[^']*'; recur reads" "$d/make-model.log"; then
        log "$n: skipped, recur cannot make it yet: $(cat "$d/make-model.log")"
        rm -rf "$d"
        return 0
      fi
      cat "$d/make-model.log" >&2
      exit 1
    fi
  fi
  if [[ ",$formats," == *,q8,* && ! -f "$d/recur-q8/config.json" ]]; then
    log "$n: recur quantize --type q8"
    "$recur" quantize "$d/recur-bf16" "$d/recur-q8" --type q8 >&2
  fi
  local f out
  for f in ${formats//,/ }; do
    out="$d/llama-$f.gguf"
    [[ -f "$out" ]] && continue
    log "$n: convert_hf_to_gguf.py --outtype ${f/q8/q8_0}"
    # shellcheck disable=SC2086
    "$python" "$here/convert.py" "$llama" "$d/recur-bf16" "$d/view" "$out.part" "${f/q8/q8_0}" \
      --architecture "${arch[$n]}" --vocab "${vocab[$n]}" \
      --rwkv-vocab "$root/tests/world/rwkv_vocab_v20230424.txt" ${flags[$n]} >"$d/convert-$f.log" 2>&1 \
      || { echo "llama_cpp.sh: conversion failed, see $d/convert-$f.log" >&2; exit 1; }
    mv "$out.part" "$out"
  done
}

# --- 4. both engines, alternately ----------------------------------------------------------
runs=()
for n in ${shapes//,/ }; do
  make_models "$n"
  [[ -d "$models/$n" ]] || continue  # skipped
  for f in ${formats//,/ }; do
    runs+=("$n" "$f" "$models/$n/recur-$f" "$models/$n/llama-$f.gguf" "${prompts[$n]}")
  done
done
[[ -z "$models_only" ]] || { log "models made under $models"; exit 0; }
log "measuring (rounds $rounds, threads $threads, tg $tg after $depth)"
"$python" "$here/compare.py" --recur-bench "$recur_build/bench/bench_model_dir" \
  --llama-bench "$llama/build/bin/llama-bench" --llama-commit "$llama_commit" \
  --rounds "$rounds" --threads "$threads" --tg "$tg" --depth "$depth" ${out:+--out "$out"} \
  -- "${runs[@]}"
