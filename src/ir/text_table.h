// Plain-text formatting shared by the plan's text form and the `kiln` program: grouped digits, byte
// sizes and aligned tables.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kiln {

std::string group_digits(int64_t n);     // "1,234,567"
std::string human_bytes(int64_t bytes);  // "97.5 MiB"
// Rows as columns separated by two spaces, each line indented by `indent`, trimmed on the right, ending
// in a newline.
std::string render_table(const std::vector<std::vector<std::string>>& rows, int indent);

}  // namespace kiln
