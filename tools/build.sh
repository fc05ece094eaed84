#!/usr/bin/env bash
# Configures and builds kiln in build/ (warnings are errors). Extra arguments name targets to build.
set -euo pipefail
cd "$(dirname "$0")/.."
launcher=()  # ccache, when installed, makes rebuilds and builds of other worktrees of the same code cheap
if command -v ccache >/dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKILN_WERROR=ON "${launcher[@]}" > /tmp/kiln-configure.$$.log 2>&1 || { cat /tmp/kiln-configure.$$.log; exit 1; }
if [ $# -gt 0 ]; then
  targets=(); for t in "$@"; do targets+=(--target "$t"); done
  cmake --build build -j "$(nproc)" "${targets[@]}"
else
  cmake --build build -j "$(nproc)"
fi
