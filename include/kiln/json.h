// Loading and saving graphs as JSON (the format is documented in docs/graph-format.md).
//
// Loading checks everything and reports each problem with its JSON path and node name, expected vs actual:
//   /nodes/3/attrs/stride: node 'conv1' (conv2d): attribute 'stride': expected a list of 2 integers, got 1.5
// Saving writes a canonical text, so load -> save -> load -> save gives byte-identical text.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "kiln/graph.h"
#include "kiln/status.h"

namespace kiln {

struct JsonLoadOptions {
  int64_t max_bytes = int64_t{64} << 20;  // larger files are refused before parsing
  int max_depth = 32;                     // deeper nesting is refused before parsing
};

// Parses and verifies a graph from JSON text. `source` names the text in messages (a file path).
Result<Graph> graph_from_json(std::string_view text, std::string_view source = "<string>",
                              const JsonLoadOptions& options = {});
// Reads a file and parses it as above; a missing or unreadable file is a not_found / io_error Status.
Result<Graph> load_graph(const std::string& path, const JsonLoadOptions& options = {});

// Canonical JSON text of a graph (2-space indent, trailing newline). The graph must have passed verify().
std::string graph_to_json(const Graph& g);
// Writes graph_to_json(g) to `path` (through a temporary file and a rename, so a reader never sees half).
Status save_graph(const Graph& g, const std::string& path);

struct Plan;  // kiln/plan.h
// The JSON form of a plan (2-space indent, keys in a fixed order, trailing newline): "format": "kiln.plan",
// "version", "graph", "groups" (id, kind, family, kernel, view_of (an elided concat that is a view of a larger
// one: that one's output; else null), nodes {index, name, op}, inputs and outputs {name, shape,
// dtype, layout, kind}, bytes_read, bytes_written), "split_groups" (kind, nodes, reason), "separations"
// (producer_group, producer_node, producer_op, consumer_group, consumer_node, consumer_op, tensor, concat,
// rule, reason: Plan::separations), "buffers" (tensor, offset, bytes, first_group, last_group, alias_of,
// alias_axis_offset) and "totals" (groups, kernels, weight_transforms, workspace_bytes, bytes_moved,
// unfused_bytes_moved, fused_over_unfused).
std::string plan_to_json(const Plan& p);

}  // namespace kiln
