// `kiln plan --format svg`: the dot form drawn by Graphviz's `dot` program (Debian's graphviz package).
#pragma once

#include <string>

#include "kiln/status.h"

namespace kiln::cli {

// Runs `dot -Tsvg` (found on the PATH, or at $KILN_DOT) on `dot_source` and returns the SVG. Fails with
// what to install when there is no dot, and with dot's own messages when it refuses the source.
Result<std::string> render_dot_svg(const std::string& dot_source);

}  // namespace kiln::cli
