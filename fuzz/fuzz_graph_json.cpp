// libFuzzer harness: bytes -> the JSON graph loader -> save/load round trip -> planning.
//
// Properties (beyond "no crash, no sanitizer report, no hang, no runaway memory"):
//   - a graph that loads saves to text that loads again and saves to the same text (graph_to_json is canonical);
//   - planning a loaded graph, with verification after every pass, either succeeds or refuses the graph with a
//     user-facing error: an `internal` status (a pass broke the graph, a family disagreed with the planner) is
//     a kiln bug;
//   - a plan's text, JSON and explanation can be produced.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz/fuzz_check.h"
#include "kiln/json.h"
#include "kiln/plan.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kiln;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  Result<Graph> loaded = graph_from_json(text, "<fuzz>");
  if (!loaded.ok()) {
    if (loaded.status().message().empty()) fuzz::violated("a refused graph has an empty message");
    if (loaded.status().code() == StatusCode::internal)
      fuzz::violated("internal error loading", loaded.status().message());
    return 0;
  }
  Graph& g = loaded.value();
  const std::string saved = graph_to_json(g);
  Result<Graph> again = graph_from_json(saved, "<saved>");
  if (!again.ok()) fuzz::violated("the saved text of a loaded graph does not load", again.status().message());
  if (graph_to_json(again.value()) != saved) fuzz::violated("save -> load -> save changed the text", saved);

  PlanOptions options;
  options.verify_after_each_pass = true;
  Result<Plan> plan = plan_graph(std::move(g), options);
  if (!plan.ok()) {
    if (plan.status().code() == StatusCode::internal)
      fuzz::violated("internal error planning", plan.status().message());
    return 0;
  }
  (void)plan_to_text(plan.value());
  (void)plan_to_json(plan.value());
  (void)plan_explanation(plan.value());
  return 0;
}
