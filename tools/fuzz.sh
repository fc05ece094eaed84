#!/usr/bin/env bash
# Runs one libFuzzer harness of fuzz/ for SECONDS (docs/reliability.md, "Fuzzing").
#
#   tools/fuzz.sh NAME SECONDS [LIBFUZZER_ARGS...]     NAME: graph_json, npy, cache_entry or onnx
#   tools/fuzz.sh --all SECONDS    every harness for SECONDS, as many at once as there are cores (CI: 2 cores,
#                                  4 harnesses of 60 s in 2 minutes instead of 4; each still has a core)
#
# Builds what it needs in build-sanitize/ (clang, ASan+UBSan, coverage: tools/sanitize.sh --build-only),
# writes fresh seeds and the JSON dictionary (kiln_fuzz_seeds), and fuzzes with the corpus kept in
# build-sanitize/fuzz/NAME/corpus (it grows from run to run). Inputs that crash, hang (over 10 s), leak or
# exceed 2 GiB are saved in build-sanitize/fuzz/NAME/ and the script exits non-zero. Extra arguments go to
# libFuzzer (-jobs=2 -workers=2 for both cores, -runs=N, a single file to replay it).
set -euo pipefail
self=$(realpath "$0")  # --all runs it again per harness, after the cd below
cd "$(dirname "$0")/.."
usage() {
  echo "usage: tools/fuzz.sh graph_json|npy|cache_entry|onnx SECONDS [LIBFUZZER_ARGS...]" >&2
  echo "       tools/fuzz.sh --all SECONDS" >&2
  exit 2
}
harnesses=(graph_json npy cache_entry onnx)
[ $# -ge 2 ] || usage
name=$1 seconds=$2
shift 2
[[ "$seconds" =~ ^[0-9]+$ ]] || usage

if [ "$name" = --all ]; then
  [ $# -eq 0 ] || usage
  # One build for all (two scripts configuring one tree at once would race), then one harness per core.
  tools/sanitize.sh --build-only "${harnesses[@]/#/fuzz_}" kiln_fuzz_seeds
  jobs=$(nproc)
  pids=() names=() failed=()
  trap 'kill $(jobs -p) 2>/dev/null || true' EXIT  # a CI timeout that stops this script stops the fuzzers
  for h in "${harnesses[@]}"; do
    while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n || true; done
    KILN_FUZZ_BUILT=1 "$self" "$h" "$seconds" &
    pids+=($!) names+=("$h")
  done
  for i in "${!pids[@]}"; do wait "${pids[$i]}" || failed+=("${names[$i]}"); done
  if [ ${#failed[@]} -gt 0 ]; then
    echo "fuzz: FAILED: ${failed[*]}" >&2
    exit 1
  fi
  exit 0
fi
case "$name" in graph_json | npy | cache_entry | onnx) ;; *) usage ;; esac

# KILN_FUZZ_BUILT: --all built every harness already.
[ -n "${KILN_FUZZ_BUILT:-}" ] || tools/sanitize.sh --build-only "fuzz_$name" kiln_fuzz_seeds
tree=build-sanitize
work="$PWD/$tree/fuzz/$name"
seeds="$work/seeds"  # each harness its own: harnesses run at once under --all
rm -rf "$seeds"
mkdir -p "$work/corpus"
"$tree/kiln_fuzz_seeds" "$seeds"
extra=()
case "$name" in
  graph_json)
    # The samples (but ResNet-50's 150 KB: far over max_len, it would be cut into noise) and the bad inputs.
    for f in samples/graphs/*.json tests/data/bad/*.json; do
      [ "$(basename "$f")" = resnet50.json ] || cp "$f" "$seeds/graph_json/"
    done
    extra=(-dict="$seeds/graph_json.dict" -max_len=16384)
    ;;
  npy) extra=(-max_len=4096) ;;
  cache_entry) extra=(-max_len=4096) ;;
  onnx)
    # ONNX's own backend test models (libonnx-testdata) under 64 KiB: every suite's ops and opsets.
    mkdir -p "$seeds/onnx"
    find /usr/share/libonnx-testdata/data -name model.onnx -size -64k | sort | while read -r f; do
      cp "$f" "$seeds/onnx/$(basename "$(dirname "$f")").onnx"
    done
    extra=(-max_len=65536)
    ;;
esac
export ASAN_OPTIONS="detect_leaks=1:halt_on_error=1:abort_on_error=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
log="$work/last-run.log"
status=0
"$tree/fuzz_$name" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=2048 \
  -print_final_stats=1 -artifact_prefix="$work/" "${extra[@]}" "$@" "$work/corpus" "$seeds/$name" \
  > "$log" 2>&1 || status=$?
runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | awk '{s+=$1} END {print s+0}')
done_line=$(grep -E '^#[0-9]+[[:space:]]+DONE' "$log" | tail -1 || true)
cov=$(grep -Eo 'cov: [0-9]+ ft: [0-9]+' <<<"$done_line" || true)
corpus=$(find "$work/corpus" -type f | wc -l)
if [ "$status" -ne 0 ]; then
  tail -60 "$log"
  echo "fuzz $name: FAILED (libFuzzer exit $status) after $runs executions; the input is saved in $work/" >&2
  exit 1
fi
echo "fuzz $name: $runs executions in ${seconds} s, ${cov:-cov: ?}, corpus $corpus files: no crash, leak, hang or OOM (log: $log)"
