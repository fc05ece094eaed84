// What may name a graph, a node or a tensor: anything but control bytes. Names are printed everywhere (plan
// text on terminals, where ESC starts an escape sequence; Graphviz files, whose input a NUL ends; error
// messages), so a name holding one is refused when the graph is checked, its bytes spelled \xNN.
#pragma once

#include <string>
#include <string_view>

namespace kiln {

// Why `name` cannot be a name ("" when it can): its first control byte (below 0x20, or 0x7f) and where.
std::string name_problem(std::string_view name);
// `name` with every control byte spelled \xNN (and backslashes doubled), for messages about such names.
std::string printable_name(std::string_view name);

}  // namespace kiln
