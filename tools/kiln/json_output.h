// --json: the documents `kiln ... --json` writes on stdout (docs/cli.md, "JSON output"). Each is one object
// with "schema": "kiln.<command>/<version>"; a field is never renamed or retyped within a version, new fields
// may appear. Errors still go to stderr; validate also lists them in its document.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kiln/graph.h"

namespace kiln::cli {

using Json = nlohmann::ordered_json;

// {"schema": "kiln.<what>/1"}: the start of every document.
Json json_document(std::string_view what);
// Writes `doc` to stdout, indented, with a final newline.
void print_json(const Json& doc);
// A graph's summary (what validate prints as text): name, counts, tensors, ops, parameter sizes.
Json graph_summary_json(const Graph& g);

}  // namespace kiln::cli
