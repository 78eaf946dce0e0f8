// job_identity_from: which launcher variable names the job, and the ones that must not.
#include <map>
#include <string>

#include <gtest/gtest.h>

#include "lib/bootstrap/job_identity.h"

namespace zrt {
namespace {

JobIdentity identity(const std::map<std::string, std::string>& env) {
  return job_identity_from([&](const char* name) -> const char* {
    auto found = env.find(name);
    return found == env.end() ? nullptr : found->second.c_str();
  });
}

TEST(JobIdentity, NoneWithoutLauncherVariables) {
  const JobIdentity none = identity({{"RANK", "0"}, {"MASTER_PORT", "29500"}});
  EXPECT_EQ(none.token, "");
  EXPECT_EQ(none.source, "");
}

TEST(JobIdentity, ZrtJobTokenWinsOverTheLaunchers) {
  const JobIdentity id = identity({{"ZRT_JOB_TOKEN", "abc"}, {"SLURM_JOB_ID", "7"}});
  EXPECT_EQ(id.token, "abc");
  EXPECT_EQ(id.source, "ZRT_JOB_TOKEN");
}

TEST(JobIdentity, TorchrunRunIdButNotItsStaticDefault) {
  EXPECT_EQ(identity({{"TORCHELASTIC_RUN_ID", "job-1"}}).token, "torchrun:job-1");
  // Static rendezvous defaults --rdzv-id to "none": every such job has it, so it names none.
  EXPECT_EQ(identity({{"TORCHELASTIC_RUN_ID", "none"}}).token, "");
  EXPECT_EQ(identity({{"TORCHELASTIC_RUN_ID", "none"}, {"SLURM_JOB_ID", "9"}}).token, "slurm:9");
}

TEST(JobIdentity, SlurmJobAndStep) {
  EXPECT_EQ(identity({{"SLURM_JOB_ID", "12"}}).token, "slurm:12");
  const JobIdentity step = identity({{"SLURM_JOB_ID", "12"}, {"SLURM_STEP_ID", "3"}});
  EXPECT_EQ(step.token, "slurm:12.3");
  EXPECT_EQ(step.source, "SLURM_JOB_ID.SLURM_STEP_ID=12.3");
}

TEST(JobIdentity, OpenMpiNamespaceThenJobId) {
  EXPECT_EQ(identity({{"PMIX_NAMESPACE", "1514012673"}, {"OMPI_MCA_ess_base_jobid", "5"}}).token,
            "pmix:1514012673");
  EXPECT_EQ(identity({{"OMPI_MCA_ess_base_jobid", "5"}}).token, "openmpi:5");
}

TEST(JobIdentity, EmptyValuesCountAsUnset) {
  EXPECT_EQ(identity({{"ZRT_JOB_TOKEN", ""}, {"SLURM_JOB_ID", "4"}}).token, "slurm:4");
}

TEST(JobIdentity, FingerprintIsStableAndHidesTheToken) {
  EXPECT_EQ(token_fingerprint(""), "none");
  EXPECT_EQ(token_fingerprint("secret"), token_fingerprint("secret"));
  EXPECT_NE(token_fingerprint("secret"), token_fingerprint("secret2"));
  EXPECT_EQ(token_fingerprint("secret").find("secret"), std::string::npos);
}

}  // namespace
}  // namespace zrt
