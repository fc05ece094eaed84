#!/usr/bin/env bash
# Cold and warm `kiln prewarm` of one graph for one arch, measured side by side in one run:
#   cold --jobs 1, cold --jobs 2 (empty cache each time), then warm starts (a process that loads the graph,
#   reads its plan from the plan cache and every kernel's cubin from the kernel cache), median of 9; prints the
#   ratios. (`date` and bash's fork are inside each time: about 1 ms of a warm run.)
# usage: tools/bench/prewarm_bench.sh [GRAPH.json] [ARCH]   (default samples/graphs/resnet50.json sm_80)
set -euo pipefail
cd "$(dirname "$0")/../.."
kiln=${KILN:-build/kiln}
graph=${1:-samples/graphs/resnet50.json}
arch=${2:-sm_80}
dir=$(mktemp -d /tmp/kiln-prewarm-bench-XXXXXX)
trap 'rm -rf "$dir"' EXIT

ms() { # runs "$@" with KILN_CACHE_DIR=$dir/cache, prints wall milliseconds (to 0.1 ms)
  local t0 t1
  t0=$(date +%s%N)
  KILN_CACHE_DIR="$dir/cache" "$@" > "$dir/out.txt" 2>&1 || { cat "$dir/out.txt" >&2; exit 1; }
  t1=$(date +%s%N)
  awk "BEGIN{printf \"%.1f\", $(( (t1 - t0) / 1000 )) / 1000}"
}

rm -rf "$dir/cache"; cold1=$(ms "$kiln" prewarm "$graph" --arch "$arch" --jobs 1)
kernels=$(grep '^kernels:' "$dir/out.txt")
rm -rf "$dir/cache"; cold2=$(ms "$kiln" prewarm "$graph" --arch "$arch" --jobs 2)
warm=()
for _ in 1 2 3 4 5 6 7 8 9; do warm+=("$(ms "$kiln" prewarm "$graph" --arch "$arch")"); done
grep -q 'nvrtc: not loaded' "$dir/out.txt" || { echo "warm run loaded NVRTC" >&2; exit 1; }
median=$(printf '%s\n' "${warm[@]}" | sort -n | sed -n 5p)

echo "graph: $graph ($arch), load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "$kernels"
printf '%-28s %10s %10s\n' "run" "wall ms" "vs warm"
printf '%-28s %10.1f %9.0fx\n' "cold, --jobs 1" "$cold1" "$(awk "BEGIN{print $cold1 / $median}")"
printf '%-28s %10.1f %9.0fx\n' "cold, --jobs 2" "$cold2" "$(awk "BEGIN{print $cold2 / $median}")"
printf '%-28s %10.1f %10s\n' "warm (median of 9)" "$median" "1x"
printf 'jobs 2 speed-up: %.2fx\n' "$(awk "BEGIN{print $cold1 / $cold2}")"
