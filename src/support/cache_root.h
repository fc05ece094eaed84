// Where kiln keeps its on-disk caches: one directory for every process of one user, shared by the kernel
// cache (src/cache/, docs/cache.md) and everything that stores into it (NVRTC cubins, emu shared objects).
#pragma once

#include <optional>
#include <string>

namespace kiln::support {

// $KILN_CACHE_DIR, else $XDG_CACHE_HOME/kiln, else $HOME/.cache/kiln; nothing when all three are unset
// (the caller decides whether that is an error). Empty variables count as unset.
std::optional<std::string> cache_root();

}  // namespace kiln::support
