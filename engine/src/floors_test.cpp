// The engine's folders are floors (engine/CMakeLists.txt, the README's
// Layout): a file includes only from its own floor and the ones below it,
// and only runtime/ includes the Engine interface (sipllm/engine.h). Tests
// (*_test.cpp) may include anything.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <string>
#include <vector>

namespace sipllm {
namespace {

namespace fs = std::filesystem;

// Bottom up.
const std::vector<std::string> kFloors = {"io", "model", "core", "kernels", "text", "runtime"};

int floor_of(const std::string& folder) {
  for (size_t i = 0; i < kFloors.size(); ++i) {
    if (kFloors[i] == folder) return static_cast<int>(i);
  }
  return -1;
}

TEST(Floors, EveryIncludePointsDown) {
  const fs::path src = fs::path(SIPLLM_SOURCE_DIR) / "engine" / "src";
  const std::regex include_line(R"re(^\s*#\s*include\s+"([a-z_]+)/([^"]+)")re");
  std::map<std::string, int> files_per_floor;
  std::vector<std::string> violations;
  for (const auto& entry : fs::recursive_directory_iterator(src)) {
    const fs::path& path = entry.path();
    const std::string name = path.filename().string();
    if (!entry.is_regular_file() || (path.extension() != ".h" && path.extension() != ".cpp")) continue;
    if (name.size() > 9 && name.compare(name.size() - 9, 9, "_test.cpp") == 0) continue;
    const fs::path relative = fs::relative(path, src);
    if (relative.begin() == relative.end() || std::next(relative.begin()) == relative.end()) continue;  // src/*.cpp
    const std::string folder = relative.begin()->string();
    const int own = floor_of(folder);
    ASSERT_GE(own, 0) << relative << " is in no floor: add its folder to the floors";
    ++files_per_floor[folder];
    std::ifstream in(path);
    std::string line;
    while (std::getline(in, line)) {
      std::smatch m;
      if (!std::regex_search(line, m, include_line)) continue;
      const std::string target = m[1].str();
      if (target == "sipllm") {
        if (m[2].str() == "engine.h" && folder != "runtime") {
          violations.push_back(relative.string() + " includes sipllm/engine.h");
        }
        continue;
      }
      const int other = floor_of(target);
      if (other < 0) {
        violations.push_back(relative.string() + " includes " + target + "/" + m[2].str() + ", in no floor");
      } else if (other > own) {
        violations.push_back(relative.string() + " (" + folder + ") includes " + target + "/" + m[2].str());
      }
    }
  }
  for (const std::string& floor : kFloors) EXPECT_GT(files_per_floor[floor], 0) << "no files in " << floor;
  EXPECT_TRUE(violations.empty()) << [&] {
    std::string all;
    for (const std::string& v : violations) all += "\n  " + v;
    return all;
  }();
}

}  // namespace
}  // namespace sipllm
