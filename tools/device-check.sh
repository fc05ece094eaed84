#!/usr/bin/env bash
# The prepared GPU check (docs/gpu.md): on a machine with an NVIDIA GPU, the CUDA toolkit, CMake, ninja and
# Python with PyTorch — but none of kiln's Debian packages and no network — build kiln, run the `gpu` tests
# and the GPU benchmark beside PyTorch, in one command of at most 10 minutes.
#
#   here:   tools/prepare-device-deps.sh            # once: fmt, nlohmann-json, xxhash, googletest -> .device-deps/
#   there:  tools/device-check.sh [OUT_DIR]         # OUT_DIR defaults to $OUT, else ./device-check-out
#
# Writes to OUT_DIR: build.log, tests.log, cli.txt, bench.txt, kiln_bench.json, peers.json, peers.csv, summary.txt;
# prints the summary (GPU, test counts, the benchmark tables) last. The whole check fits in
# $DEVICE_CHECK_BUDGET_S seconds (default 520): each phase gets a time limit from what is left, so that a
# hang in one still leaves the others' results. Exit status: 0 when everything passed.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-${OUT:-$PWD/device-check-out}}
mkdir -p "$out"
deps=$PWD/.device-deps
build=$PWD/build-device
jobs=$(nproc)
status=0
start=$(date +%s)
budget=${DEVICE_CHECK_BUDGET_S:-520}
phase() { echo "== $* ($(( $(date +%s) - start )) s)"; }
# Seconds for a phase: at most $1, and never into the $2 seconds kept for the phases after it.
limit() {
  local left=$(( budget - ($(date +%s) - start) - $2 ))
  (( left > $1 )) && left=$1
  (( left < 10 )) && left=10
  echo $left
}

summary() { tee -a "$out/summary.txt"; }
: >"$out/summary.txt"

phase "gpu" | summary
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu \
  --format=csv 2>&1 | summary
command -v nvcc >/dev/null && nvcc --version | tail -2 | summary

if [[ ! -d $deps ]]; then
  echo "device-check: $deps is missing: run tools/prepare-device-deps.sh on the build machine and carry it" | summary
  exit 2
fi

phase "build" | summary
# Release, the GPU tests and the tools only (the CPU test suite runs in CI).
if ! timeout "$(limit 300 240)" bash -c "cmake -S . -B '$build' -G Ninja -DCMAKE_BUILD_TYPE=Release -DKILN_DEPS_DIR='$deps' \
      -DKILN_WERROR=OFF >/dev/null && ninja -C '$build' -j '$jobs' kiln_cli kiln_gpu_tests gpu_bench" \
      >"$out/build.log" 2>&1; then
  echo "build FAILED (last lines of build.log):" | summary
  tail -30 "$out/build.log" | summary
  exit 1
fi
tail -1 "$out/build.log" | summary

# A cache of its own, so that the numbers below include nothing compiled on another machine.
export KILN_CACHE_DIR=$build/kiln-cache

phase "gpu tests" | summary
t=$(limit 170 200)
timeout "$t" ctest --test-dir "$build" -L gpu -j "$jobs" --timeout $(( t - 10 )) --output-on-failure >"$out/tests.log" 2>&1
rc=$?
grep -E "tests passed|tests failed|Total Test time" "$out/tests.log" | summary
grep -E "^\s+[0-9]+ - .*\((Failed|Timeout|SEGFAULT|Subprocess aborted|Not Run)\)" "$out/tests.log" | head -40 | summary
[[ $rc -ne 0 ]] && status=1

phase "kiln run --device cuda --check (the CLI; every sample also ran in the gpu tests)" | summary
g=samples/graphs/resnet50_bottleneck.json
if timeout 60 "$build/kiln" run "$g" --device cuda --check >"$out/cli.txt" 2>&1; then
  grep -E "^device|^kernels|  y " "$out/cli.txt" | summary
else
  echo "  FAILED: $g" | summary
  cat "$out/cli.txt" | summary
  status=1
fi

phase "gpu_bench (kiln)" | summary
# kiln profile's estimates, made on the build machine (`build/profile_bench --json device-estimates.json`,
# carried with .device-deps): printed beside the measured times when present.
est=()
[[ -f device-estimates.json ]] && est=(--estimates device-estimates.json)
timeout "$(limit 150 110)" "$build/gpu_bench" --out "$out/kiln_bench.json" --graphs-dir "$build/bench-graphs" "${est[@]}" \
  2>&1 | tee "$out/bench.txt"
[[ ${PIPESTATUS[0]} -ne 0 ]] && status=1

phase "peers (PyTorch eager, torch.compile)" | summary
# Eager for every case takes about a minute; torch.compile gets what is left after that.
t=$(limit 400 5)
compile_budget=$(( t > 150 ? t - 110 : 20 ))
if [[ -f $out/kiln_bench.json ]]; then
  PYTHONUNBUFFERED=1 timeout "$t" python3 tools/bench/gpu_bench_peers.py \
    --kiln "$out/kiln_bench.json" --out "$out/peers.json" --csv "$out/peers.csv" --compile-budget-s "$compile_budget" \
    2>&1 | tee -a "$out/bench.txt"
  [[ ${PIPESTATUS[0]} -ne 0 ]] && status=1
fi

phase "done, status $status" | summary
echo
echo "---- summary ----"
cat "$out/summary.txt"
exit $status
