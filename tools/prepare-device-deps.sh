#!/usr/bin/env bash
# Usage: tools/prepare-device-deps.sh [DIR]        (DIR defaults to .device-deps/ at the repository root)
#
# Copies, from this machine's Debian packages, the third-party code kiln needs to build itself and its tests
# into one folder, for a machine that has none of those packages and no network (the GPU machine: it gets
# our source tree plus this one git-ignored folder). There, configure with -DKILN_DEPS_DIR=<DIR>
# (cmake/deps.cmake defines the same targets from it). What goes in, and why only that:
#   fmt/include/fmt/           libfmt-dev headers; used header-only there (FMT_HEADER_ONLY), no libfmt
#   nlohmann_json/include/     nlohmann-json3-dev headers (header-only library)
#   xxhash/include/            libxxhash-dev headers; cmake/xxhash_impl.cpp compiles the implementation from
#                              them, since the package's only library is a static .a built for this machine
#   googletest/{googletest,googlemock}/{include,src}
#                              GoogleTest sources (package googletest, which libgtest-dev uses); built with
#                              the tests. googlemock too: tests include <gmock/gmock.h> (matchers)
#   cli11/include/CLI/        libcli11-dev headers (header-only): the kiln program's argument parser
#   licenses/                  each package's Debian copyright file
#   README.txt                 where each piece came from (package and version)
# Idempotent: DIR is rebuilt from scratch on every run (only if it is empty or was made by this script).
# Needs the packages tools/setup.sh installs. Prints the folder's size at the end.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${1:-$root/.device-deps}
marker="kiln device dependencies (tools/prepare-device-deps.sh)"

# Package -> the paths copied from it (each must belong to that package; checked with dpkg -S below).
declare -A from=(
  [libfmt-dev]=/usr/include/fmt
  [nlohmann-json3-dev]=/usr/include/nlohmann
  [libxxhash-dev]="/usr/include/xxhash.h /usr/include/xxh3.h"
  [googletest]=/usr/src/googletest
  [libcli11-dev]=/usr/include/CLI
)
packages=(libfmt-dev nlohmann-json3-dev libxxhash-dev googletest libcli11-dev)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "prepare-device-deps: missing Debian packages: ${missing[*]} (run tools/setup.sh)" >&2
  exit 1
fi
for p in "${packages[@]}"; do
  for path in ${from[$p]}; do
    owner=$(dpkg -S "$path" 2>/dev/null | head -n1 | cut -d: -f1)
    if [ "$owner" != "$p" ]; then
      echo "prepare-device-deps: $path is not from package $p (dpkg -S says '${owner:-nothing}')" >&2
      exit 1
    fi
  done
done

# Never delete a folder this script did not make: DIR may be a user-given path.
if [ -e "$dir" ]; then
  if [ -n "$(ls -A "$dir")" ] && ! head -n1 "$dir/README.txt" 2>/dev/null | grep -qxF "$marker"; then
    echo "prepare-device-deps: $dir exists and was not made by this script; not touching it" >&2
    exit 1
  fi
fi

# Build next to DIR, then swap, so an interrupted run never leaves a half-filled DIR behind.
parent=$(dirname "$dir")
mkdir -p "$parent"
tmp=$(mktemp -d "$parent/.device-deps.tmp.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
chmod 755 "$tmp"  # mktemp makes it 0700

mkdir -p "$tmp/fmt/include" "$tmp/nlohmann_json/include" "$tmp/xxhash/include" "$tmp/licenses"
cp -a /usr/include/fmt "$tmp/fmt/include/"
cp -a /usr/include/nlohmann "$tmp/nlohmann_json/include/"
cp -a /usr/include/xxhash.h /usr/include/xxh3.h "$tmp/xxhash/include/"
mkdir -p "$tmp/cli11/include"
cp -a /usr/include/CLI "$tmp/cli11/include/"
# Only what building libgtest/libgmock needs: headers and sources (not their tests, docs or samples).
for part in googletest googlemock; do
  mkdir -p "$tmp/googletest/$part"
  cp -a "/usr/src/googletest/$part/include" "/usr/src/googletest/$part/src" "$tmp/googletest/$part/"
done
for p in "${packages[@]}"; do
  cp "/usr/share/doc/$p/copyright" "$tmp/licenses/$p.copyright"
done

version() { dpkg-query -W -f='${Version}' "$1"; }
{
  echo "$marker"
  echo
  echo "Made by tools/prepare-device-deps.sh on $(hostname) ($(. /etc/os-release && echo "$PRETTY_NAME")),"
  echo "$(date -u '+%Y-%m-%d %H:%M UTC'). Copies of Debian packages' files, to build kiln and its tests where"
  echo "those packages are not installed: cmake -DKILN_DEPS_DIR=<this folder> (see cmake/deps.cmake)."
  echo
  echo "fmt/include/fmt/             from libfmt-dev $(version libfmt-dev): /usr/include/fmt (used header-only: FMT_HEADER_ONLY=1)"
  echo "nlohmann_json/include/       from nlohmann-json3-dev $(version nlohmann-json3-dev): /usr/include/nlohmann"
  echo "xxhash/include/              from libxxhash-dev $(version libxxhash-dev): /usr/include/xxhash.h, xxh3.h"
  echo "                             (implementation compiled from the header: cmake/xxhash_impl.cpp)"
  echo "googletest/googletest/       from googletest $(version googletest) (sources behind libgtest-dev $(version libgtest-dev)):"
  echo "googletest/googlemock/       /usr/src/googletest/{googletest,googlemock}/{include,src}"
  echo "licenses/                    /usr/share/doc/<package>/copyright of each"
} > "$tmp/README.txt"

rm -rf "$dir"
mv "$tmp" "$dir"
trap - EXIT
echo "prepare-device-deps: $(du -sh "$dir" | cut -f1) in $dir ($(find "$dir" -type f | wc -l) files)"
