// zrt-mem as a user runs it: the paper's example on the command line, JSON, exit codes.
#include <cstdlib>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/tools/run_command.h"

namespace zrt::testing {
namespace {

std::string mem_exe() {
  const char* path = std::getenv("ZRT_MEM_EXE");
  return path != nullptr ? path : "";
}

TEST(ZrtMemCli, PaperExampleTable) {
  ASSERT_FALSE(mem_exe().empty()) << "ZRT_MEM_EXE not set by meson";
  CommandResult r = run_command({mem_exe(), "--params", "7.5e9", "--ranks", "64"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* text : {"120.00 GB", "31.41 GB", "16.64 GB", "1.88 GB", "stage 0 (DP)",
                           "optimizer state", "gather window"}) {
    EXPECT_NE(r.out.find(text), std::string::npos) << text << "\n" << r.out;
  }
}

TEST(ZrtMemCli, JsonAndRanksFromEnvironment) {
  CommandResult r =
      run_command({mem_exe(), "--params", "1B", "--stage", "3", "--json"}, {{"WORLD_SIZE", "8"}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["settings"]["ranks"], 8);
  ASSERT_EQ(j["stages"].size(), 1u);
  EXPECT_NEAR(j["stages"][0]["theoretical_model_state"].get<double>(), 16e9 / 8, 1e6);
}

TEST(ZrtMemCli, BadProfileExitsTwoWithLineAndField) {
  std::string dir = make_temp_dir();
  ASSERT_FALSE(dir.empty());
  std::string path = dir + "/model.json";
  std::ofstream(path) << "{\n  \"units\": [\n    {\"name\": \"a\", \"params\": 10},\n"
                         "    {\"name\": \"b\", \"params\": \"lots\"}\n  ]\n}\n";
  CommandResult r =
      run_command({mem_exe(), "--profile", path, "--ranks", "8"}, {{"WORLD_SIZE", ""}});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("model.json:4: units[1].params"), std::string::npos) << r.err;
  std::system(("rm -rf '" + dir + "'").c_str());
  r = run_command({mem_exe(), "--params", "1B"}, {{"WORLD_SIZE", ""}});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--ranks"), std::string::npos) << r.err;
  r = run_command({mem_exe(), "--help"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.out.find("Examples"), std::string::npos);
}

}  // namespace
}  // namespace zrt::testing
