// What every harness under fuzz/ shares: a property that must hold for any input aborts when it does not, so
// that libFuzzer records the input as a crash (tools/fuzz.sh keeps it under build-sanitize/fuzz/<name>/).
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string_view>

namespace kiln::fuzz {

// Fails the run with `what` and, when given, the status message that broke the property.
[[noreturn]] inline void violated(const char* what, std::string_view detail = {}) {
  std::fprintf(stderr, "kiln fuzz: property violated: %s\n%.*s\n", what, static_cast<int>(detail.size()),
               detail.data());
  std::abort();
}

}  // namespace kiln::fuzz
