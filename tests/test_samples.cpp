// Every shipped sample: each graph in samples/graphs loads, verifies and runs on `ref`; the C++ sample
// that builds ResNet-50 runs and reproduces the committed samples/graphs/resnet50.json byte for byte.
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <unistd.h>

#include <gtest/gtest.h>

#include "kiln/kiln.h"
#include "ops/registry.h"

namespace fs = std::filesystem;

namespace kiln {
namespace {

std::string read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::vector<fs::path> sample_graphs() {
  std::vector<fs::path> v;
  for (const auto& e : fs::directory_iterator(fs::path(KILN_SOURCE_DIR) / "samples" / "graphs")) {
    if (e.path().extension() == ".json") v.push_back(e.path());
  }
  std::sort(v.begin(), v.end());
  return v;
}

TEST(Samples, TheIssueSamplesExist) {
  for (const char* name :
       {"conv_bias_bn_relu", "resnet50_bottleneck", "groupnorm_silu_conv", "mlp_gelu", "lstm_cell", "resnet50"}) {
    EXPECT_TRUE(fs::exists(fs::path(KILN_SOURCE_DIR) / "samples" / "graphs" / (std::string(name) + ".json"))) << name;
  }
}

TEST(Samples, EveryGraphLoadsVerifiesAndRunsOnRef) {
  for (const fs::path& p : sample_graphs()) {
    SCOPED_TRACE(p.filename().string());
    auto g = load_graph(p.string());
    ASSERT_TRUE(g.ok()) << g.status().message();
    ASSERT_TRUE(g->verify().ok());
    if (p.filename() == "resnet50.json") continue;  // run in its own test below
    TensorMap inputs = random_inputs(*g, 7);
    auto out = run_reference(*g, inputs);
    ASSERT_TRUE(out.ok()) << out.status().message();
    ASSERT_EQ(out->size(), g->outputs().size());
    for (const auto& [name, t] : *out) {
      TensorStats s = tensor_stats(t);
      EXPECT_EQ(s.nan_count + s.inf_count, 0) << name;
      if (t.numel() > 1) {
        EXPECT_GT(s.std, 0.0) << name << " is constant";
      } else {  // a scalar (a loss): not constant across elements, but not 0 either
        EXPECT_NE(t.data[0], 0.0) << name;
      }
    }
  }
}

TEST(Samples, Resnet50GeneratorReproducesTheCommittedGraph) {
  fs::path dir = fs::temp_directory_path() / ("kiln_resnet50_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  fs::path out = dir / "resnet50.json";
  std::string cmd = std::string(KILN_RESNET50_SAMPLE_PATH) + " " + out.string() + " > /dev/null";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::string generated = read_file(out);
  std::string committed = read_file(fs::path(KILN_SOURCE_DIR) / "samples" / "graphs" / "resnet50.json");
  fs::remove_all(dir);
  ASSERT_FALSE(generated.empty());
  EXPECT_TRUE(generated == committed) << "samples/graphs/resnet50.json is out of date: regenerate it with "
                                         "build/resnet50_graph samples/graphs/resnet50.json";
}

TEST(Samples, QuickstartFromTheReadmeRuns) {
  fs::path dir = fs::temp_directory_path() / ("kiln_quickstart_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::string cmd = std::string(KILN_QUICKSTART_SAMPLE_PATH) + " " + dir.string() + " > " + (dir / "out.txt").string();
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::string printed = read_file(dir / "out.txt");
  auto g = load_graph((dir / "conv_block.json").string());
  fs::remove_all(dir);
  EXPECT_EQ(printed.rfind("y [1, 64, 56, 56]: min 0 max ", 0), 0u) << printed;  // ReLU: the minimum is 0
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(g->nodes().size(), 3u);
}

// samples/train: the synthetic task from its script, learned by samples/cpp/train_cnn.cpp on emu (conv + batch
// norm + ReLU, a residual block, global pool, linear, cross-entropy; SGD): the sample exits 0 only when the mean
// loss of its last 10 steps is below 1.0 (chance: 2.30), and 40 steps get there.
TEST(Samples, TrainCnnLearnsTheSyntheticTask) {
  fs::path dir = fs::temp_directory_path() / ("kiln_train_cnn_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string data = "/usr/bin/python3 " + (fs::path(KILN_SOURCE_DIR) / "samples/train/make_data.py").string() +
                           " " + dir.string() + " --count 256 > /dev/null";
  ASSERT_EQ(std::system(data.c_str()), 0) << data << " (needs NumPy: tools/setup.sh --test)";
  const std::string cmd =
      std::string(KILN_TRAIN_CNN_SAMPLE_PATH) + " " + dir.string() + " --steps 40 > " + (dir / "out.txt").string();
  const int code = std::system(cmd.c_str());
  const std::string printed = read_file(dir / "out.txt");
  fs::remove_all(dir);
  EXPECT_EQ(code, 0) << printed;
  EXPECT_NE(printed.find("step 40/40  loss "), std::string::npos) << printed;
  EXPECT_NE(printed.find("(below 1.0; chance 2.30)"), std::string::npos) << printed;
}

TEST(Samples, Resnet50HasTheWholeNetworkAndRunsOnRef) {
  auto g = load_graph((fs::path(KILN_SOURCE_DIR) / "samples" / "graphs" / "resnet50.json").string());
  ASSERT_TRUE(g.ok()) << g.status().message();
  std::map<OpId, int> count;
  for (const Node& n : g->nodes()) count[*n.op]++;
  EXPECT_EQ(count[OpId::conv2d], 53);
  EXPECT_EQ(count[OpId::batch_norm], 53);
  EXPECT_EQ(count[OpId::relu], 49);
  EXPECT_EQ(count[OpId::add], 16);
  EXPECT_EQ(count[OpId::max_pool2d], 1);
  EXPECT_EQ(count[OpId::global_avg_pool], 1);
  EXPECT_EQ(count[OpId::matmul], 1);
  ASSERT_EQ(g->outputs().size(), 1u);
  EXPECT_EQ(g->shape(g->outputs()[0]), (Shape{1, 1000}));
  // 25.6 M parameters, as torchvision's resnet50 (batch-norm statistics counted apart).
  int64_t params = 0;
  for (Tensor t : g->bound_tensors()) {
    const TensorInfo& info = g->tensor(t);
    if (info.kind == TensorKind::parameter && info.name.find(".bn") == std::string::npos &&
        info.name.find("bn1.") != 0 && info.name.find("downsample.1") == std::string::npos) {
      params += info.shape.numel();
    }
  }
  EXPECT_EQ(params, 25557032 - 53120);  // torchvision's count minus the batch norms' scale and shift
  auto out = run_reference(*g, random_inputs(*g, 1));
  ASSERT_TRUE(out.ok()) << out.status().message();
  TensorStats s = tensor_stats(out->at("logits"));
  EXPECT_EQ(s.nan_count + s.inf_count, 0);
  EXPECT_GT(s.std, 0.0);
}

}  // namespace
}  // namespace kiln
