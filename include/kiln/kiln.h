// kiln: a graph-based operation fusion engine for CUDA. The umbrella header of the public API.
#pragma once

#include "kiln/graph.h"
#include "kiln/host_tensor.h"
#include "kiln/json.h"
#include "kiln/ops.h"
#include "kiln/reference.h"
#include "kiln/status.h"
#include "kiln/types.h"
