#!/usr/bin/env bash
# The exporter on a model with unsupported nodes must exit with 2, write nothing, and name every such node
# with its module path and op (tests/models/unsupported_model.py: PixelShuffle `up`, torch.sort in `head`).
#
# Usage: tests/models/expect_unsupported.sh PYTHON DIR
set -uo pipefail
python=$1 dir=$2
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$dir"
mkdir -p "$(dirname "$dir")"
"$python" "$here/../../tools/torch2kiln.py" "$here/unsupported_model.py:build" --resolution 16 --out "$dir" \
  2> "$dir.stderr"
rc=$?
cat "$dir.stderr"
fail=0
[ "$rc" -eq 2 ] || { echo "FAIL: exit status $rc, expected 2"; fail=1; }
[ ! -e "$dir/graph.json" ] || { echo "FAIL: $dir/graph.json was written"; fail=1; }
for want in "module 'up' (torch.nn.PixelShuffle)" "in module 'head': function torch.sort" \
            "2 node(s) kiln cannot run"; do
  grep -qF "$want" "$dir.stderr" || { echo "FAIL: stderr does not say: $want"; fail=1; }
done
exit $fail
