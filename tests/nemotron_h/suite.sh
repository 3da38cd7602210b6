# tests/model_test.sh's data for Nemotron-H (Mamba-2, attention and MLP blocks; f32 untied, bf16
# tied with biases). Its Mamba-2 blocks are tests/mamba2's: the prompt, and the checks of what
# quantize keeps as stored and of convert, are theirs.
# shellcheck source=../mamba2/suite.sh
source "$src/tests/mamba2/suite.sh"
ids="$src/tests/mamba2/prompt_ids.txt"
tolerance=1e-6
fixtures=2
greedy=8
golden_models="nemotron-h-hybrid nemotron-h-biases"
golden_states="nemotron-h-hybrid"
golden_made=("--arch nemotron_h --vocab 300 --hidden 32 --heads 4 --attn-kv-heads 2 --pattern M-*M- --ssm-groups 2 --dtype bf16")
saved=nemotron-h-hybrid
constant_state="" growing_state=""
quantized=nemotron-h-hybrid
made=("--vocab 300 --hidden 32 --layers 2 --arch nemotron_h --heads 4 --attn-kv-heads 2 --pattern M-*M --ssm-groups 2" '"hybrid_override_pattern": "M-\*M"')
