// read_env_ranks: the four launcher families, their precedence, and strict errors.
#include <cstdlib>
#include <map>
#include <optional>
#include <string>

#include <gtest/gtest.h>

#include "lib/bootstrap/bootstrap.h"

namespace zrt {
namespace {

// Clears every variable read_env_ranks looks at for the test's duration, then restores them.
class EnvScope {
 public:
  EnvScope() {
    for (const char* name : kNames) {
      const char* value = std::getenv(name);
      if (value != nullptr) saved_[name] = value;
      unsetenv(name);
    }
  }
  ~EnvScope() {
    for (const char* name : kNames) {
      unsetenv(name);
      auto found = saved_.find(name);
      if (found != saved_.end()) setenv(name, found->second.c_str(), 1);
    }
  }
  void set(const char* name, const std::string& value) { setenv(name, value.c_str(), 1); }

 private:
  static constexpr const char* kNames[] = {"ZRT_RANK",
                                           "ZRT_WORLD_SIZE",
                                           "ZRT_LOCAL_RANK",
                                           "ZRT_LOCAL_WORLD_SIZE",
                                           "RANK",
                                           "WORLD_SIZE",
                                           "LOCAL_RANK",
                                           "LOCAL_WORLD_SIZE",
                                           "MASTER_ADDR",
                                           "MASTER_PORT",
                                           "OMPI_COMM_WORLD_RANK",
                                           "OMPI_COMM_WORLD_SIZE",
                                           "OMPI_COMM_WORLD_LOCAL_RANK",
                                           "OMPI_COMM_WORLD_LOCAL_SIZE",
                                           "SLURM_PROCID",
                                           "SLURM_NTASKS",
                                           "SLURM_LOCALID",
                                           "SLURM_NTASKS_PER_NODE",
                                           "ZRT_STORE_ADDR",
                                           "ZRT_STORE_PORT",
                                           "ZRT_JOB_TOKEN",
                                           "ZRT_STORE_EXTERNAL",
                                           "TORCHELASTIC_RUN_ID"};
  std::map<std::string, std::string> saved_;
};

TEST(EnvRanks, NothingSetIsOneRank) {
  EnvScope env;
  EnvRanks ranks;
  ASSERT_TRUE(read_env_ranks(&ranks).is_ok());
  EXPECT_EQ(ranks.rank, 0);
  EXPECT_EQ(ranks.size, 1);
  EXPECT_EQ(ranks.local_rank, 0);
  EXPECT_EQ(ranks.local_size, 1);
  EXPECT_EQ(ranks.source, "default");
  EXPECT_FALSE(ranks.store_external);
}

TEST(EnvRanks, Torchrun) {
  EnvScope env;
  env.set("RANK", "3");
  env.set("WORLD_SIZE", "8");
  env.set("LOCAL_RANK", "1");
  env.set("LOCAL_WORLD_SIZE", "2");
  env.set("MASTER_ADDR", "node7");
  env.set("MASTER_PORT", "29500");
  env.set("ZRT_JOB_TOKEN", "secret");
  env.set("ZRT_STORE_EXTERNAL", "1");
  EnvRanks ranks;
  Status status = read_env_ranks(&ranks);
  ASSERT_TRUE(status.is_ok()) << status.message();
  EXPECT_EQ(ranks.source, "torchrun");
  EXPECT_EQ(ranks.rank, 3);
  EXPECT_EQ(ranks.size, 8);
  EXPECT_EQ(ranks.local_rank, 1);
  EXPECT_EQ(ranks.local_size, 2);
  EXPECT_EQ(ranks.store_host, "node7");
  EXPECT_EQ(ranks.store_port, 29500);
  EXPECT_EQ(ranks.job_token, "secret");
  EXPECT_TRUE(ranks.store_external);
}

// Under torchrun (TORCHELASTIC_RUN_ID set) MASTER_PORT is torch's, so zrt's store moves to a
// port every rank derives alike; ZRT_STORE_PORT still wins.
TEST(EnvRanks, UnderTorchrunTheStoreDerivesItsPortFromMasterPort) {
  EnvScope env;
  env.set("RANK", "1");
  env.set("WORLD_SIZE", "2");
  env.set("MASTER_ADDR", "node0");
  env.set("MASTER_PORT", "29500");
  env.set("TORCHELASTIC_RUN_ID", "job");
  EnvRanks ranks;
  ASSERT_TRUE(read_env_ranks(&ranks).is_ok());
  EXPECT_TRUE(ranks.under_torchrun);
  EXPECT_EQ(ranks.store_port, 29501);
  EXPECT_EQ(ranks.store_port_origin, "MASTER_PORT+1");
  env.set("MASTER_PORT", "65535");
  ASSERT_TRUE(read_env_ranks(&ranks).is_ok());
  EXPECT_EQ(ranks.store_port, 65534);
  EXPECT_EQ(ranks.store_port_origin, "MASTER_PORT-1");
  env.set("ZRT_STORE_PORT", "4000");
  ASSERT_TRUE(read_env_ranks(&ranks).is_ok());
  EXPECT_EQ(ranks.store_port, 4000);
  EXPECT_EQ(ranks.store_port_origin, "ZRT_STORE_PORT");
}

TEST(EnvRanks, ZrtOwnVariablesAndStoreAddressWin) {
  EnvScope env;
  env.set("ZRT_RANK", "1");
  env.set("ZRT_WORLD_SIZE", "2");
  env.set("ZRT_LOCAL_RANK", "0");
  env.set("ZRT_LOCAL_WORLD_SIZE", "1");
  env.set("RANK", "5");
  env.set("WORLD_SIZE", "9");
  env.set("MASTER_ADDR", "ignored");
  env.set("MASTER_PORT", "1000");
  env.set("ZRT_STORE_ADDR", "10.0.0.1");
  env.set("ZRT_STORE_PORT", "2000");
  EnvRanks ranks;
  ASSERT_TRUE(read_env_ranks(&ranks).is_ok());
  EXPECT_EQ(ranks.source, "zrt");
  EXPECT_EQ(ranks.rank, 1);
  EXPECT_EQ(ranks.size, 2);
  EXPECT_EQ(ranks.local_size, 1);
  EXPECT_EQ(ranks.store_host, "10.0.0.1");
  EXPECT_EQ(ranks.store_port, 2000);
}

TEST(EnvRanks, OpenMpiBeatsSlurm) {
  EnvScope env;
  env.set("OMPI_COMM_WORLD_RANK", "2");
  env.set("OMPI_COMM_WORLD_SIZE", "4");
  env.set("OMPI_COMM_WORLD_LOCAL_RANK", "0");
  env.set("OMPI_COMM_WORLD_LOCAL_SIZE", "2");
  env.set("SLURM_PROCID", "0");
  env.set("SLURM_NTASKS", "16");
  env.set("MASTER_PORT", "1234");
  EnvRanks ranks;
  ASSERT_TRUE(read_env_ranks(&ranks).is_ok());
  EXPECT_EQ(ranks.source, "openmpi");
  EXPECT_EQ(ranks.rank, 2);
  EXPECT_EQ(ranks.size, 4);
  EXPECT_EQ(ranks.local_rank, 0);
  EXPECT_EQ(ranks.local_size, 2);
}

TEST(EnvRanks, SlurmWithoutTasksPerNodeDerivesLocalRanks) {
  EnvScope env;
  env.set("SLURM_PROCID", "5");
  env.set("SLURM_NTASKS", "6");
  env.set("SLURM_LOCALID", "1");
  env.set("MASTER_PORT", "1234");
  EnvRanks ranks;
  ASSERT_TRUE(read_env_ranks(&ranks).is_ok());
  EXPECT_EQ(ranks.source, "slurm");
  EXPECT_EQ(ranks.rank, 5);
  EXPECT_EQ(ranks.size, 6);
  EXPECT_EQ(ranks.local_rank, -1);  // derived from host names by the bootstrap
  EXPECT_EQ(ranks.local_size, -1);
  env.set("SLURM_NTASKS_PER_NODE", "3");
  ASSERT_TRUE(read_env_ranks(&ranks).is_ok());
  EXPECT_EQ(ranks.local_rank, 1);
  EXPECT_EQ(ranks.local_size, 3);
}

struct BadCase {
  std::map<std::string, std::string> vars;
  std::string message;
};

TEST(EnvRanks, ErrorsNameTheVariableAndValue) {
  const BadCase cases[] = {
      {{{"RANK", "x"}, {"WORLD_SIZE", "4"}, {"MASTER_PORT", "1"}}, "RANK='x' is not an integer"},
      {{{"RANK", "4"}, {"WORLD_SIZE", "4"}, {"MASTER_PORT", "1"}}, "RANK=4 >= WORLD_SIZE=4"},
      {{{"RANK", "1 "}, {"WORLD_SIZE", "4"}, {"MASTER_PORT", "1"}}, "RANK='1 ' is not an integer"},
      {{{"RANK", ""}, {"WORLD_SIZE", "4"}, {"MASTER_PORT", "1"}}, "RANK='' is not an integer"},
      {{{"RANK", "-1"}, {"WORLD_SIZE", "4"}, {"MASTER_PORT", "1"}}, "RANK='-1' is negative"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "99999999999"}}, "WORLD_SIZE='99999999999' is out of range"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "0"}}, "WORLD_SIZE=0 must be >= 1"},
      {{{"RANK", "0"}}, "RANK is set but WORLD_SIZE is not"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "2"}}, "neither ZRT_STORE_PORT nor MASTER_PORT is set"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "70000"}}, "MASTER_PORT=70000"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "12ab"}},
       "MASTER_PORT='12ab' is not an integer"},
      {{{"RANK", "1"},
        {"WORLD_SIZE", "4"},
        {"LOCAL_RANK", "2"},
        {"LOCAL_WORLD_SIZE", "2"},
        {"MASTER_PORT", "1"}},
       "LOCAL_RANK=2 >= LOCAL_WORLD_SIZE=2"},
      {{{"ZRT_RANK", "0"}, {"ZRT_WORLD_SIZE", "1"}, {"ZRT_STORE_EXTERNAL", "yes"}},
       "ZRT_STORE_EXTERNAL='yes'"},
      {{{"SLURM_PROCID", "0"},
        {"SLURM_NTASKS", "2"},
        {"SLURM_NTASKS_PER_NODE", "2(x3)"},
        {"SLURM_LOCALID", "0"},
        {"MASTER_PORT", "1"}},
       "SLURM_NTASKS_PER_NODE='2(x3)' is not an integer"},
  };
  for (const BadCase& bad : cases) {
    EnvScope env;
    for (const auto& [name, value] : bad.vars) env.set(name.c_str(), value);
    EnvRanks ranks;
    ranks.rank = 42;  // untouched on failure
    Status status = read_env_ranks(&ranks);
    EXPECT_EQ(status.code(), ZRT_INVALID_ARGUMENT) << bad.message;
    EXPECT_NE(status.message().find(bad.message), std::string::npos)
        << "expected '" << bad.message << "' in '" << status.message() << "'";
    EXPECT_EQ(ranks.rank, 42);
  }
}

TEST(EnvRanks, NullOutputIsRefused) {
  EXPECT_EQ(read_env_ranks(nullptr).code(), ZRT_INVALID_ARGUMENT);
}

TEST(EnvRanks, SingleRankNeedsNoStore) {
  EnvScope env;
  env.set("RANK", "0");
  env.set("WORLD_SIZE", "1");
  EnvRanks ranks;
  ASSERT_TRUE(read_env_ranks(&ranks).is_ok());
  std::unique_ptr<Bootstrap> bootstrap;
  Status status = create_store_bootstrap(ranks, 1000, &bootstrap);
  ASSERT_TRUE(status.is_ok()) << status.message();
  const int mine = 7;
  int all = 0;
  ASSERT_TRUE(bootstrap->allgather(&mine, &all, sizeof(mine)).is_ok());
  EXPECT_EQ(all, 7);
  EXPECT_TRUE(bootstrap->barrier().is_ok());
}

}  // namespace
}  // namespace zrt
