#!/usr/bin/env bash
# Builds recur and runs one job. Installs any missing Debian packages first (as root).
#
#   tools/build.sh generate [args]  release build, then `recur generate` (the main job: the
#                                built-in model unless -m DIR is given)
#   tools/build.sh demo [args]   release build, then `recur demo` (one attention layer alone)
#   tools/build.sh test          release build, then every test
#   tools/build.sh asan          AddressSanitizer + UBSan build, then every test
#   tools/build.sh bench [linear|kv|model] [args]
#                                release build, then bench/bench_<name> (default linear)
#   tools/build.sh recur [args]  release build, then `recur` with your arguments
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(g++ cmake ninja-build libeigen3-dev libfmt-dev libspdlog-dev catch2 libbenchmark-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "build.sh: installing ${missing[*]}" >&2
  sudo=""
  [[ $(id -u) -ne 0 ]] && sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
fi

job="${1:-generate}"
shift || true
jobs=$(nproc)
case "$job" in
  generate|demo|test|bench|recur) preset=release ;;
  asan) preset=asan ;;
  *) echo "build.sh: unknown job '$job' (generate, demo, test, asan, bench, recur)" >&2; exit 2 ;;
esac
# Warnings are errors only where RECUR_WERROR=ON is set (CI does): a user's build never fails on one.
cmake --preset "$preset" -DRECUR_WERROR="${RECUR_WERROR:-OFF}" >/dev/null
cmake --build --preset "$preset" -j "$jobs"
case "$job" in
  generate) exec "build/$preset/tools/recur" generate "$@" ;;
  demo) exec "build/$preset/tools/recur" demo "$@" ;;
  recur) exec "build/$preset/tools/recur" "$@" ;;
  test|asan) ctest --preset "$preset" -j "$jobs" ;;
  bench)
    name=linear
    if [[ $# -gt 0 && "$1" =~ ^(linear|kv|model)$ ]]; then name="$1"; shift; fi
    exec "build/$preset/bench/bench_$name" "$@" ;;
esac
