# Third-party dependencies: fmt, nlohmann_json, xxHash, CLI11 (for the kiln program) and, for the tests, GoogleTest. Included from the top-level
# CMakeLists.txt; defines the same targets either way: fmt::fmt, nlohmann_json::nlohmann_json, xxhash::xxhash and,
# with KILN_BUILD_TESTS, GTest::gtest and GTest::gtest_main.
#
# KILN_DEPS_DIR empty (the default): Debian packages, found on the system (tools/setup.sh installs them).
# KILN_DEPS_DIR=<dir>: a folder made by tools/prepare-device-deps.sh from those same packages, for a machine
# that has none of them and no network (the GPU machine gets our tree plus that folder). Nothing is then looked
# up on the system for these four, so a stray system copy cannot be mixed in.
set(KILN_DEPS_DIR "" CACHE PATH
    "Folder made by tools/prepare-device-deps.sh to take fmt, nlohmann_json, xxHash and GoogleTest from (empty: the system's)")

if(NOT KILN_DEPS_DIR)
  find_package(fmt REQUIRED)
  find_package(nlohmann_json 3.10 REQUIRED)
  # xxHash (libxxhash-dev): XXH3-128 for kernel cache keys and entry checksums (src/cache/).
  find_path(XXHASH_INCLUDE_DIR xxhash.h REQUIRED)
  find_library(XXHASH_LIBRARY NAMES xxhash REQUIRED)
  add_library(xxhash::xxhash UNKNOWN IMPORTED)
  set_target_properties(xxhash::xxhash PROPERTIES IMPORTED_LOCATION ${XXHASH_LIBRARY}
                                                  INTERFACE_INCLUDE_DIRECTORIES ${XXHASH_INCLUDE_DIR})
  if(KILN_BUILD_TOOLS)
    find_package(CLI11 2.1 CONFIG REQUIRED)  # libcli11-dev: the kiln program's argument parser
  endif()
  if(KILN_BUILD_TESTS)
    find_package(GTest REQUIRED)
  endif()
  # hiredis (libhiredis-dev): the kernel cache's shared tier on Redis (src/cache/remote.cpp). Without it kiln
  # builds, and KILN_CACHE_REMOTE is an error saying so.
  find_path(HIREDIS_INCLUDE_DIR hiredis/hiredis.h)
  find_library(HIREDIS_LIBRARY NAMES hiredis)
  if(HIREDIS_INCLUDE_DIR AND HIREDIS_LIBRARY)
    set(KILN_HAVE_REDIS ON)
    add_library(hiredis::hiredis UNKNOWN IMPORTED)
    set_target_properties(hiredis::hiredis PROPERTIES IMPORTED_LOCATION ${HIREDIS_LIBRARY}
                                                      INTERFACE_INCLUDE_DIRECTORIES ${HIREDIS_INCLUDE_DIR})
  else()
    set(KILN_HAVE_REDIS OFF)
    message(STATUS "kiln: no hiredis (libhiredis-dev): built without the Redis cache tier")
  endif()
  return()
endif()
set(KILN_HAVE_REDIS OFF)  # the dependency folder has no hiredis: no Redis cache tier there

# ---- from KILN_DEPS_DIR ---------------------------------------------------------------------------------
file(REAL_PATH "${KILN_DEPS_DIR}" _kiln_deps BASE_DIRECTORY "${PROJECT_SOURCE_DIR}")
foreach(f fmt/include/fmt/format.h nlohmann_json/include/nlohmann/json.hpp xxhash/include/xxhash.h
          googletest/googletest/src/gtest-all.cc googletest/googlemock/src/gmock-all.cc)
  if(NOT EXISTS "${_kiln_deps}/${f}")
    message(FATAL_ERROR "kiln: KILN_DEPS_DIR=${_kiln_deps} has no ${f}; make it with tools/prepare-device-deps.sh")
  endif()
endforeach()
message(STATUS "kiln: dependencies from ${_kiln_deps} (not the system's)")

# Header-only targets are IMPORTED so that their include directories are system ones (-isystem), as
# /usr/include is for the packages: our -Wall -Wextra -Wpedantic (and KILN_WERROR) stay off their headers.

# fmt header-only: the package's libfmt is not there. FMT_HEADER_ONLY makes <fmt/format.h> pull in
# format-inl.h; it is on the interface (fmt::fmt is PUBLIC on kiln) so every user of fmt agrees on it.
add_library(fmt::fmt INTERFACE IMPORTED)
set_target_properties(fmt::fmt PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${_kiln_deps}/fmt/include"
                                          INTERFACE_COMPILE_DEFINITIONS FMT_HEADER_ONLY=1)

# The same minimum version as find_package(nlohmann_json 3.10) asks of the system's.
file(STRINGS "${_kiln_deps}/nlohmann_json/include/nlohmann/detail/abi_macros.hpp" _kiln_json_version
     REGEX "^#define NLOHMANN_JSON_VERSION_(MAJOR|MINOR|PATCH) +[0-9]+")
string(REGEX REPLACE "[^;]*_(MAJOR|MINOR|PATCH) +([0-9]+)[^;]*" "\\2" _kiln_json_version "${_kiln_json_version}")
string(REPLACE ";" "." _kiln_json_version "${_kiln_json_version}")
if(_kiln_json_version VERSION_LESS 3.10)
  message(FATAL_ERROR "kiln: nlohmann_json ${_kiln_json_version} in ${_kiln_deps}; 3.10 or later is needed")
endif()
add_library(nlohmann_json::nlohmann_json INTERFACE IMPORTED)
set_target_properties(nlohmann_json::nlohmann_json PROPERTIES
                      INTERFACE_INCLUDE_DIRECTORIES "${_kiln_deps}/nlohmann_json/include")

# xxHash (XXH3-128 for kernel cache keys and entry checksums, src/cache/): the package's libxxhash.a is not
# there, so its implementation is compiled from the header into a small library of ours. Not XXH_INLINE_ALL on
# the interface: codegen/nvrtc.cpp #defines that itself for its private copy, and a -D would clash with it.
add_library(kiln_dep_xxhash STATIC ${CMAKE_CURRENT_LIST_DIR}/xxhash_impl.cpp)
target_include_directories(kiln_dep_xxhash SYSTEM PUBLIC "${_kiln_deps}/xxhash/include")
add_library(xxhash::xxhash ALIAS kiln_dep_xxhash)

# CLI11 (header-only): the kiln program's argument parser.
if(KILN_BUILD_TOOLS)
  if(NOT EXISTS "${_kiln_deps}/cli11/include/CLI/CLI.hpp")
    message(FATAL_ERROR "kiln: KILN_DEPS_DIR=${_kiln_deps} has no cli11/include/CLI/CLI.hpp; remake it with tools/prepare-device-deps.sh")
  endif()
  add_library(CLI11::CLI11 INTERFACE IMPORTED)
  set_target_properties(CLI11::CLI11 PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${_kiln_deps}/cli11/include")
endif()

# GoogleTest, built from the package's sources with the tests. Built here from its two amalgamated sources
# rather than with add_subdirectory(): its CMakeLists enables the C language (a C compiler kiln otherwise never
# needs) and asks for CMake 3.5 (deprecated by CMake 4). gmock is compiled into GTest::gtest
# because tests use <gmock/gmock.h> matchers while linking only GTest::gtest and GTest::gtest_main (the
# system build gets gmock's headers from /usr/include).
if(KILN_BUILD_TESTS)
  find_package(Threads REQUIRED)
  set(_kiln_gt "${_kiln_deps}/googletest")
  add_library(kiln_dep_gtest STATIC ${_kiln_gt}/googletest/src/gtest-all.cc ${_kiln_gt}/googlemock/src/gmock-all.cc)
  target_include_directories(kiln_dep_gtest SYSTEM PUBLIC ${_kiln_gt}/googletest/include ${_kiln_gt}/googlemock/include)
  target_include_directories(kiln_dep_gtest PRIVATE ${_kiln_gt}/googletest ${_kiln_gt}/googlemock)  # "src/..."
  target_link_libraries(kiln_dep_gtest PUBLIC Threads::Threads)
  add_library(kiln_dep_gtest_main STATIC ${_kiln_gt}/googletest/src/gtest_main.cc)
  target_link_libraries(kiln_dep_gtest_main PUBLIC kiln_dep_gtest)
  add_library(GTest::gtest ALIAS kiln_dep_gtest)
  add_library(GTest::gtest_main ALIAS kiln_dep_gtest_main)
endif()
