#!/usr/bin/env bash
# recur as another project's dependency (tests/consumer, a project of ten lines):
# - `cmake --install` of this build into a temporary prefix lays out the headers, the library,
#   the package config, the recur binary and the built-in model, and nothing private;
# - the consumer configures with find_package(recur), builds and runs;
# - the installed binary finds its built-in model from where it is, after the prefix is moved;
# - the consumer takes recur in with add_subdirectory: recur's tests, benchmarks and tools are
#   not built, no build type is forced, and the program prints the same number.
#
#   tests/consumer_test.sh BUILD_DIR SOURCE_DIR [CMAKE]
set -euo pipefail
build="$1" src="$2" cmake="${3:-cmake}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAILED: $*" >&2; exit 1; }
gen=()
command -v ninja > /dev/null && gen=(-G Ninja)

"$cmake" --install "$build" --prefix "$tmp/prefix" > "$tmp/install.log"
for f in include/recur/linear_attention.h include/recur/model.h lib/cmake/recur/recurConfig.cmake \
         lib/cmake/recur/recurConfigVersion.cmake lib/cmake/recur/recurTargets.cmake bin/recur \
         share/recur/models/kjv/config.json share/recur/models/kjv/model.safetensors \
         share/recur/models/kjv/tokenizer.json; do
  [[ -e "$tmp/prefix/$f" ]] || fail "cmake --install did not write $f"
done
ls "$tmp"/prefix/lib/librecur.* > /dev/null 2>&1 || fail "cmake --install did not write the library"
if find "$tmp/prefix/include" -name '*-inl.h' -o -name 'dispatch.h' | grep -q .; then
  fail "private headers were installed: $(find "$tmp/prefix/include" -name '*-inl.h' -o -name dispatch.h)"
fi
if grep -rq "$src" "$tmp/prefix/lib/cmake/recur"; then fail "the package config names the source tree"; fi
echo "consumer_test: installed into a temporary prefix"

"$cmake" -S "$src/tests/consumer" -B "$tmp/find" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$tmp/prefix" > "$tmp/find.log" || { cat "$tmp/find.log"; fail "find_package(recur)"; }
"$cmake" --build "$tmp/find" -j 2 > "$tmp/find-build.log" || { cat "$tmp/find-build.log"; fail "building against the installed recur"; }
found=$("$tmp/find/consumer")
[[ "$found" =~ ^-?[0-9]+\.[0-9]+$ ]] || fail "the consumer printed '$found', not a number"
echo "consumer_test: find_package(recur) builds and runs: $found"

# The installed binary, moved elsewhere with its prefix, runs its built-in model.
mv "$tmp/prefix" "$tmp/moved"
env -u RECUR_MODEL "$tmp/moved/bin/recur" generate -n 4 --greedy -p "And God said" > "$tmp/gen.txt" 2> "$tmp/gen.err" ||
  { cat "$tmp/gen.err"; fail "the installed recur did not find its built-in model"; }
grep -q "built-in" "$tmp/gen.err" || fail "the installed recur did not say it ran the built-in model"
echo "consumer_test: the installed recur, moved, runs its built-in model: $(head -c 60 "$tmp/gen.txt")"

"$cmake" -S "$src/tests/consumer" -B "$tmp/sub" "${gen[@]}" -DRECUR_SOURCE="$src" \
  > "$tmp/sub.log" || { cat "$tmp/sub.log"; fail "add_subdirectory(recur)"; }
grep -q '^CMAKE_BUILD_TYPE:STRING=$' "$tmp/sub/CMakeCache.txt" ||
  fail "recur forced a build type on the project that took it in: $(grep '^CMAKE_BUILD_TYPE' "$tmp/sub/CMakeCache.txt")"
for opt in RECUR_BUILD_TESTS RECUR_BUILD_BENCHMARKS RECUR_BUILD_TOOLS RECUR_SERVE; do
  grep -q "^$opt:BOOL=OFF$" "$tmp/sub/CMakeCache.txt" || fail "$opt is not OFF under add_subdirectory"
done
"$cmake" --build "$tmp/sub" -j 2 > "$tmp/sub-build.log" || { cat "$tmp/sub-build.log"; fail "building recur inside another project"; }
[[ ! -e "$tmp/sub/recur/tests" && ! -e "$tmp/sub/recur/tools/recur" ]] ||
  fail "recur's tests or tools were built inside another project"
sub=$("$tmp/sub/consumer")
[[ "$sub" == "$found" ]] || fail "add_subdirectory's consumer printed $sub, find_package's $found"
echo "consumer_test: add_subdirectory(recur) builds only the library, and the consumer prints $sub"
