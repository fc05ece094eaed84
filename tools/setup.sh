#!/usr/bin/env bash
# Installs what kiln needs from Debian packages, skipping what is already there: with no argument what
# building and running kiln needs (tools/demo.sh); --test adds what the test suite needs, --torch PyTorch
# (or KILN_SETUP_TORCH=1; tools/test.sh asks for both), --cross the aarch64 cross check's compiler and qemu,
# --sanitize clang and its sanitizer and fuzzer runtimes (.ci/run asks for those).
# The CUDA toolkit is not a Debian package here: it is expected on the machine (nvcc on the PATH) and
# is found by CMake's CUDAToolkit module.
set -euo pipefail

# What building and running kiln needs (tools/demo.sh installs only these):
# cmake, ninja-build, g++; libfmt-dev, nlohmann-json3-dev, libxxhash-dev (XXH3-128 for kernel cache keys and
# entry checksums), libcli11-dev (the kiln program's argument parser); libonnx-dev, libprotobuf-dev (the
# ONNX front end, src/onnx/); pybind11-dev, python3-dev (the Python module, python/, docs/python.md);
# libgtest-dev (configuring the top-level build, which defines the tests); libhiredis-dev (the kernel
# cache's shared tier on Redis, KILN_CACHE_REMOTE, docs/cache.md).
packages=(cmake ninja-build g++ libfmt-dev nlohmann-json3-dev libxxhash-dev libcli11-dev libonnx-dev libprotobuf-dev
          pybind11-dev python3-dev libgtest-dev libhiredis-dev)
if [ "${KILN_SETUP_TORCH:-0}" = 1 ]; then set -- "$@" --torch; fi
for arg in "$@"; do
  case "$arg" in
    # What the test suite adds (tools/test.sh): graphviz (the tests that render `kiln plan --format dot` to
    # SVG with the real `dot`), librsvg2-bin and zlib1g-dev (tests/test_pictures.cpp renders kiln's SVGs
    # to PNG with rsvg-convert and reads the pixels back), libonnx-testdata (ONNX's backend test models, ctest label `onnx`),
    # python3-numpy and python3-pytest (the Python module's tests), pkg-config (the install test's
    # pkg-config consumer), ccache (tools/build.sh uses it when present: a rebuild of an unchanged tree, or
    # of another clone of the same code, compiles nothing), redis-server (the remote cache tier's tests start
    # their own servers on loopback ports).
    --test) packages+=(graphviz librsvg2-bin zlib1g-dev libonnx-testdata python3-numpy python3-pytest pkg-config ccache
                       redis-server) ;;
    # PyTorch, torchvision and NumPy for /usr/bin/python3: the exporter tools/torch2kiln.py and the ctest
    # label `models`.
    --torch) packages+=(python3-torch python3-torchvision python3-numpy) ;;
    # The aarch64 cross-compile check (tools/cross-check-aarch64.sh, ctest label `cross`, run by .ci/run
    # after the test command): the cross compiler, and qemu to run the aarch64 fiber switch.
    --cross) packages+=(g++-aarch64-linux-gnu qemu-user) ;;
    # clang with its sanitizer and libFuzzer runtimes, llvm-symbolizer for readable reports (tools/sanitize.sh,
    # tools/fuzz.sh).
    --sanitize) packages+=(clang libclang-rt-14-dev llvm-14) ;;
    *) echo "usage: tools/setup.sh [--test] [--torch] [--cross] [--sanitize]" >&2; exit 2 ;;
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
