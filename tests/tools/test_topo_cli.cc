// zrt-topo as a user runs it: exit codes, tables, JSON.
#include <cstdlib>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/tools/run_command.h"
#include "zrt_build_config.h"

namespace zrt::testing {
namespace {

std::string topo_exe() {
  const char* path = std::getenv("ZRT_TOPO_EXE");
  return path != nullptr ? path : "";
}

TEST(ZrtTopo, PrintsTopologyAndBinding) {
  ASSERT_FALSE(topo_exe().empty()) << "ZRT_TOPO_EXE not set by meson";
  CommandResult r = run_command({topo_exe(), "-n", "2"});
  if (!ZRT_HAVE_HWLOC) {
    EXPECT_EQ(r.exit_code, 3);
    EXPECT_NE(r.err.find("without hwloc"), std::string::npos) << r.err;
    return;
  }
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* text :
       {"NUMA node", "core", "binding for 2 local rank(s)", "local_rank", "progress_cpu"}) {
    EXPECT_NE(r.out.find(text), std::string::npos) << text << "\n" << r.out;
  }
}

TEST(ZrtTopo, JsonParsesAndHasOneBindingPerRank) {
  if (!ZRT_HAVE_HWLOC) GTEST_SKIP() << "built without hwloc";
  CommandResult r = run_command({topo_exe(), "--ranks", "3", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["binding"]["ranks"].size(), 3u);
  EXPECT_FALSE(j["cores"].empty());
  EXPECT_TRUE(j["binding"]["ranks"][0]["env"].contains("ZRT_BIND_CPUS"));
}

TEST(ZrtTopo, RanksFromLauncherEnvironment) {
  if (!ZRT_HAVE_HWLOC) GTEST_SKIP() << "built without hwloc";
  CommandResult r = run_command({topo_exe(), "--json"}, {{"LOCAL_WORLD_SIZE", "4"}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["binding"]["ranks"].size(), 4u);
}

TEST(ZrtTopo, UsageErrorsAndHelp) {
  CommandResult r = run_command({topo_exe(), "-n", "0"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--ranks"), std::string::npos) << r.err;
  r = run_command({topo_exe(), "--bogus"});
  EXPECT_EQ(r.exit_code, 2);
  r = run_command({topo_exe(), "--help"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.out.find("Examples"), std::string::npos);
}

}  // namespace
}  // namespace zrt::testing
