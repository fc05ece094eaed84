// Shared by the tests that run `kiln` as a subprocess (test_cli, test_plan_cli, test_plan_explain_cli): the
// samples, the fixture (kiln(), expect_usage()), and helpers.
#pragma once

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "kiln/json.h"
#include "subprocess.h"
#include "temp_dir.h"

namespace kiln {

namespace fs = std::filesystem;
using subprocess::Proc;
using subprocess::slurp;
using ::testing::HasSubstr;
using ::testing::StartsWith;

namespace plan_cli {

inline std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

inline std::vector<std::string> sample_graphs() {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(fs::path(KILN_SOURCE_DIR) / "samples" / "graphs")) {
    if (e.path().extension() == ".json") out.push_back(e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

inline std::string sample(const std::string& name) {
  return (fs::path(KILN_SOURCE_DIR) / "samples" / "graphs" / (name + ".json")).string();
}

// The first program called `name` on the PATH, or "" when there is none.
inline std::string find_on_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  if (path == nullptr) return {};
  std::istringstream in(path);
  for (std::string dir; std::getline(in, dir, ':');) {
    if (dir.empty()) continue;
    fs::path p = fs::path(dir) / name;
    if (::access(p.c_str(), X_OK) == 0) return p.string();
  }
  return {};
}

class PlanCliFixture : public TempDirTest {
 protected:
  Proc kiln(const std::vector<std::string>& args) { return subprocess::run_process(KILN_CLI_PATH, args, dir_); }

  // Verifies `g` and saves it as `name` in the test's directory; the path.
  std::string save(Graph g, const std::string& name) {
    Status v = g.verify();
    EXPECT_TRUE(v.ok()) << v.message();
    EXPECT_TRUE(save_graph(g, path(name)).ok());
    return path(name);
  }

  // A usage error: exit 2, one error line and the hint, nothing on stdout.
  void expect_usage(const std::vector<std::string>& args, const std::string& needle) {
    Proc p = kiln(args);
    std::string what = "kiln " + ::testing::PrintToString(args);
    EXPECT_EQ(p.code, 2) << what << "\n" << p.err;
    EXPECT_EQ(p.out, "") << what;
    EXPECT_THAT(p.err, StartsWith("error: ")) << what;
    EXPECT_THAT(p.err, HasSubstr(needle)) << what;
    EXPECT_THAT(p.err, ::testing::ContainsRegex("run 'kiln ([a-z]+ )*--help' for usage")) << what;
    EXPECT_EQ(lines_of(p.err).size(), 2u) << what << "\n" << p.err;
  }
};

}  // namespace plan_cli
}  // namespace kiln
