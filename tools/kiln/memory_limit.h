// `kiln run --max-memory`: what a run will allocate on the host, estimated from the graph before anything
// is allocated, and the limit it must stay under. A graph whose tensors cannot fit is refused with the
// byte count and the limit instead of dying with a bare std::bad_alloc (or being killed by the kernel).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "kiln/engine.h"
#include "kiln/graph.h"

namespace kiln::cli {

// The default limit: three quarters of the machine's physical memory.
int64_t default_max_memory();

// Host bytes a run needs at most: every tensor of the graph as f64 (random or read inputs and parameters,
// ref's values of every intermediate, which --check computes too), plus, on emu, every tensor in its
// storage type (the bound buffers and an upper bound on the workspace). Saturates instead of overflowing.
double run_memory_estimate(const Graph& g, DeviceKind device);

// Why the run is refused ("" when it fits): the estimate and the limit in bytes and binary units.
std::string memory_refusal(const Graph& g, DeviceKind device, int64_t limit, bool limit_given);

}  // namespace kiln::cli
