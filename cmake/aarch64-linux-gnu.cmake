# CMake toolchain file: kiln for aarch64 Linux (GH200, GB200 hosts) with Debian's cross compiler
# (g++-aarch64-linux-gnu, sysroot /usr/aarch64-linux-gnu). Used by tools/cross-check-aarch64.sh, with
# -DKILN_DEPS_DIR for the architecture-independent third-party headers (cmake/deps.cmake).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)

# Headers, libraries and CMake packages from the arm64 sysroot only, so that none of the build machine's
# x86-64 ones (its /usr/include, /usr/lib/x86_64-linux-gnu) is mixed in; programs (ninja, ...) are the
# build machine's.
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
