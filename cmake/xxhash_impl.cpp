// xxHash's implementation, compiled from its header: the library behind xxhash::xxhash when dependencies come
// from KILN_DEPS_DIR (cmake/deps.cmake), in place of the Debian package's libxxhash.a. xxhash.h declares its
// functions extern "C", so src/cache/key.cpp links against these exactly as against the package's library.
#define XXH_STATIC_LINKING_ONLY
#define XXH_IMPLEMENTATION
#include <xxhash.h>
