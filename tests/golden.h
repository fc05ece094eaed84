// Golden files: a test's output compared with a committed file, rewritten only when KILN_UPDATE_GOLDEN=1.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

namespace kiln {

inline void expect_matches_golden(const std::filesystem::path& file, const std::string& got) {
  if (std::getenv("KILN_UPDATE_GOLDEN") != nullptr) {
    std::ofstream(file, std::ios::binary) << got;
    return;
  }
  std::ifstream f(file, std::ios::binary);
  ASSERT_TRUE(f.good()) << file << " is missing: run the tests once with KILN_UPDATE_GOLDEN=1";
  std::stringstream ss;
  ss << f.rdbuf();
  EXPECT_EQ(got, ss.str()) << file << " differs (if the change is intended: KILN_UPDATE_GOLDEN=1)";
}

}  // namespace kiln
