// read_env_ranks: which rank this process is, from whichever launcher started it.
//
// Four families of variables are recognised, in this order of preference: zrt's own, torchrun's,
// Open MPI's and Slurm's. A family is chosen by the presence of its rank variable; its size
// variable must then be present too. Local rank and size come from the same family when it sets
// them; otherwise they are left at -1 and the bootstrap derives them from host names. Parsing
// is strict (whole-string decimal, no sign, no spaces): a malformed launcher environment is
// reported by variable and value rather than guessed at. These are launcher variables, not
// settings (lib/core/settings.h): they say who this process is, and zrt-run sets them. Every one
// is declared in the launcher-variable table (lib/core/launcher_variables.h) and read from one
// snapshot of it.
//
// The store's port. ZRT_STORE_PORT when set (zrt-run sets it, and leaves MASTER_PORT to the
// framework). Else MASTER_PORT, except under torchrun (TORCHELASTIC_RUN_ID set): there
// MASTER_PORT is torch's (the agent's TCPStore with static rendezvous, rank 0's
// torch.distributed store with c10d), so zrt derives its own port from it, the same on every
// rank, and never competes with torch for it.
#include <charconv>
#include <optional>
#include <string>

#include "lib/bootstrap/bootstrap.h"
#include "lib/bootstrap/job_identity.h"
#include "lib/core/launcher_variables.h"

namespace zrt {
namespace {

struct Family {
  const char* source;
  const char* rank;
  const char* size;
  const char* local_rank;
  const char* local_size;
};

constexpr Family kFamilies[] = {
    {"zrt", "ZRT_RANK", "ZRT_WORLD_SIZE", "ZRT_LOCAL_RANK", "ZRT_LOCAL_WORLD_SIZE"},
    {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
    {"openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE"},
    {"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"},
};

std::optional<std::string> get(const LauncherVariables& launcher, const char* name) {
  const char* value = launcher.value(name);
  if (value == nullptr) return std::nullopt;
  return std::string(value);
}

// A non-negative decimal integer that fits in an int, or an error naming the variable.
Status parse_int(const char* name, const std::string& text, int* value) {
  int parsed = 0;
  const char* begin = text.data();
  const char* end = begin + text.size();
  if (text.empty() || text[0] == '+' || text[0] == '-') {
    if (!text.empty() && text[0] == '-' && text.size() > 1) {
      return Status::invalid_argument("{}='{}' is negative", name, text);
    }
    return Status::invalid_argument("{}='{}' is not an integer", name, text);
  }
  const auto [stop, error] = std::from_chars(begin, end, parsed);
  if (error == std::errc::result_out_of_range) {
    return Status::invalid_argument("{}='{}' is out of range", name, text);
  }
  if (error != std::errc() || stop != end) {
    return Status::invalid_argument("{}='{}' is not an integer", name, text);
  }
  *value = parsed;
  return Status::ok();
}

// Reads an optional integer variable; *value is untouched when it is absent.
Status read_optional_int(const LauncherVariables& launcher, const char* name, bool* present,
                         int* value) {
  const std::optional<std::string> text = get(launcher, name);
  *present = text.has_value();
  if (!*present) return Status::ok();
  return parse_int(name, *text, value);
}

Status read_family(const LauncherVariables& launcher, const Family& family, EnvRanks* ranks) {
  bool present = false;
  ZRT_RETURN_IF_ERROR(read_optional_int(launcher, family.rank, &present, &ranks->rank));
  ZRT_RETURN_IF_ERROR(read_optional_int(launcher, family.size, &present, &ranks->size));
  if (!present) {
    return Status::invalid_argument("{} is set but {} is not", family.rank, family.size);
  }
  if (ranks->size < 1)
    return Status::invalid_argument("{}={} must be >= 1", family.size, ranks->size);
  if (ranks->rank >= ranks->size) {
    return Status::invalid_argument("{}={} >= {}={}", family.rank, ranks->rank, family.size,
                                    ranks->size);
  }
  bool has_local_rank = false;
  bool has_local_size = false;
  int local_rank = -1;
  int local_size = -1;
  ZRT_RETURN_IF_ERROR(
      read_optional_int(launcher, family.local_rank, &has_local_rank, &local_rank));
  ZRT_RETURN_IF_ERROR(
      read_optional_int(launcher, family.local_size, &has_local_size, &local_size));
  if (has_local_size && (local_size < 1 || local_size > ranks->size)) {
    return Status::invalid_argument("{}={} is not in 1..{}={}", family.local_size, local_size,
                                    family.size, ranks->size);
  }
  if (has_local_rank && has_local_size && local_rank >= local_size) {
    return Status::invalid_argument("{}={} >= {}={}", family.local_rank, local_rank,
                                    family.local_size, local_size);
  }
  if (ranks->size == 1) {
    ranks->local_rank = 0;
    ranks->local_size = 1;
  } else if (has_local_rank && has_local_size) {
    ranks->local_rank = local_rank;
    ranks->local_size = local_size;
  } else {
    // Only half of the pair (or none): derive both from host names, consistently.
    ranks->local_rank = -1;
    ranks->local_size = -1;
  }
  return Status::ok();
}

Status read_store_address(const LauncherVariables& launcher, EnvRanks* ranks) {
  ranks->under_torchrun = launcher.is_set("TORCHELASTIC_RUN_ID");
  const char* host_name = "ZRT_STORE_ADDR";
  std::optional<std::string> host = get(launcher, host_name);
  if (!host) {
    host_name = "MASTER_ADDR";
    host = get(launcher, host_name);
  }
  if (host) {
    if (host->empty()) return Status::invalid_argument("{} is set but empty", host_name);
    ranks->store_host = *host;
  }
  const char* port_name = "ZRT_STORE_PORT";
  std::optional<std::string> port = get(launcher, port_name);
  if (!port) {
    port_name = "MASTER_PORT";
    port = get(launcher, port_name);
  }
  if (port) {
    int value = 0;
    ZRT_RETURN_IF_ERROR(parse_int(port_name, *port, &value));
    if (value < 1 || value > 65535) {
      return Status::invalid_argument("{}={} is not a TCP port (1..65535)", port_name, value);
    }
    ranks->store_port = value;
    ranks->store_port_origin = port_name;
    if (ranks->under_torchrun && std::string(port_name) == "MASTER_PORT") {
      ranks->store_port = torchrun_store_port(value);
      ranks->store_port_origin = value == 65535 ? "MASTER_PORT-1" : "MASTER_PORT+1";
    }
  } else if (ranks->size > 1) {
    return Status::invalid_argument(
        "a job of {} ranks needs a rendezvous store, but neither ZRT_STORE_PORT nor MASTER_PORT "
        "is set",
        ranks->size);
  }
  return Status::ok();
}

// The job's identity (job_identity.h), at most 4096 bytes.
Status read_job_identity(const LauncherVariables& launcher, EnvRanks* ranks) {
  const JobIdentity identity = job_identity_from(launcher.lookup());
  if (identity.token.size() > 4096) {
    return Status::invalid_argument(
        "the job identity from {} is {} bytes long; at most 4096 are "
        "allowed",
        identity.source.substr(0, identity.source.find('=')), identity.token.size());
  }
  ranks->job_token = identity.token;
  ranks->job_source = identity.source;
  return Status::ok();
}

// ZRT_STORE_EXTERNAL and ZRT_LAUNCHER_FD: what zrt-run tells its ranks about itself.
Status read_launcher_links(const LauncherVariables& launcher, EnvRanks* ranks) {
  const std::optional<std::string> external = get(launcher, "ZRT_STORE_EXTERNAL");
  if (external) {
    if (*external == "1") {
      ranks->store_external = true;
    } else if (*external != "0" && !external->empty()) {
      return Status::invalid_argument("ZRT_STORE_EXTERNAL='{}' is not 0 or 1", *external);
    }
  }
  const std::optional<std::string> launcher_fd = get(launcher, "ZRT_LAUNCHER_FD");
  if (launcher_fd && !launcher_fd->empty()) {
    ZRT_RETURN_IF_ERROR(parse_int("ZRT_LAUNCHER_FD", *launcher_fd, &ranks->launcher_fd));
    if (ranks->launcher_fd < 0) {
      return Status::invalid_argument("ZRT_LAUNCHER_FD={} is not a file descriptor",
                                      ranks->launcher_fd);
    }
  }
  return Status::ok();
}

}  // namespace

int torchrun_store_port(int master_port) {
  return master_port < 65535 ? master_port + 1 : master_port - 1;
}

Status read_env_ranks(EnvRanks* ranks) {
  if (ranks == nullptr) return Status::invalid_argument("read_env_ranks: ranks is null");
  return read_env_ranks(LauncherVariables::load(), ranks);
}

Status read_env_ranks(const LauncherVariables& launcher, EnvRanks* ranks) {
  if (ranks == nullptr) return Status::invalid_argument("read_env_ranks: ranks is null");
  EnvRanks result;
  result.source = "default";
  for (const Family& family : kFamilies) {
    if (!launcher.is_set(family.rank)) continue;
    result.source = family.source;
    ZRT_RETURN_IF_ERROR(read_family(launcher, family, &result));
    break;
  }
  ZRT_RETURN_IF_ERROR(read_store_address(launcher, &result));
  ZRT_RETURN_IF_ERROR(read_job_identity(launcher, &result));
  ZRT_RETURN_IF_ERROR(read_launcher_links(launcher, &result));
  *ranks = std::move(result);
  return Status::ok();
}

}  // namespace zrt
