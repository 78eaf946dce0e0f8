#include "lib/core/launcher_variables.h"

#include <fmt/format.h>

namespace zrt {
namespace {

constexpr const char* kTorchrunOrZrtRun = "torchrun, zrt-run";

// The table. docs/ENVIRONMENT.md's launcher table lists the same rows (tests/core checks it).
// The rank families in read_env_ranks' order of preference, then the store, the job's identity
// and UCX's own variables.
constexpr LauncherVariableSpec kSpecs[] = {
    {.name = "ZRT_RANK",
     .set_by = "you",
     .use = "this process's rank; zrt's own family, preferred over every other"},
    {.name = "ZRT_WORLD_SIZE", .set_by = "you", .use = "the job's rank count, with ZRT_RANK"},
    {.name = "ZRT_LOCAL_RANK",
     .set_by = "you",
     .use = "the rank's index on its host, with ZRT_LOCAL_WORLD_SIZE; when set, a CUDA "
            "communicator uses device local_rank % device count"},
    {.name = "ZRT_LOCAL_WORLD_SIZE",
     .set_by = "you",
     .use = "the ranks on this host, with ZRT_LOCAL_RANK"},
    {.name = "RANK",
     .set_by = kTorchrunOrZrtRun,
     .use = "this process's rank, when ZRT_RANK is unset"},
    {.name = "WORLD_SIZE", .set_by = kTorchrunOrZrtRun, .use = "the job's rank count, with RANK"},
    {.name = "LOCAL_RANK",
     .set_by = kTorchrunOrZrtRun,
     .use = "the rank's index on its host, with LOCAL_WORLD_SIZE"},
    {.name = "LOCAL_WORLD_SIZE",
     .set_by = kTorchrunOrZrtRun,
     .use = "the ranks on this host, with LOCAL_RANK"},
    {.name = "OMPI_COMM_WORLD_RANK",
     .set_by = "Open MPI",
     .use = "this process's rank, when neither ZRT_RANK nor RANK is set"},
    {.name = "OMPI_COMM_WORLD_SIZE",
     .set_by = "Open MPI",
     .use = "the job's rank count, with OMPI_COMM_WORLD_RANK"},
    {.name = "OMPI_COMM_WORLD_LOCAL_RANK",
     .set_by = "Open MPI",
     .use = "the rank's index on its host, with OMPI_COMM_WORLD_LOCAL_SIZE"},
    {.name = "OMPI_COMM_WORLD_LOCAL_SIZE",
     .set_by = "Open MPI",
     .use = "the ranks on this host, with OMPI_COMM_WORLD_LOCAL_RANK"},
    {.name = "SLURM_PROCID",
     .set_by = "Slurm",
     .use = "this process's rank, when no other family's rank is set"},
    {.name = "SLURM_NTASKS", .set_by = "Slurm", .use = "the job's rank count, with SLURM_PROCID"},
    {.name = "SLURM_LOCALID",
     .set_by = "Slurm",
     .use = "the rank's index on its node, with SLURM_NTASKS_PER_NODE"},
    {.name = "SLURM_NTASKS_PER_NODE",
     .set_by = "Slurm",
     .use = "the ranks on this node, with SLURM_LOCALID"},
    {.name = "ZRT_STORE_ADDR", .set_by = "zrt-run", .use = "the rendezvous store's host"},
    {.name = "MASTER_ADDR",
     .set_by = kTorchrunOrZrtRun,
     .use = "the rendezvous store's host when ZRT_STORE_ADDR is unset"},
    {.name = "ZRT_STORE_PORT", .set_by = "zrt-run", .use = "the rendezvous store's port"},
    {.name = "MASTER_PORT",
     .set_by = kTorchrunOrZrtRun,
     .use = "the rendezvous store's port when ZRT_STORE_PORT is unset; under torchrun it is "
            "torch's, and zrt's store takes the next port (65535: the one before)"},
    {.name = "ZRT_STORE_EXTERNAL",
     .set_by = "zrt-run",
     .use = "1: the launcher serves the rendezvous store, rank 0 does not"},
    {.name = "ZRT_LAUNCHER_FD",
     .set_by = "zrt-run",
     .use = "zrt-run's lifeline: when zrt-run dies, even by SIGKILL, each rank ends within a "
            "second with a message, exit code 1"},
    {.name = "ZRT_JOB_TOKEN",
     .set_by = "zrt-run",
     .use = "the job's identity, which every client presents to the store; names the job "
            "holding a checkpoint folder by its fingerprint",
     .secret = true},
    {.name = "TORCHELASTIC_RUN_ID",
     .set_by = "torchrun",
     .use = "marks a torchrun job (MASTER_PORT is torch's); the job's identity unless it is "
            "none; names the job holding a checkpoint folder"},
    {.name = "SLURM_JOB_ID",
     .set_by = "Slurm",
     .use = "the job's identity, with SLURM_STEP_ID; names the job holding a checkpoint "
            "folder"},
    {.name = "SLURM_STEP_ID", .set_by = "Slurm", .use = "the job step, in the job's identity"},
    {.name = "PMIX_NAMESPACE",
     .set_by = "PMIx (Open MPI, Slurm)",
     .use = "the job's identity when none of the above gives one"},
    {.name = "OMPI_MCA_ess_base_jobid",
     .set_by = "Open MPI",
     .use = "the job's identity when none of the above gives one"},
    {.name = "UCX_",
     .set_by = "you",
     .use = "UCX's own configuration, which UCX reads; zrt sets UCX_KEEPALIVE_INTERVAL, UCX_TLS "
            "and, across hosts, UCX_RNDV_THRESH only where you did not",
     .prefix = true},
};

bool declares(const LauncherVariableSpec& spec, std::string_view name) {
  return spec.prefix ? name.starts_with(spec.name) : name == spec.name;
}

std::string describe_one(const LauncherVariableSpec& spec, const std::string& name,
                         const std::string& value) {
  if (spec.secret) {
    return fmt::format("{}=<{} bytes, not shown> (set by {})", name, value.size(), spec.set_by);
  }
  return fmt::format("{}={} (set by {})", name, value, spec.set_by);
}

}  // namespace

std::span<const LauncherVariableSpec> launcher_variable_specs() {
  return kSpecs;
}

const LauncherVariableSpec* find_launcher_variable(std::string_view name) {
  for (const LauncherVariableSpec& spec : kSpecs) {
    if (declares(spec, name)) return &spec;
  }
  return nullptr;
}

std::string launcher_variable_label(const LauncherVariableSpec& spec) {
  return spec.prefix ? std::string(spec.name) + "*" : std::string(spec.name);
}

LauncherVariables LauncherVariables::load() {
  return from_entries(environment_entries());
}

LauncherVariables LauncherVariables::from_entries(std::span<const std::string> entries) {
  LauncherVariables variables;
  for (const std::string& entry : entries) {
    const size_t equals = entry.find('=');
    if (equals == std::string::npos) continue;
    const std::string_view name(entry.data(), equals);
    if (find_launcher_variable(name) == nullptr) continue;
    variables.values_.emplace(std::string(name), entry.substr(equals + 1));  // the first wins
  }
  return variables;
}

const char* LauncherVariables::value(std::string_view name) const {
  const auto found = values_.find(name);
  return found == values_.end() ? nullptr : found->second.c_str();
}

EnvironmentLookup LauncherVariables::lookup() const {
  return [this](const char* name) -> const char* { return value(name); };
}

std::string LauncherVariables::describe() const {
  std::string text;
  for (const LauncherVariableSpec& spec : kSpecs) {
    for (auto it = values_.lower_bound(std::string_view(spec.name));
         it != values_.end() && declares(spec, it->first); ++it) {
      if (!text.empty()) text += ", ";
      text += describe_one(spec, it->first, it->second);
      if (!spec.prefix) break;
    }
  }
  return text.empty() ? "none" : text;
}

}  // namespace zrt
