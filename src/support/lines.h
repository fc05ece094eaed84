// Multi-line messages whose every line names what it is about.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "kiln/status.h"

namespace kiln::support {

// The non-empty lines of `message`, each led by "<source>: " unless it already starts with that (a message
// built from several checks of one graph names it once per line, so a line read alone still says which
// graph, file or kernel it is about). An empty `source` leads nothing.
std::vector<std::string> lines_naming(std::string_view message, std::string_view source);

// The same lines joined by '\n'.
std::string message_naming(std::string_view message, std::string_view source);
// `s` (same code) with its message's lines named so.
Status status_naming(const Status& s, std::string_view source);

}  // namespace kiln::support
