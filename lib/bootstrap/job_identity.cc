#include "lib/bootstrap/job_identity.h"

#include <fmt/format.h>

namespace zrt {
namespace {

std::string value_of(const std::function<const char*(const char*)>& lookup, const char* name) {
  const char* value = lookup(name);
  return value != nullptr ? std::string(value) : std::string();
}

}  // namespace

JobIdentity job_identity_from(const std::function<const char*(const char*)>& lookup) {
  if (const std::string token = value_of(lookup, "ZRT_JOB_TOKEN"); !token.empty()) {
    return {token, "ZRT_JOB_TOKEN"};
  }
  // torchrun's static rendezvous defaults --rdzv-id to "none": every such job has it.
  if (const std::string run = value_of(lookup, "TORCHELASTIC_RUN_ID");
      !run.empty() && run != "none") {
    return {"torchrun:" + run, "TORCHELASTIC_RUN_ID=" + run};
  }
  if (const std::string job = value_of(lookup, "SLURM_JOB_ID"); !job.empty()) {
    const std::string step = value_of(lookup, "SLURM_STEP_ID");
    const std::string id = step.empty() ? job : job + "." + step;
    return {"slurm:" + id,
            step.empty() ? "SLURM_JOB_ID=" + job : "SLURM_JOB_ID.SLURM_STEP_ID=" + id};
  }
  if (const std::string space = value_of(lookup, "PMIX_NAMESPACE"); !space.empty()) {
    return {"pmix:" + space, "PMIX_NAMESPACE=" + space};
  }
  if (const std::string job = value_of(lookup, "OMPI_MCA_ess_base_jobid"); !job.empty()) {
    return {"openmpi:" + job, "OMPI_MCA_ess_base_jobid=" + job};
  }
  return {};
}

std::string token_fingerprint(const std::string& token) {
  if (token.empty()) return "none";
  // FNV-1a: stable across runs and hosts (std::hash need not be).
  uint64_t hash = 1469598103934665603ull;
  for (unsigned char byte : token) {
    hash ^= byte;
    hash *= 1099511628211ull;
  }
  return fmt::format("#{:08x}", static_cast<uint32_t>(hash ^ (hash >> 32)));
}

}  // namespace zrt
