#!/usr/bin/env bash
# Installs what kiln needs to build and test, from Debian packages, skipping what is already there
# (graphviz: the test that renders `kiln plan --format dot` to SVG with the real `dot`).
# With --torch (or KILN_SETUP_TORCH=1) also PyTorch, torchvision and NumPy for /usr/bin/python3: the
# exporter tools/torch2kiln.py and the ctest label `models` (tools/test.sh asks for them). With --sanitize,
# clang and its sanitizer and fuzzer runtimes (tools/sanitize.sh, tools/fuzz.sh).
# The CUDA toolkit is not a Debian package here: it is expected on the machine (nvcc on the PATH) and
# is found by CMake's CUDAToolkit module.
set -euo pipefail

# libxxhash-dev: XXH3-128 for kernel cache keys and entry checksums (src/cache/).
# g++-aarch64-linux-gnu, qemu-user: the aarch64 cross-compile check (tools/cross-check-aarch64.sh,
# ctest label `cross`), which compiles kiln for aarch64 and runs the aarch64 fiber switch under qemu.
# libonnx-dev, libprotobuf-dev: the ONNX front end (src/onnx/); libonnx-testdata: ONNX's backend test models,
# which the conformance test (ctest label `onnx`) imports and runs.
# libcli11-dev: the kiln program's argument parser. pybind11-dev, python3-dev, python3-numpy, python3-pytest:
# the Python module (python/, docs/python.md) and its tests. pkg-config: the install test's pkg-config consumer.
packages=(cmake ninja-build g++ libfmt-dev nlohmann-json3-dev libgtest-dev graphviz libxxhash-dev
          g++-aarch64-linux-gnu qemu-user libonnx-dev libprotobuf-dev libonnx-testdata
          libcli11-dev pybind11-dev python3-dev python3-numpy python3-pytest pkg-config)
if [ "${KILN_SETUP_TORCH:-0}" = 1 ]; then set -- "$@" --torch; fi
for arg in "$@"; do
  case "$arg" in
    --torch) packages+=(python3-torch python3-torchvision python3-numpy) ;;
    # clang with its sanitizer and libFuzzer runtimes, llvm-symbolizer for readable reports (tools/sanitize.sh,
    # tools/fuzz.sh).
    --sanitize) packages+=(clang libclang-rt-14-dev llvm-14) ;;
    *) echo "usage: tools/setup.sh [--torch] [--sanitize]" >&2; exit 2 ;;
  esac
done
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "kiln setup: installing ${missing[*]}"
sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then sudo_cmd=(sudo); fi
"${sudo_cmd[@]}" apt-get update -qq
DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
