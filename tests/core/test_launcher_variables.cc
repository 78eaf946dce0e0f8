// The launcher-variable table and its snapshot: which variables it declares, what a snapshot
// keeps of an environment (from a list, and from the process's), and how it prints them for
// ZRT_LOG=info.
#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "lib/core/launcher_variables.h"
#include "lib/core/settings.h"

namespace zrt {
namespace {

// Sets one variable for a test's duration, then restores it.
class ScopedVariable {
 public:
  ScopedVariable(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) saved_ = old;
    setenv(name, value, 1);
  }
  ~ScopedVariable() {
    if (saved_) {
      setenv(name_.c_str(), saved_->c_str(), 1);
    } else {
      unsetenv(name_.c_str());
    }
  }

 private:
  std::string name_;
  std::optional<std::string> saved_;
};

TEST(LauncherVariables, TableIsWellFormed) {
  std::set<std::string> names;
  for (const LauncherVariableSpec& spec : launcher_variable_specs()) {
    ASSERT_NE(spec.name, nullptr);
    EXPECT_TRUE(names.insert(spec.name).second) << spec.name << " is declared twice";
    EXPECT_NE(std::string(spec.set_by), "") << spec.name;
    EXPECT_NE(std::string(spec.use), "") << spec.name;
    // docs/ENVIRONMENT.md shows the rows as a table.
    EXPECT_EQ(std::string(spec.use).find('|'), std::string::npos) << spec.name;
    EXPECT_EQ(find_launcher_variable(spec.name), &spec) << spec.name;
  }
}

TEST(LauncherVariables, DeclaresTheVariablesTheLibraryReads) {
  // read_env_ranks' four families, the store, the job's identity, the checkpoint lock, the
  // device choice, and the UCX variables zrt leaves to the user when set.
  for (const char* name :
       {"ZRT_RANK", "ZRT_WORLD_SIZE", "ZRT_LOCAL_RANK", "ZRT_LOCAL_WORLD_SIZE", "RANK",
        "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_RANK",
        "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE",
        "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE",
        "ZRT_STORE_ADDR", "MASTER_ADDR", "ZRT_STORE_PORT", "MASTER_PORT", "ZRT_STORE_EXTERNAL",
        "ZRT_LAUNCHER_FD", "ZRT_JOB_TOKEN", "TORCHELASTIC_RUN_ID", "SLURM_JOB_ID",
        "SLURM_STEP_ID", "PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid", "UCX_TLS",
        "UCX_KEEPALIVE_INTERVAL", "UCX_RNDV_THRESH"}) {
    EXPECT_NE(find_launcher_variable(name), nullptr) << name;
  }
  for (const char* name : {"PATH", "ZRT_LOG", "ZRT_TIMEOUT", "UCX", "MASTER_ADDRESS"}) {
    EXPECT_EQ(find_launcher_variable(name), nullptr) << name << " is not a launcher variable";
  }
  EXPECT_EQ(launcher_variable_label(*find_launcher_variable("UCX_TLS")), "UCX_*");
  EXPECT_EQ(launcher_variable_label(*find_launcher_variable("RANK")), "RANK");
}

TEST(LauncherVariables, SnapshotKeepsTheDeclaredVariablesAndPrintsThem) {
  const std::vector<std::string> entries = {
      "PATH=/bin",       "SLURM_JOB_ID=12",       "UCX_TLS=tcp,self", "RANK=",
      "SLURM_JOB_ID=13", "ZRT_JOB_TOKEN=s3cret!", "NOT_AN_ENTRY",     "UCX_NET_DEVICES=eth0"};
  const LauncherVariables launcher = LauncherVariables::from_entries(entries);
  EXPECT_STREQ(launcher.value("SLURM_JOB_ID"), "12") << "the first entry of a name counts";
  EXPECT_STREQ(launcher.value("UCX_TLS"), "tcp,self");
  EXPECT_STREQ(launcher.value("RANK"), "") << "set but empty is set";
  EXPECT_TRUE(launcher.is_set("RANK"));
  EXPECT_EQ(launcher.value("PATH"), nullptr) << "not declared, not kept";
  EXPECT_EQ(launcher.value("WORLD_SIZE"), nullptr);
  EXPECT_FALSE(launcher.is_set("NOT_AN_ENTRY"));

  const EnvironmentLookup lookup = launcher.lookup();
  EXPECT_STREQ(lookup("SLURM_JOB_ID"), "12");
  EXPECT_EQ(lookup("SLURM_STEP_ID"), nullptr);

  EXPECT_EQ(launcher.describe(),
            "RANK= (set by torchrun, zrt-run), ZRT_JOB_TOKEN=<7 bytes, not shown> (set by "
            "zrt-run), SLURM_JOB_ID=12 (set by Slurm), UCX_NET_DEVICES=eth0 (set by you), "
            "UCX_TLS=tcp,self (set by you)");
  EXPECT_EQ(launcher.describe().find("s3cret"), std::string::npos) << "a secret never prints";
  EXPECT_EQ(LauncherVariables().describe(), "none");
}

TEST(LauncherVariables, LoadReadsTheProcessEnvironment) {
  const ScopedVariable step("SLURM_STEP_ID", "7");
  const ScopedVariable ucx("UCX_ZRT_TEST_VARIABLE", "x");
  const LauncherVariables launcher = LauncherVariables::load();
  EXPECT_STREQ(launcher.value("SLURM_STEP_ID"), "7");
  EXPECT_STREQ(launcher.value("UCX_ZRT_TEST_VARIABLE"), "x");
  EXPECT_NE(launcher.describe().find("SLURM_STEP_ID=7 (set by Slurm)"), std::string::npos)
      << launcher.describe();

  // Loading the settings from the process environment takes the same snapshot.
  Settings settings;
  ASSERT_TRUE(Settings::load(&settings).is_ok());
  EXPECT_STREQ(settings.launcher().value("SLURM_STEP_ID"), "7");
  // A lookup's settings carry none: a lookup cannot list UCX_*.
  const EnvironmentLookup nothing_set = [](const char*) -> const char* { return nullptr; };
  ASSERT_TRUE(Settings::load(nothing_set, &settings).is_ok());
  EXPECT_EQ(settings.launcher().value("SLURM_STEP_ID"), nullptr);
}

}  // namespace
}  // namespace zrt
