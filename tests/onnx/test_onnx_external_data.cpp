// ONNX external data as a hostile model would point it: through links out of the model's folder, at a
// FIFO or a directory, with offsets that are not numbers. Each is refused by name; nothing outside the
// model's folder is ever read (the class of onnx's CVE-2024-27318).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "kiln/onnx.h"
#include "onnx/onnx_model_builder.h"
#include "temp_dir.h"

namespace kiln {
namespace {

using testing::OnnxModel;
namespace fs = std::filesystem;

class OnnxExternalData : public TempDirTest {
 protected:
  void SetUp() override {
    TempDirTest::SetUp();
    fs::create_directories(path("model"));
    fs::create_directories(path("outside"));
    // What an attacker would like imported: 4 floats outside the model's folder.
    write("outside/secret.bin", std::string(reinterpret_cast<const char*>(kSecret), sizeof kSecret));
  }
  // m.onnx in model/, its weight 'w' external at `location` (with `offset` when given).
  void write_model(const std::string& location, const std::string& offset = {}) {
    OnnxModel m;
    m.input("x", {1, 2, 3, 3}).output("y", {1, 2, 3, 3});
    auto& w = m.weight("w", {2, 2, 1, 1}, {0.f, 0.f, 0.f, 0.f});
    w.clear_float_data();
    w.set_data_location(onnx::TensorProto::EXTERNAL);
    auto* loc = w.add_external_data();
    loc->set_key("location");
    loc->set_value(location);
    if (!offset.empty()) {
      auto* off = w.add_external_data();
      off->set_key("offset");
      off->set_value(offset);
    }
    m.node("Conv", {"x", "w"}, {"y"}, "conv");
    write("model/m.onnx", m.bytes());
  }
  std::string refusal() {
    auto g = load_onnx(path("model/m.onnx"));
    EXPECT_FALSE(g.ok()) << "imported: w = " << (g.ok() && g->value("w") ? g->value("w")->data[0] : -1.0);
    return g.ok() ? std::string() : g.status().message();
  }
  static constexpr float kSecret[4] = {11.f, 22.f, 33.f, 44.f};
};

TEST_F(OnnxExternalData, AFileInsideTheFolderIsRead) {
  fs::create_directories(path("model/data"));
  write("model/data/w.bin", std::string(reinterpret_cast<const char*>(kSecret), sizeof kSecret));
  write_model("data/w.bin");
  auto g = load_onnx(path("model/m.onnx"));
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(g->value("w")->data, (std::vector<double>{11, 22, 33, 44}));
}

TEST_F(OnnxExternalData, ALinkToAFileOutsideIsRefused) {
  fs::create_symlink(path("outside/secret.bin"), path("model/w.bin"));
  write_model("w.bin");
  const std::string msg = refusal();
  EXPECT_NE(msg.find("initializer 'w': external data 'w.bin': 'w.bin' is a symbolic link"), std::string::npos) << msg;
}

TEST_F(OnnxExternalData, APathThroughALinkedFolderIsRefused) {
  fs::create_directory_symlink(path("outside"), path("model/data"));
  write_model("data/secret.bin");
  const std::string msg = refusal();
  EXPECT_NE(msg.find("'data' is a symbolic link, not a directory"), std::string::npos) << msg;
}

TEST_F(OnnxExternalData, AFifoIsRefusedWithoutWaitingForAWriter) {
  ASSERT_EQ(::mkfifo(path("model/w.bin").c_str(), 0600), 0);
  write_model("w.bin");
  const std::string msg = refusal();  // hung forever in open() before
  EXPECT_NE(msg.find("'w.bin' is a FIFO, not a regular file"), std::string::npos) << msg;
}

TEST_F(OnnxExternalData, ADirectoryIsNamedAsOne) {
  fs::create_directories(path("model/w.bin"));
  write_model("w.bin");
  const std::string msg = refusal();
  EXPECT_NE(msg.find("'w.bin' is a directory, not a regular file"), std::string::npos) << msg;
}

TEST_F(OnnxExternalData, AShortFileIsRefused) {
  write("model/w.bin", std::string(reinterpret_cast<const char*>(kSecret), 8));  // 2 of the 4 floats
  write_model("w.bin");
  const std::string msg = refusal();
  EXPECT_NE(msg.find("initializer 'w': external data file 'w.bin' holds 8 bytes, fewer than the 16"), std::string::npos)
      << msg;
}

TEST_F(OnnxExternalData, AMissingFileIsNamed) {
  write_model("w.bin");
  const std::string msg = refusal();
  EXPECT_NE(msg.find("initializer 'w': external data 'w.bin': 'w.bin' does not exist beneath"), std::string::npos)
      << msg;
}

TEST_F(OnnxExternalData, AnOffsetThatIsNoNumberIsRefused) {
  write("model/w.bin", std::string(64, '\0'));
  for (const char* offset : {"abc", "12abc", "-4", "99999999999999999999999"}) {
    write_model("w.bin", offset);
    const std::string msg = refusal();
    EXPECT_NE(
        msg.find(std::string("initializer 'w': external data offset '") + offset + "' is not a non-negative integer"),
        std::string::npos)
        << msg;
  }
  write_model("w.bin", "16");  // a real offset still works: bytes 16..31 of zeros
  auto g = load_onnx(path("model/m.onnx"));
  ASSERT_TRUE(g.ok()) << g.status().message();
}

}  // namespace
}  // namespace kiln
