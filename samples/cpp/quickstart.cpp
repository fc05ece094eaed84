// The README's tour of the C++ API as a program: build conv + batch norm + ReLU, verify, save it as JSON,
// run it on the reference backend and print what came out.
//
//   quickstart [OUT_DIR]      (writes OUT_DIR/conv_block.json; default: the current directory)
#include <cstdio>
#include <string>

#include "kiln/kiln.h"

int main(int argc, char** argv) {
  const std::string dir = argc > 1 ? argv[1] : ".";

  kiln::Graph g("conv_block");
  auto x = g.input("x", {1, 64, 56, 56});     // f32, NCHW by default
  auto w = g.parameter("w", {64, 64, 3, 3});  // a conv weight: KCRS by default
  auto bn = [&](const char* p) { return g.parameter(std::string("bn.") + p, {64}); };
  auto y = g.relu(g.batch_norm(g.conv2d(x, w, {.stride = {1, 1}, .padding = {1, 1}}), bn("scale"), bn("shift"),
                               bn("mean"), bn("var")));
  g.output(y, "y");

  kiln::Status st = g.verify();
  if (!st.ok()) {
    std::fprintf(stderr, "quickstart: %s\n", st.message().c_str());
    return 1;
  }
  st = kiln::save_graph(g, dir + "/conv_block.json");
  if (!st.ok()) {
    std::fprintf(stderr, "quickstart: %s\n", st.message().c_str());
    return 1;
  }

  auto inputs = kiln::random_inputs(g, /*seed=*/0);
  kiln::Result<kiln::TensorMap> out = kiln::run_reference(g, inputs);
  if (!out.ok()) {
    std::fprintf(stderr, "quickstart: %s\n", out.status().message().c_str());
    return 1;
  }
  const kiln::HostTensor& t = out->at("y");
  kiln::TensorStats s = kiln::tensor_stats(t);
  std::printf("y %s: min %g max %g mean %g\n", t.shape.to_string().c_str(), s.min, s.max, s.mean);
  return 0;
}
