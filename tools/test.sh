#!/usr/bin/env bash
# Installs what is missing (PyTorch too, for the `models` tests), builds everything (warnings are errors)
# and runs the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh --torch
tools/build.sh
cd build
ctest --output-on-failure -j "$(nproc)" "$@"
