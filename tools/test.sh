#!/usr/bin/env bash
# Installs what is missing (PyTorch too, for the `models` tests), builds everything (warnings are errors)
# and runs the test suite: everything but the aarch64 cross build (label `cross`, 5 minutes of its own
# compiles), which .ci/run runs after this command.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh --test --torch
tools/build.sh
cd build
ctest --output-on-failure -j "$(nproc)" -LE cross "$@"
