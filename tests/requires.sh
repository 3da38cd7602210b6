#!/usr/bin/env bash
# Runs a test only when what it needs from outside the project is here: a program on PATH, or a
# file (an npm package installed by `npm ci`). When something is missing it names what to
# install and exits 77, which ctest reports as a skip (SKIP_RETURN_CODE); where every test must
# run (RECUR_REQUIRE_ALL_TESTS=1, set by tools/build.sh and so by CI) it fails instead.
#
#   tests/requires.sh [--program NAME HINT]... [--file PATH HINT]... -- COMMAND [ARGS...]
#
# HINT says how to get it, e.g. "apt-get install nodejs" or "npm ci in tests/serve".
set -uo pipefail
missing=()
while (($# > 0)) && [[ "$1" != -- ]]; do
  case "$1" in
    --program) command -v "$2" > /dev/null 2>&1 || missing+=("$2 (${3})"); shift 3 ;;
    --file) [[ -e "$2" ]] || missing+=("$2 (${3})"); shift 3 ;;
    *) echo "requires.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
done
[[ "${1:-}" == -- ]] || { echo "requires.sh: no command after --" >&2; exit 2; }
shift
if ((${#missing[@]})); then
  for m in "${missing[@]}"; do echo "requires.sh: missing $m" >&2; done
  if [[ "${RECUR_REQUIRE_ALL_TESTS:-0}" == 1 ]]; then
    echo "requires.sh: RECUR_REQUIRE_ALL_TESTS is set, so a missing dependency fails the test" >&2
    exit 1
  fi
  echo "requires.sh: skipped (tools/build.sh test installs all of it)" >&2
  exit 77
fi
exec "$@"
