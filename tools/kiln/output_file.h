// Files a command writes besides its stdout (kiln profile --plot, kiln bench/run --trace).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "kiln/status.h"

namespace kiln::cli {

// Why `path`, given with `flag`, cannot take the file, or "" when it can: its directory does not exist,
// it is a directory or anything else that is not a regular file, or it is one of `inputs` (the same file,
// through any spelling or link). Called before the command does its work.
std::string output_file_problem(std::string_view flag, const std::string& path, const std::vector<std::string>& inputs);

// Writes the whole file at once (a temporary beside it, renamed over it): a failed or interrupted write
// leaves the old file or none, never half of one. Errors say "cannot write '<path>': <why>".
Status write_output_file(const std::string& path, std::string_view bytes);

}  // namespace kiln::cli
