#!/usr/bin/env bash
# Mamba-2 and its hybrids (tests/mamba2: transformers' mamba2 layout with one, two and four
# groups, biases, clamps, bf16; state-spaces' mamba_ssm layout with the norm before the gate;
# Granite 4.0-H; tests/nemotron_h: Nemotron-H) through the recur binary:
# - recur score on each committed random-weight checkpoint within 1e-6 relative of the float64
#   reference (tests/mamba2/reference.py) that wrote expected_nll.txt;
# - the same 17 digits at chunk sizes 1, 7, 64 and 300, on 1-3 threads, and under every
#   instruction set; the reference's 8 greedy ids after the prompt;
# - a state saved after a prompt continues as one run, under every instruction set, and is the
#   same size after 100 and 100,000 tokens;
# - recur quantize to q8 and q4 (A_log, dt_bias, D, the norms and the convolution stay as
#   stored) and convert keep the digits at every chunking;
# - make-model --arch mamba2 (both layouts), granitemoehybrid and nemotron_h write models that
#   read back with the same digits.
#
#   tests/mamba2_model_test.sh RECUR SOURCE_DIR
set -euo pipefail
recur="$1" src="$2"
fx="$src/tests/mamba2"
nfx="$src/tests/nemotron_h"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ids="$fx/prompt_ids.txt"
isas=$("$recur" isa --available)
name=mamba2_model_test
# shellcheck source=tests/ssd_model_lib.sh
source "$src/tests/ssd_model_lib.sh"

[[ $(wc -l < "$ids") == 300 ]] || fail "$ids should hold 300 ids"
[[ $(wc -l < "$fx/expected_nll.txt") == 6 ]] || fail "$fx/expected_nll.txt should list 6 fixtures"
[[ $(wc -l < "$nfx/expected_nll.txt") == 2 ]] || fail "$nfx/expected_nll.txt should list 2 fixtures"
check_fixtures "$fx"
check_fixtures "$nfx"
# A saved state continues as one run, saved under one instruction set and continued under each.
for m in "$fx/mamba2-groups" "$fx/mamba-ssm" "$fx/granite-hybrid" "$nfx/nemotron-h-hybrid"; do
  check_saved_state "$m"
done
s100=$(state_at "$fx/mamba2-plain" 100)
s100k=$(state_at "$fx/mamba2-plain" 100000)
[[ "$s100" == "$s100k" ]] || fail "mamba2-plain: the state holds $s100 bytes after 101 tokens, $s100k after 100,001"
echo "mamba2_model_test: mamba2-plain's state holds $s100 bytes after 101 tokens and after 100,001"
# granite-hybrid's grows by its two attention layers' keys and values (2 kv heads of 16) alone
# (3,000 tokens: the attention over 100,000 would take minutes).
g100=$(state_at "$fx/granite-hybrid" 100)
g3k=$(state_at "$fx/granite-hybrid" 3000)
[[ $((g3k - g100)) == $((2900 * 2 * 2 * 2 * 16 * 4)) ]] ||
  fail "granite-hybrid: the state grew by $((g3k - g100)) bytes over 2,900 tokens, not 2,900 x 512"
echo "mamba2_model_test: granite-hybrid's state grows from $g100 bytes by 512 a token, its attention layers' KV cache"

# quantize q8 / q4 and convert: the projections and the head quantized, the rest as stored.
for m in "$fx/mamba2-groups" "$fx/mamba-ssm" "$fx/granite-hybrid" "$nfx/nemotron-h-hybrid"; do
  check_quantized "$m" '(A_log|dt_bias|mixer\.D|conv1d\.(weight|bias)|norm\.weight|norm_f\.weight) ' \
    'in_proj\.weight '
done

check_made "$tmp/made" --arch mamba2 --ssm-groups 2 --ssm-dt-max 0.08 --ssm-bias
grep -q '"model_type": "mamba2"' "$tmp/made/config.json" || fail "make-model --arch mamba2 wrote another layout"
check_made "$tmp/made-ssm" --arch mamba2 --mamba-ssm-layout --norm-before-gate --tie-embeddings
grep -q '"ssm_cfg"' "$tmp/made-ssm/config.json" || fail "--mamba-ssm-layout wrote no ssm_cfg"
check_made "$tmp/made-granite" --arch granitemoehybrid --heads 4 --attn-kv-heads 2 --layer-types MAMA --multipliers
check_made "$tmp/made-granite-dense" --arch granitemoehybrid --heads 4 --layer-types AA --rope --tie-embeddings
check_made "$tmp/made-nemotron" --arch nemotron_h --heads 4 --attn-kv-heads 2 --pattern 'M-*M' --ssm-groups 2
grep -q '"hybrid_override_pattern": "M-\*M"' "$tmp/made-nemotron/config.json" || fail "make-model --arch nemotron_h wrote another pattern"
echo "mamba2_model_test: make-model --arch mamba2 (both layouts), granitemoehybrid and nemotron_h writes models that read back with the same digits at chunks 1 and 64"
