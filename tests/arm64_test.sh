#!/usr/bin/env bash
# recur on 64-bit ARM, under qemu: the cross-built tests that prove the point (every instruction
# set against the scalar target's bytes, the matrix kernel, the model's exactness and saved
# states, I/O, the tokenizer), then
# the same score digits and greedy tokens as this machine's build under each of its instruction
# sets.
#   tests/arm64_test.sh ARM64_BUILD_DIR X86_RECUR
set -euo pipefail
build="$1" native="$2"
# qemu runs one thread well; OpenMP's two threads spin against each other under it. One thread
# also exercises the fixed split of the work (results never depend on the thread count).
export OMP_THREAD_LIMIT=1 OMP_WAIT_POLICY=passive
export QEMU_LD_PREFIX=/usr/aarch64-linux-gnu
export LOCPATH="$build/tests/locale"
start=$(date +%s)
run() {
  echo "arm64_test.sh: $*"
  qemu-aarch64 "$@"
}
run "$build/tools/recur" isa --available
run "$build/tests/test_isa"
run "$build/tests/test_matmul"
run "$build/tests/test_quant"
run "$build/tests/test_gated_attention" --warn NoTests "[exactness],[isa],[gates]"
# The delta rule's update (RWKV-7, Gated DeltaNet): NEON's bytes against the scalar order.
run "$build/tests/test_delta" --warn NoTests "[exactness]"
# Every family's fixtures: prefill against stepping at every chunking, NEON's bytes against the
# scalar target's, saved states and clones.
run "$build/tests/test_conformance" --warn NoTests "[exact],[state]"
run "$build/tests/test_model" --warn NoTests "prefill in any chunking*"
run "$build/tests/test_model" --warn NoTests "[state]"
run "$build/tests/test_io"
run "$build/tests/test_tokenizer" "~[oracle]"
wrapper="$build/recur-qemu"
printf '#!/bin/sh\nexec qemu-aarch64 %q "$@"\n' "$(realpath "$build/tools/recur")" > "$wrapper"
chmod +x "$wrapper"
# Four models of several layouts: x86-64's best kernels against NEON, and the scalar targets of
# both (test_isa has already compared each machine's targets with each other).
echo "arm64_test.sh: x86-64 against arm64 (neon)"
bash tests/cross_build_test.sh "$native" "env RECUR_ISA=neon $wrapper"
echo "arm64_test.sh: x86-64 (scalar) against arm64 (scalar)"
bash tests/cross_build_test.sh "env RECUR_ISA=scalar $native" "env RECUR_ISA=scalar $wrapper"
# The built-in model on a page of held-out text: the same 17 digits under every target of both.
head -c 3000 models/kjv/heldout.txt > "$build/page.txt"
want=$("$native" score -f "$build/page.txt" --json)
echo "x86-64 ($("$native" isa)): $want"
for isa in $("$native" isa --available); do
  got=$(RECUR_ISA=$isa "$native" score -f "$build/page.txt" --json)
  [[ "$got" == "$want" ]] || { echo "FAIL: x86-64 under $isa prints $got"; exit 1; }
done
for isa in $("$wrapper" isa --available); do
  got=$(RECUR_ISA=$isa "$wrapper" score -f "$build/page.txt" --json)
  echo "arm64 ($isa): $got"
  [[ "$got" == "$want" ]] || { echo "FAIL: arm64 under $isa differs from x86-64"; exit 1; }
done
echo "arm64_test.sh: all passed in $(( $(date +%s) - start )) s"
