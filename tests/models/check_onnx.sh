#!/usr/bin/env bash
# One torchvision model through ONNX: exported with torch.onnx.export (tools/torch2onnx.py, random weights),
# then `kiln run model.onnx` on ref with the model's own weights and PyTorch's input, compared with PyTorch's
# float64 output (relative L2 below 1e-5: the exporter folds batch norms into the convolutions in float32),
# and on emu with --check (the generated kernels against ref). The directory is removed after a pass.
#
# With DYNAMIC_BATCH (> 0) the model is exported with a dynamic batch dim ('batch') and PyTorch's input and
# output are at that batch: kiln imports it with a symbolic dim (no --shape), takes the batch from the input
# file on ref and emu, and also runs it at batch 1 with --dims on emu.
#
# Usage: tests/models/check_onnx.sh KILN PYTHON MODEL RESOLUTION DIR [OPSET [DYNAMIC_BATCH]]
set -euo pipefail
kiln=$1 python=$2 model=$3 res=$4 dir=$5 opset=${6:-13} dynamic=${7:-0}
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$dir"
"$python" "$here/../../tools/torch2onnx.py" "$model" --resolution "$res" --opset "$opset" --out "$dir" \
  --dynamic-batch "$dynamic"
"$kiln" run "$dir/model.onnx" --device ref --inputs "$dir/inputs" --save-outputs "$dir/out"
"$python" "$here/compare.py" "$dir/expected" "$dir/out" --max-rel-l2 1e-5
"$kiln" run "$dir/model.onnx" --device emu --check --inputs "$dir/inputs"
if [ "$dynamic" -gt 0 ]; then
  "$kiln" validate "$dir/model.onnx" | grep "dims: batch in \[1, 1024\]" > /dev/null  # grep -q would stop reading: SIGPIPE
  "$kiln" run "$dir/model.onnx" --device emu --check --dims batch=1
fi
rm -rf "$dir"
