// dead-code elimination: nodes whose outputs reach no graph output go.
//
// Needs: a verified graph. Guarantees: every node contributes to an output. Inputs and parameters stay
// declared even when nothing reads them (the caller binds them).
#pragma once

#include "passes/pass.h"

namespace kiln {
Status eliminate_dead_code(Graph& g, PassContext& ctx);
}
