#!/usr/bin/env bash
# One model against PyTorch: exports it with random weights (tools/torch2kiln.py --weights), runs kiln's
# f64 reference backend on those weights and input, and compares `logits` with PyTorch's float64 output
# (relative L2 error below 1e-6, tests/models/compare.py). The weight files are removed after a pass.
#
# Usage: tests/models/check_reference.sh KILN PYTHON MODEL RESOLUTION DIR
set -euo pipefail
kiln=$1 python=$2 model=$3 res=$4 dir=$5
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$dir"
"$python" "$here/../../tools/torch2kiln.py" "$model" --resolution "$res" --weights --out "$dir"
"$kiln" run "$dir/graph.json" --device ref --inputs "$dir/inputs" --save-outputs "$dir/out"
"$python" "$here/compare.py" "$dir/expected" "$dir/out" --max-rel-l2 1e-6
rm -rf "$dir/inputs"
