#!/usr/bin/env bash
# Usage: tests/install/check_install.sh BUILD_DIR WORK_DIR   (ctest: install.package)
#
# kiln as a user's dependency: installs BUILD_DIR into a fresh prefix, then
#   1. builds samples/cpp/quickstart.cpp out of tree with find_package(kiln CONFIG) and runs it;
#   2. builds it again with nothing but `pkg-config --cflags --libs kiln` and runs that;
#   3. runs the installed `kiln --version` and `kiln validate` on the graph quickstart wrote, and imports the
#      installed Python module (when it was built) from the prefix alone;
#   4. configures a parent project that add_subdirectory()s kiln beside a `quickstart` target of its own:
#      it must configure (no clash of target names), with no kiln test, tool, bench or sample target, and
#      leave the parent's CMAKE_BUILD_TYPE cache entry alone.
set -euo pipefail
build=$(cd "$1" && pwd)
work=$2
src=$(cd "$(dirname "$0")/../.." && pwd)
rm -rf "$work"
mkdir -p "$work"
prefix=$work/prefix

step() { echo; echo "== $*"; }
step "install into $prefix"
cmake --install "$build" --prefix "$prefix" > "$work/install.log"
for f in include/kiln/kiln.h include/kiln/engine.h lib/cmake/kiln/kilnConfig.cmake lib/cmake/kiln/kilnTargets.cmake \
         lib/pkgconfig/kiln.pc lib/libkiln_runtime.a bin/kiln; do
  [ -e "$prefix/$f" ] || { echo "missing after install: $f"; exit 1; }
done
echo "installed $(wc -l < "$work/install.log") files"

step "find_package(kiln CONFIG) consumer"
cmake -S "$src/tests/install/consumer" -B "$work/consumer" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_PREFIX_PATH="$prefix" -DKILN_QUICKSTART_SOURCE="$src/samples/cpp/quickstart.cpp" > "$work/consumer.log"
cmake --build "$work/consumer" >> "$work/consumer.log" || { cat "$work/consumer.log"; exit 1; }
mkdir -p "$work/run1"
"$work/consumer/quickstart" "$work/run1" | tee "$work/run1.out"
grep -q "^y \[1, 64, 56, 56\]: min " "$work/run1.out" || { echo "quickstart printed no output tensor y"; exit 1; }

step "pkg-config consumer"
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
flags=$(pkg-config --cflags --libs kiln)
echo "pkg-config --cflags --libs kiln: $flags"
# shellcheck disable=SC2086
c++ -O1 "$src/samples/cpp/quickstart.cpp" -o "$work/quickstart_pc" $flags
mkdir -p "$work/run2"
"$work/quickstart_pc" "$work/run2" > "$work/run2.out"
cmp "$work/run1.out" "$work/run2.out" || { echo "the two consumers disagree"; exit 1; }

step "installed kiln program"
"$prefix/bin/kiln" --version
"$prefix/bin/kiln" validate "$work/run1/conv_block.json" | head -n 2

step "installed Python module"
pydir=$(find "$prefix" -name "_kiln*.so" -path "*/kiln/*" -printf '%h\n' 2>/dev/null | head -n1)
if [ -n "$pydir" ]; then
  # Run from elsewhere than the source tree, with only the installed package on the path.
  (cd "$work" && PYTHONPATH=$(dirname "$pydir") /usr/bin/python3 -c "
import kiln, sys
assert kiln.__file__.startswith('$prefix'), kiln.__file__
g = kiln.load('$work/run1/conv_block.json')
print('import kiln from', kiln.__file__.replace('$prefix', '<prefix>'), '->', g.name, len(kiln.plan(g).groups), 'groups')
")
else
  echo "no Python module installed (built without KILN_BUILD_PYTHON or pybind11): skipped"
fi

step "add_subdirectory parent"
cmake -S "$src/tests/install/parent" -B "$work/parent" -G Ninja -DKILN_SOURCE_DIR="$src" -DCMAKE_BUILD_TYPE=Release \
      > "$work/parent.log" 2>&1 || { cat "$work/parent.log"; exit 1; }
# The CMake targets of the generated build: each executable's link rule is CXX_EXECUTABLE_LINKER__<target>_<config>.
targets=$(grep -o 'CXX_EXECUTABLE_LINKER__[A-Za-z0-9_]*_Release' "$work/parent/build.ninja" |
          sed 's/^CXX_EXECUTABLE_LINKER__//; s/_Release$//' | sort -u)
grep -qx "kiln_support_layer_check" <<< "$targets" || { echo "cannot read the targets of the parent build"; exit 1; }
for t in kiln_tests kiln_cli plan_bench resnet50_graph readme_snippets; do
  if grep -qx "$t" <<< "$targets"; then echo "add_subdirectory built kiln's $t"; exit 1; fi
done
grep -qx "quickstart" <<< "$targets" || { echo "the parent's quickstart target is missing"; exit 1; }
grep -q "^CMAKE_BUILD_TYPE:STRING=Release$" "$work/parent/CMakeCache.txt" || { echo "CMAKE_BUILD_TYPE was changed"; exit 1; }
if grep -q "^KILN_BUILD_TESTS:BOOL=ON" "$work/parent/CMakeCache.txt"; then echo "KILN_BUILD_TESTS is ON under a parent"; exit 1; fi
echo "parent configured: kiln::kiln, no kiln tests/tools/bench/samples"
echo
echo "install: ok"
