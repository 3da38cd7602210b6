#!/usr/bin/env bash
# Falcon-H1 (tests/falcon_h1: transformers' falcon_h1 layout without the gated norm, with it
# before and after the gate, every multiplier, biases, bf16) through the recur binary:
# - recur score on each committed random-weight checkpoint within 1e-6 relative of the float64
#   reference (tests/falcon_h1/reference.py) that wrote expected_nll.txt;
# - the same 17 digits at chunk sizes 1, 7, 64 and 300, on 1-3 threads, and under every
#   instruction set; the reference's 8 greedy ids after the prompt;
# - a state saved after a prompt continues as one run, under every instruction set; it grows by
#   the attention's keys and values alone;
# - recur quantize to q8 and q4 (A_log, dt_bias, D, the norms and the convolution stay as
#   stored) and convert keep the digits at every chunking;
# - make-model --arch falcon_h1 writes models that read back with the same digits.
#
#   tests/falcon_h1_model_test.sh RECUR SOURCE_DIR
set -euo pipefail
recur="$1" src="$2"
fx="$src/tests/falcon_h1"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ids="$src/tests/mamba2/prompt_ids.txt"
isas=$("$recur" isa --available)
name=falcon_h1_model_test
# shellcheck source=tests/ssd_model_lib.sh
source "$src/tests/ssd_model_lib.sh"

[[ $(wc -l < "$fx/expected_nll.txt") == 3 ]] || fail "expected_nll.txt should list 3 fixtures"
check_fixtures "$fx"
for fixture in falcon-h1 falcon-h1-norm; do check_saved_state "$fx/$fixture"; done

# falcon-h1: 2 layers, each a key and a value of 2 kv heads of 8 floats a token.
s100=$(state_at "$fx/falcon-h1" 100)
s3k=$(state_at "$fx/falcon-h1" 3000)
[[ $((s3k - s100)) == $((2900 * 2 * 2 * 2 * 8 * 4)) ]] ||
  fail "falcon-h1: the state grew by $((s3k - s100)) bytes over 2,900 tokens, not 2,900 x 256"
say "falcon-h1's state grows from $s100 bytes by 256 a token, the attention's KV cache"

# quantize q8 / q4 and convert: the projections and the head quantized, the rest as stored.
while read -r fixture _; do
  check_quantized "$fx/$fixture" '(A_log|dt_bias|mamba\.D|conv1d\.(weight|bias)|norm\.weight|layernorm\.weight) ' \
    '(in_proj|out_proj|q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj)\.weight '
done < "$fx/expected_nll.txt"

check_made "$tmp/made-1" --arch falcon_h1 --heads 4 --attn-kv-heads 2 --ssm-groups 2 --ssm-rms-norm --multipliers
check_made "$tmp/made-2" --arch falcon_h1 --heads 2 --ssm-heads 3 --ssm-head-dim 16 --tie-embeddings
say "make-model --arch falcon_h1 writes models that read back with the same digits at chunks 1 and 64"
