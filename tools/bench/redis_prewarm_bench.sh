#!/usr/bin/env bash
# The fleet's case, measured side by side in one run: a cold `kiln prewarm` that compiles every kernel and
# fills a Redis server (machine one), then cold prewarms of a second, empty cache directory against that
# server (machine two: median of 3, each with its directory emptied), and warm local prewarms for scale.
# Prints the ratios and checks that machine two compiled nothing. Needs redis-server (tools/setup.sh --test).
# usage: tools/bench/redis_prewarm_bench.sh [GRAPH.json] [ARCH]   (default samples/graphs/resnet50.json sm_80)
set -euo pipefail
cd "$(dirname "$0")/../.."
kiln=${KILN:-build/kiln}
graph=${1:-samples/graphs/resnet50.json}
arch=${2:-sm_80}
dir=$(mktemp -d /tmp/kiln-redis-bench-XXXXXX)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$dir" --daemonize yes \
             --pidfile "$dir/redis.pid" --logfile "$dir/redis.log"
trap 'kill "$(cat "$dir/redis.pid")" 2>/dev/null; rm -rf "$dir"' EXIT
for _ in $(seq 50); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
export KILN_CACHE_REMOTE="redis://127.0.0.1:$port/0"

ms() { # CACHE_DIR COMMAND...: runs it with KILN_CACHE_DIR=CACHE_DIR, prints wall milliseconds
  local cache=$1 t0 t1
  shift
  t0=$(date +%s%N)
  KILN_CACHE_DIR="$cache" "$@" > "$dir/out.txt" 2>&1 || { cat "$dir/out.txt" >&2; exit 1; }
  t1=$(date +%s%N)
  echo $(( (t1 - t0) / 1000000 ))
}

cold=$(ms "$dir/one" "$kiln" prewarm "$graph" --arch "$arch" --jobs 2)
kernels=$(grep '^kernels:' "$dir/out.txt")
remote=()
for _ in 1 2 3; do
  rm -rf "$dir/two"
  remote+=("$(ms "$dir/two" "$kiln" prewarm "$graph" --arch "$arch" --jobs 2)")
  grep -q ' 0 compiled' "$dir/out.txt" || { echo "machine two compiled:" >&2; cat "$dir/out.txt" >&2; exit 1; }
  grep -q 'nvrtc: not loaded' "$dir/out.txt" || { echo "machine two loaded NVRTC" >&2; exit 1; }
done
remote_median=$(printf '%s\n' "${remote[@]}" | sort -n | sed -n 2p)
warm=()
for _ in 1 2 3; do warm+=("$(ms "$dir/two" "$kiln" prewarm "$graph" --arch "$arch")"); done
warm_median=$(printf '%s\n' "${warm[@]}" | sort -n | sed -n 2p)

echo "graph: $graph ($arch), load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "$kernels"
echo "redis: $(redis-cli -p "$port" dbsize) keys, $(redis-cli -p "$port" info memory | grep '^used_memory_human' | cut -d: -f2 | tr -d '\r')"
printf '%-44s %10s %12s\n' "run" "wall ms" "vs compiling"
printf '%-44s %10d %11s\n' "machine one: cold, compiles, fills Redis" "$cold" "1x"
printf '%-44s %10d %11.0fx\n' "machine two: cold directory, warm Redis (med 3)" "$remote_median" \
       "$(awk "BEGIN{print $cold / ($remote_median > 0 ? $remote_median : 1)}")"
printf '%-44s %10d %11.0fx\n' "machine two again: warm directory (med 3)" "$warm_median" \
       "$(awk "BEGIN{print $cold / ($warm_median > 0 ? $warm_median : 1)}")"
