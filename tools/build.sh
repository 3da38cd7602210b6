#!/usr/bin/env bash
# Builds recur and runs one job. Installs any missing Debian packages first (as root, or
# through sudo).
#
#   tools/build.sh generate [args]  release build, then `recur generate` (the main job: the
#                                built-in model unless -m DIR is given)
#   tools/build.sh demo [args]   release build, then `recur demo` (one attention layer alone)
#   tools/build.sh test          release build, then every test
#   tools/build.sh asan          AddressSanitizer + UBSan build, then every test
#   tools/build.sh native        build with -march=native (opt-in: the default build runs on any
#                                CPU of its architecture and picks its kernels at run time),
#                                then every test
#   tools/build.sh arm64         cross-build for 64-bit ARM (Debian's aarch64 cross compiler and
#                                arm64 libraries), then run the exactness, model and I/O tests
#                                and the cross-architecture comparison under qemu
#   tools/build.sh tsan          ThreadSanitizer build (clang, OpenMP through LLVM's Archer),
#                                then the thread tests, also under OMP_THREAD_LIMIT=1, and
#                                recur serve under the OpenAI client's test
#   tools/build.sh isa NAME...   compile the whole tree for each -march NAME (x86-64-v4,
#                                x86-64, ...) without running it: warnings there break no
#                                machine of ours, so they are caught here
#   tools/build.sh bench [linear|kv|model|tokenizer|serve|store|based|gated|fla|delta|rwkv7|qwen35|python] [args]
#                                release build, then bench/bench_<name> (default linear);
#                                tokenizer also runs Hugging Face's library on the same texts
#                                and prints the two side by side; serve is the load test of
#                                recur serve (bench/serve_load), store the conversation store
#                                against a local Redis, based Based's layers and a model of
#                                based-360m's shape; gated one gated layer at gla-, hgrn2-
#                                and retnet-1.3B's attention shapes; fla whole models of
#                                gla- and hgrn2-1.3B's shapes (bf16), then eager PyTorch at
#                                the same shapes (tests/fla/torch_bench.py), side by side;
#                                delta the delta rule's update at RWKV-7 and Qwen3.5 heads;
#                                rwkv7 whole RWKV-7 models at the 0.4B and 1.5B shapes (bf16
#                                and q8), then eager PyTorch at the same shapes
#                                (tests/rwkv7/torch_bench.py), side by side; qwen35 whole
#                                Qwen3.5 text models at the 0.8B and 2B shapes (bf16 and q8,
#                                prompts of 512 and 4,096), then eager PyTorch at the same
#                                shapes (tests/gdn/torch_bench.py), side by side; python
#                                Python's overhead per State.step() (bench/bench_python.py)
#   tools/build.sh recur [args]  release build, then `recur` with your arguments
#   tools/build.sh python [args] release build of the Python module (python/, RECUR_PYTHON) and
#                                the CLI, then its pytest suite (tests/python; args go to pytest)
#   tools/build.sh train [args]  train the built-in model again (tools/train/train.py; writes
#                                models/kjv unless --out DIR is given; about 40 minutes)
#   (tools/fuzz.sh runs the fuzzers.)
#
# Warnings are errors only where RECUR_WERROR=ON is set in the environment (CI sets it): a
# user's build never fails on a warning from a compiler we have not seen.
set -euo pipefail
cd "$(dirname "$0")/.."

job="${1:-generate}"
shift || true
packages=(g++ cmake ninja-build libeigen3-dev libfmt-dev libspdlog-dev libcli11-dev catch2
          libbenchmark-dev locales pkg-config libpcre2-dev libutf8proc-dev libhwy-dev libzip-dev
          libcpp-httplib-dev libhiredis-dev libssl-dev)
[[ "$job" == tsan ]] && packages+=(clang libclang-rt-14-dev libomp-14-dev)
[[ "$job" == arm64 ]] && packages+=(qemu-user g++-aarch64-linux-gnu)
# The Python module (the release test job runs its tests too): pybind11 and numpy, pytest.
python=false
[[ "$job" =~ ^(test|python)$ || ( "$job" == bench && "${1:-}" == python ) ]] && python=true
$python && packages+=(pybind11-dev python3-pybind11 python3-numpy python3-pytest python3-dev)
if [[ "$job" == train ]]; then
  bash tools/packages.sh python3-torch libopenblas0-pthread bible-kjv
  out=(--out models/kjv)
  [[ " $* " == *" --out "* ]] && out=()
  exec /usr/bin/python3 tools/train/train.py "${out[@]}" "$@"
fi
# The tests compare the tokenizer with Hugging Face's own library, and talk to recur serve with
# OpenAI's own client, both from the npm registry.
needs_oracle=false
[[ "$job" =~ ^(test|asan|native|bench|tsan)$ ]] && needs_oracle=true
$needs_oracle && ! command -v npm > /dev/null && packages+=(nodejs npm)
# The replicas' test starts Redis and nginx (deploy/); tools/quant_reader.py's test needs numpy;
# the chat templates' oracle is Jinja2 (tests/template), structured output's jsonschema
# (tests/grammar); recur chat's test drives a terminal with tmux.
$needs_oracle && packages+=(redis-server nginx python3-numpy python3-jinja2 python3-jsonschema tmux)
# The release test job recomputes the fla fixtures' float64 expectations (tests/fla) with PyTorch,
# and drives recur serve's chat page in Debian's chromium.
[[ "$job" == test ]] && packages+=(python3-torch chromium)
# The fla models' benchmark runs PyTorch beside recur, with OpenBLAS as a user would install it.
[[ "$job" == bench && "${1:-}" =~ ^(fla|rwkv7|qwen35)$ ]] && packages+=(python3-torch libopenblas0-pthread)
bash tools/packages.sh "${packages[@]}"
if $needs_oracle && [[ ! -f tests/tokenizer/node_modules/.package-lock.json ||
                       tests/tokenizer/package-lock.json -nt tests/tokenizer/node_modules/.package-lock.json ]]; then
  echo "build.sh: installing the tokenizer reference (npm ci in tests/tokenizer)" >&2
  (cd tests/tokenizer && npm ci --no-audit --no-fund --loglevel=error >&2)
fi
if $needs_oracle && [[ ! -f tests/serve/node_modules/.package-lock.json ||
                       tests/serve/package-lock.json -nt tests/serve/node_modules/.package-lock.json ]]; then
  echo "build.sh: installing the OpenAI client (npm ci in tests/serve)" >&2
  (cd tests/serve && npm ci --no-audit --no-fund --loglevel=error >&2)
fi

jobs=$(nproc)
werror="${RECUR_WERROR:-OFF}"
case "$job" in
  generate|demo|test|bench|recur|python) preset=release ;;
  asan|native|tsan) preset="$job" ;;
  arm64)
    # The arm64 builds of the libraries come from Debian's multiarch archive.
    if ! dpkg --print-foreign-architectures | grep -qx arm64; then
      sudo=""; [[ $(id -u) -ne 0 ]] && sudo="sudo"
      $sudo dpkg --add-architecture arm64
      $sudo apt-get update -qq
    fi
    bash tools/packages.sh g++-aarch64-linux-gnu qemu-user libfmt-dev:arm64 libspdlog-dev:arm64 \
      libpcre2-dev:arm64 libutf8proc-dev:arm64 libhwy-dev:arm64 libzip-dev:arm64
    cmake -S . -B build/arm64 -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake -DRECUR_BUILD_BENCHMARKS=OFF -DRECUR_SERVE=OFF \
      -DRECUR_DISCOVER_TESTS=OFF -DRECUR_WERROR="$werror" > /dev/null
    cmake --build build/arm64 -j "$jobs"
    # For the comparison: this machine's own build.
    cmake --preset release -DRECUR_WERROR="$werror" > /dev/null
    cmake --build --preset release -j "$jobs" --target recur_cli
    exec bash tests/arm64_test.sh build/arm64 build/release/tools/recur ;;
  isa)
    (($# > 0)) || { echo "build.sh isa: name at least one -march target" >&2; exit 2; }
    for arch in "$@"; do
      echo "build.sh: compiling the whole tree for -march=$arch" >&2
      cmake -S . -B "build/isa-$arch" -G Ninja -DCMAKE_BUILD_TYPE=Release -DRECUR_NATIVE=OFF \
        -DCMAKE_CXX_FLAGS="-march=$arch" -DRECUR_DISCOVER_TESTS=OFF -DRECUR_BUILD_BENCHMARKS=OFF \
        -DRECUR_WERROR="$werror" > /dev/null
      cmake --build "build/isa-$arch" -j "$jobs"
    done
    exit 0 ;;
  *) echo "build.sh: unknown job '$job' (generate, demo, test, asan, native, arm64, tsan, isa, bench, recur, python, train)" >&2
     exit 2 ;;
esac
# Here every dependency of every test was installed above, so a test that finds one missing
# fails instead of being skipped (RECUR_REQUIRE_ALL_TESTS; a plain ctest skips it).
require_all=OFF
$needs_oracle && require_all=ON
# The module is built by Debian's Python (another python3 may come first on PATH). Once on, it
# stays on for the release tree (a job that does not ask leaves the cache as it is), so that the
# library is not compiled again without -fPIC.
py_args=()
$python && py_args=(-DRECUR_PYTHON=ON -DPython3_EXECUTABLE=/usr/bin/python3)
cmake --preset "$preset" -DRECUR_WERROR="$werror" -DRECUR_REQUIRE_ALL_TESTS="$require_all" "${py_args[@]}" > /dev/null
if [[ "$job" == python || ( "$job" == bench && "${1:-}" == python ) ]]; then
  cmake --build --preset release -j "$jobs" --target recur_python recur_cli
  [[ "$job" == bench ]] && exec /usr/bin/python3 bench/bench_python.py "${@:2}"
  PYTHONPATH=build/release/python RECUR_CLI=build/release/tools/recur \
    exec /usr/bin/python3 -m pytest -q -p no:cacheprovider tests/python "$@"
fi
if [[ "$job" == tsan ]]; then
  # One ThreadSanitizer build serves the thread tests and the server's.
  cmake --build --preset tsan -j "$jobs" --target test_threads test_matmul test_quant recur_cli
  # Archer tells ThreadSanitizer what OpenMP's barriers and tasks order; the OpenMP runtime
  # itself is not instrumented, so its own internals are left out of the reports.
  export OMP_TOOL_LIBRARIES=/usr/lib/llvm-14/lib/libarcher.so
  export TSAN_OPTIONS="ignore_noninstrumented_modules=1 halt_on_error=1 exitcode=66"
  # Keep the helpers in every job, however slow the instrumented threads are or however busy
  # the machine: a pool that leaves a helper out (docs/cli.md, --threads) would hide its races.
  export RECUR_RUN_DELAY=off RECUR_LATE_US=1000000000
  t=build/tsan/tests
  "$t/test_threads"
  OMP_THREAD_LIMIT=1 "$t/test_threads"
  "$t/test_matmul" "matmul: every row gives the same bytes whatever the rows and threads around it"
  "$t/test_quant" "quant: every row of the product is the reference's bytes, for any rows and threads"
  # recur serve: the engine thread, the HTTP threads and OpenMP, under the OpenAI client's test
  # (a race ends the server with status 66, which the test's checks catch).
  node tests/serve/client_test.mjs build/tsan/tools/recur
  echo "build.sh tsan: no data race reported"
  exit 0
fi
cmake --build --preset "$preset" -j "$jobs"
case "$job" in
  generate) exec "build/$preset/tools/recur" generate "$@" ;;
  demo) exec "build/$preset/tools/recur" demo "$@" ;;
  recur) exec "build/$preset/tools/recur" "$@" ;;
  test) ctest --preset "$preset" -j "$jobs" ;;
  # Under the sanitizers the server runs its client test (and the replicas'); the hostile clients',
  # the Based model's and the gated models' server tests, and the Based fixtures' CLI test (its
  # layers and model run under the sanitizers in test_based_layers and test_model), prove nothing
  # more there than in the release job. Nor do the suites' reruns under the other instruction
  # sets: test_isa runs every target's kernels under the sanitizers, and the reruns only compare
  # bytes.
  # The same holds for the fla models' and the built-in model's CLI tests (their layers and
  # models run under the sanitizers in test_gated_attention and test_model), the million-token
  # fidelity tests (numeric bounds, not memory ones) and the chunking suite under the relu and
  # identity maps (the same walk and input pass as elu+1's, which runs). (The tokenizer oracle
  # stays: it writes what the tokenizer's comparison reads, a ctest fixture that -E would drop.)
  # The same for RWKV-7's CLI test (its model runs under the sanitizers in test_rwkv7), the
  # golden outputs (bytes, checked by the release and native jobs), the server's chat test (the
  # chat parser runs under them in test_serve and fuzz_request) and the float64 references,
  # which are Python alone.
  asan) ctest --preset "$preset" -j "$jobs" -E "^(recur serve (against hostile clients|with a Based model|with gated models|chat)|Based from its published layout|fla's GLA|RWKV-7|Gated DeltaNet|golden:|the built-in model: recur score|a 1M-token stream|a million tokens stay|prefill matches step\(\) bit for bit in any chunking, split and thread count: (relu|identity))|under every instruction set$" ;;
  # The native build's point is its kernels' bytes: what runs no kernel (the server, the
  # tokenizers, the chat templates and recur chat, the float64 references, the CMake consumer,
  # the documentation's links) is left to the release job, and so
  # are the CLI tests of the built-in, Based and fla models and the reruns under the other
  # instruction sets: .ci/run compares the native binary's bytes with the release binary's on
  # those models (tests/cross_build_test.sh), and the test programs run here as they are.
  native) ctest --preset "$preset" -j "$jobs" -E "^(recur serve|another CMake project|tokenizer|world tokenizer|chat template|recur (chat|template|tokenize)|RWKV-7: |Gated DeltaNet|docs:|Based from its published layout|fla's GLA|the built-in model: recur score|recur bench|recur demo)|under every instruction set$" ;;
  bench)
    name=linear
    if [[ $# -gt 0 && "$1" =~ ^(linear|kv|model|tokenizer|serve|store|based|gated|fla|delta|rwkv7|qwen35)$ ]]; then name="$1"; shift; fi
    # The load test of recur serve: starts the server, plays the clients (bench/serve_load.cpp).
    [[ "$name" == serve ]] && exec "build/$preset/bench/serve_load" "build/$preset/tools/recur" "$@"
    if [[ "$name" == tokenizer ]]; then
      out=$(mktemp)
      trap 'rm -f "$out"' EXIT
      "build/$preset/bench/bench_tokenizer" --benchmark_format=json "$@" > "$out"
      node bench/tokenizer_reference.mjs "$out"
      exit 0
    fi
    if [[ "$name" == fla || "$name" == rwkv7 || "$name" == qwen35 ]]; then
      # recur first, then PyTorch: one model in memory at a time.
      out=$(mktemp)
      trap 'rm -f "$out"' EXIT
      "build/$preset/bench/bench_$name" --benchmark_out="$out" --benchmark_out_format=json "$@"
      /usr/bin/python3 "bench/${name}_reference.py" "$out"
      exit 0
    fi
    exec "build/$preset/bench/bench_$name" "$@" ;;
esac
