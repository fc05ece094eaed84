// Reverse-mode automatic differentiation of a graph (docs/training.md).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "kiln/graph.h"
#include "kiln/status.h"

namespace kiln {

struct Training {
  // The forward graph's nodes and outputs, then the backward's, with an output `grad/<parameter>` for every
  // parameter: the gradient of the loss with respect to it.
  Graph graph;
  // One line per parameter the loss does not reach (its gradient is zero), naming it.
  std::vector<std::string> warnings;
};

// The training graph of `g` for `loss`, the name of one of its tensors holding one element (a scalar; a
// reduce_mean or reduce_sum over every axis makes one). Each op's vector-Jacobian rule lives in its registry
// row (docs/training.md lists which ops have one); an op on a path from a parameter to the loss without a rule is
// an error naming the node and the op. Fails on a graph that does not verify, an unknown or non-scalar
// loss, and a graph with symbolic dims (bind them first).
Result<Training> backward(const Graph& g, std::string_view loss);

}  // namespace kiln
