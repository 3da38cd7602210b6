#!/usr/bin/env bash
# Runs a test program once under every instruction set this machine supports other than the one
# chosen by default (the plain ctest entries run that one), by setting RECUR_ISA.
#
#   tests/each_isa.sh RECUR PROGRAM [SPEC [SCALAR_SPEC]]
#
# SPEC selects Catch2 test cases (all by default); SCALAR_SPEC, when given, is what the slow
# scalar target runs instead, "-" for nothing (test_isa compares it with the others already).
set -euo pipefail
recur="$1" program="$2" spec="${3:-}" scalar_spec="${4:-${3:-}}"
default=$("$recur" isa)
ran=0
for isa in $("$recur" isa --available); do
  [[ "$isa" == "$default" ]] && continue
  s="$spec"
  [[ "$isa" == scalar ]] && s="$scalar_spec"
  [[ "$s" == - ]] && continue
  echo "each_isa.sh: $(basename "$program") ${s:+\"$s\" }under RECUR_ISA=$isa"
  # --warn NoTests: a spec that matches nothing fails instead of passing quietly.
  if [[ -n "$s" ]]; then RECUR_ISA=$isa "$program" --warn NoTests "$s"
  else RECUR_ISA=$isa "$program"; fi
  ran=$((ran + 1))
done
echo "each_isa.sh: ran under $ran other instruction set(s)"
