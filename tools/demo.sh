#!/usr/bin/env bash
# kiln's main job on a shipped sample: installs what is missing, builds the `kiln` program, then loads the
# ResNet-50 bottleneck graph, verifies it and runs it on the reference backend.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh
tools/build.sh kiln_cli
sample=${1:-samples/graphs/resnet50_bottleneck.json}
echo
echo "\$ kiln validate $sample"
build/kiln validate "$sample"
echo
echo "\$ kiln run $sample --device ref --seed 0"
build/kiln run "$sample" --device ref --seed 0
