// A graph's binary form: what a plan cache entry holds of its plan's graph (src/runtime/plan_cache.cpp).
// Unlike JSON it is read back without parsing text or inferring shapes: a planned ResNet-50's graph is read
// in a few tens of microseconds, where loading its JSON takes milliseconds.
//
// It holds the graph's structure, exactly what operator== compares (names, tensors with their shapes,
// dtypes, layouts, kinds and producers, nodes with their ports and normalized attributes, outputs) and the
// binding flag; not a parameter's values (they are the caller's, and the planner never reads them). A graph
// with symbols or with recorded problems has none (a plan's graph has neither).
#pragma once

#include <string>

#include "kiln/graph.h"
#include "support/byte_codec.h"

namespace kiln {

struct GraphCodec {
  // Appends the graph's binary form; false (nothing appended) for a graph with symbols or problems.
  static bool write(const Graph& g, support::ByteWriter& w);
  // Reads what write() wrote, checking every index, enum and name against the rest, so that no buffer, however
  // corrupt, gives a graph that breaks an invariant. Fails saying which part was malformed. The graph is not
  // marked verified: its first verify() re-infers every node, unless the caller trusts its writer (trust()).
  static Result<Graph> read(support::ByteReader& r);
  // Marks a graph read() gave as verified: its writer (a checksummed cache entry of this very kiln) verified it.
  static void trust(Graph& g) { g.verified_ = true; }
};

}  // namespace kiln
