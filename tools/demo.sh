#!/usr/bin/env bash
# kiln's main job on a shipped sample: installs what is missing, builds the `kiln` program, then loads the
# ResNet-50 bottleneck graph, verifies it, plans it (fused groups), compiles every kernel of the plan with
# NVRTC into the on-disk cache (`kiln prewarm`, no GPU needed), and runs the generated kernels on the
# emulator, checked against the reference backend, and times them (`kiln bench`).
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh
tools/build.sh kiln_cli
sample=${1:-samples/graphs/resnet50_bottleneck.json}
echo
echo "\$ kiln validate $sample"
build/kiln validate "$sample"
echo
echo "\$ kiln plan $sample"
build/kiln plan "$sample" | sed -n '/^totals:/,$p'
echo
echo "\$ kiln prewarm $sample --arch sm_80,sm_90"
build/kiln prewarm "$sample" --arch sm_80,sm_90 --no-progress
echo
echo "\$ kiln run $sample --device emu --check --seed 0"
build/kiln run "$sample" --device emu --check --seed 0
echo
echo "\$ kiln bench $sample --iterations 3"
build/kiln bench "$sample" --iterations 3 --no-progress
