#!/usr/bin/env bash
# Usage: tools/cross-check-aarch64.sh [DIR]        (DIR defaults to build/cross-aarch64/)
#
# Checks, on an x86-64 machine, that kiln builds for aarch64 hosts (GH200, GB200). ctest runs it as the
# test `cross.aarch64` (label `cross`); it exits 77, which ctest reports as skipped, when the cross compiler
# (Debian g++-aarch64-linux-gnu, installed by tools/setup.sh --cross) is missing. Steps:
#   1. DIR/deps: fmt, nlohmann-json, xxhash and googletest from the build machine's Debian packages, made by
#      tools/prepare-device-deps.sh. They are headers and sources, the same for every architecture; the
#      cross compiler gets these and nothing else of /usr/include (whose glibc headers are x86-64's).
#   2. DIR/build: CMake configures kiln with cmake/aarch64-linux-gnu.cmake and -DKILN_DEPS_DIR=DIR/deps, so
#      every compile command has the flags, definitions and include directories of the real build.
#   3. The library (every layer's static library: src/, codegen/) is built for real, -O2 as tools/build.sh
#      builds it and warnings are errors: -fsyntax-only would neither assemble the aarch64 context switch
#      nor run the optimizer's warnings (-Wmaybe-uninitialized differs between targets: one fired only on
#      aarch64). The tests (tests/) are compiled with their commands and -fsyntax-only, in parallel.
#   4. The kernels of tests/emu/*.cu compile for aarch64 as the emu backend compiles them at run time.
#   5. tests/emu/fiber_selftest.cpp is linked statically with those objects and, when qemu-aarch64 is there
#      (Debian qemu-user, which tools/setup.sh --cross installs; or qemu-user-static), run: it checks that the switch
#      keeps every callee-saved register, the rounding mode and the stack alignment. Without qemu this step
#      says so and passes.
# Nothing is linked against fmt or gtest: there are no arm64 builds of them here. Not covered: the code under
# KILN_HAVE_NVRTC* (the CUDA toolkit is the build machine's; it is kept out), tools/, samples/.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=$(mkdir -p "${1:-$root/build/cross-aarch64}" && cd "${1:-$root/build/cross-aarch64}" && pwd)
cxx=aarch64-linux-gnu-g++
start=$(date +%s)
say() { echo "cross-check-aarch64: $* ($(($(date +%s) - start)) s)"; }

if ! command -v "$cxx" >/dev/null; then
  echo "cross-check-aarch64: skipped: $cxx is not installed (tools/setup.sh --cross installs g++-aarch64-linux-gnu)"
  exit 77
fi

"$root/tools/prepare-device-deps.sh" "$dir/deps" >/dev/null

# CUDA is kept out: a toolkit found on this machine would put its x86-64 headers on the include path.
if ! cmake -S "$root" -B "$dir/build" -G Ninja -DCMAKE_TOOLCHAIN_FILE="$root/cmake/aarch64-linux-gnu.cmake" \
     -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKILN_WERROR=ON -DKILN_DEPS_DIR="$dir/deps" \
     -DCMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit=ON >"$dir/configure.log" 2>&1; then
  cat "$dir/configure.log"
  exit 1
fi
say "configured $dir/build with $($cxx -dumpfullversion)"

# The compile commands of the library and the tests, as ninja would run them in $dir/build: one a line,
# quoted for sh, ending in "-c <source>". Only our own sources (not gtest's or the generated embedded
# headers, which are data).
ninja -C "$dir/build" -t commands kiln kiln_tests | grep -E -- " -c ($root/(src|codegen|tests)/[^ ]*\.cpp)$" \
  >"$dir/commands.txt" || true
n=$(wc -l <"$dir/commands.txt")
if [ "$n" -lt 50 ]; then  # a guard against a filter that silently matches (almost) nothing
  echo "cross-check-aarch64: only $n compile commands found in $dir/build; expected the whole library and tests"
  exit 1
fi

# The library: every layer's objects and archive, through ninja (the fiber files among them).
mapfile -t fiber_objs < <(grep -E -- "-c $root/src/runtime/emu/fiber[^ ]*\.cpp$" "$dir/commands.txt" |
                           sed -E 's/.* -o ([^ ]+) .*/\1/')
if [ ${#fiber_objs[@]} -lt 3 ]; then
  echo "cross-check-aarch64: expected fiber.cpp and two fiber_switch_*.cpp in the library, found ${#fiber_objs[@]}"
  exit 1
fi
if ! ninja -C "$dir/build" -j "$(nproc)" kiln_runtime kiln_json >"$dir/library.log" 2>&1; then
  grep -E -A20 "^FAILED|error:" "$dir/library.log" | head -80
  say "FAILED: the library does not build for aarch64 (above; whole log: $dir/library.log)"
  exit 1
fi
say "the library builds for aarch64 (-O2, warnings are errors; ${#fiber_objs[@]} fiber files assembled)"

# The tests: -fsyntax-only, without the dependency-file flags (-MD -MT x -MF y: their directories
# need not exist, and nothing reads them). Each failure prints its source and the compiler's output whole.
syntax_check() {
  local cmd=$1 src=${1##* }
  cmd=$(sed -E 's/ -MD -MT [^ ]+ -MF [^ ]+//' <<<"$cmd")
  local out
  if ! out=$(cd "$dir/build" && eval "$cmd -fsyntax-only" 2>&1); then
    printf 'cross-check-aarch64: FAILED: %s\n%s\n' "${src#"$root"/}" "$out"
    return 1
  fi
}
export -f syntax_check
export dir root
jobs=$(nproc)
tests=$(grep -c -E -- " -c $root/tests/[^ ]*\.cpp$" "$dir/commands.txt" || true)
if ! grep -E -- " -c $root/tests/[^ ]*\.cpp$" "$dir/commands.txt" |
     xargs -d '\n' -n 1 -P "$jobs" bash -c 'syntax_check "$1"' _; then
  say "some test sources do not compile for aarch64 (above)"
  exit 1
fi
say "$tests test sources compile for aarch64"

# The hand-written kernels of tests/emu/ as the emu backend compiles them at run time on an aarch64 host
# (the host side of templates/kiln/device.cuh; src/runtime/emu/compile.cpp's language flags).
kernels=("$root"/tests/emu/*.cu)
if ! printf '%s\n' "${kernels[@]}" | xargs -d '\n' -n 1 -P "$jobs" \
     "$cxx" -x c++ -std=c++20 -fno-strict-aliasing -fsyntax-only -I"$root/templates"; then
  say "FAILED: a kernel of tests/emu/ does not compile for aarch64 (above)"
  exit 1
fi
say "${#kernels[@]} kernels of tests/emu/ compile for aarch64"

# The fiber self-test, linked statically (no arm64 shared libraries are needed to run it under qemu).
if ! "$cxx" -std=c++20 -O2 -Wall -Wextra -Wpedantic -Werror -static -I"$root/src" -I"$root/tests" \
     "$root/tests/emu/fiber_selftest.cpp" "${fiber_objs[@]/#/$dir/build/}" -o "$dir/fiber_selftest"; then
  echo "cross-check-aarch64: FAILED: linking tests/emu/fiber_selftest.cpp for aarch64"
  exit 1
fi
qemu=$(command -v qemu-aarch64 || command -v qemu-aarch64-static || true)
if [ -z "$qemu" ]; then
  say "fiber_selftest linked, not run: no qemu-aarch64 (Debian qemu-user)"
  exit 0
fi
if ! timeout 60 "$qemu" "$dir/fiber_selftest"; then
  echo "cross-check-aarch64: FAILED: the aarch64 fiber switch under $(basename "$qemu") (above)"
  exit 1
fi
say "fiber_selftest passed under $(basename "$qemu")"
