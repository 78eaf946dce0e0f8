// Which job a rank belongs to, so that two jobs that meet on one store port never mix.
//
// The identity is the store's hello token. ZRT_JOB_TOKEN when set (zrt-run sets a random one);
// else what the launcher gives every process of one job and no other: torchrun's
// TORCHELASTIC_RUN_ID (except its default "none", which every static launch shares), Slurm's
// SLURM_JOB_ID and SLURM_STEP_ID, Open MPI's PMIX_NAMESPACE or OMPI_MCA_ess_base_jobid. With
// none of them the identity is empty and the store bootstrap falls back on rank claims
// (docs/ARCHITECTURE.md#bootstrap).
#pragma once

#include <functional>
#include <string>

namespace zrt {

struct JobIdentity {
  std::string token;   // presented in the store's hello; empty = none
  std::string source;  // for messages: "ZRT_JOB_TOKEN", "SLURM_JOB_ID=12.0", ...; "" = none
};

// `lookup` returns a variable's value or nullptr: in the library a LauncherVariables snapshot's
// lookup() (lib/core/launcher_variables.h, which declares every variable read here), in tests
// a map.
JobIdentity job_identity_from(const std::function<const char*(const char*)>& lookup);

// A short stable fingerprint of a token, for messages that must not reveal a secret token.
std::string token_fingerprint(const std::string& token);

}  // namespace zrt
