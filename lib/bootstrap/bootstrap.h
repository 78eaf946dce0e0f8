// Bootstrap: how the ranks of a new communicator find each other before any transport exists. Two
// ways in (docs/ARCHITECTURE.md#bootstrap): the environment plus a TCP rendezvous store, or the
// host framework's own out-of-band all-gather. Both reduce to one primitive, an all-gather of small
// records.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "lib/core/launcher_variables.h"
#include "lib/core/status.h"
#include "zrt/zrt.h"

namespace zrt {

class Bootstrap {
 public:
  virtual ~Bootstrap() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual int local_rank() const = 0;
  virtual int local_size() const = 0;

  // Every rank contributes `bytes` bytes from `input`; `output` receives size() * bytes, rank r's
  // record at output + r * bytes. Collective; blocks at most the bootstrap's timeout and then
  // fails with ZRT_TIMEOUT naming the ranks that did not arrive.
  virtual Status allgather(const void* input, void* output, size_t bytes) = 0;

  // Completes when every rank has called it. Same timeout rule.
  virtual Status barrier() = 0;
};

// Ranks, local ranks and the store address as read from the environment (docs/API.md, "From the
// environment", lists the variables and their precedence).
struct EnvRanks {
  int rank = 0;
  int size = 1;
  // -1 (both) = not given by the environment: create_store_bootstrap derives them from host
  // names.
  int local_rank = 0;
  int local_size = 1;
  std::string store_host = "127.0.0.1";
  int store_port = 0;
  std::string job_token;        // job_identity.h: ZRT_JOB_TOKEN or the launcher's job id
  std::string job_source;       // where job_token came from, for messages; "" = no identity
  bool store_external = false;  // served by the launcher, not by rank 0
  int launcher_fd = -1;         // ZRT_LAUNCHER_FD: zrt-run's lifeline (launcher_watch.h)
  std::string source;           // which family of variables was used ("zrt", "torchrun", ...)
  // Where store_port came from, for messages: "ZRT_STORE_PORT", "MASTER_PORT", or under
  // torchrun "MASTER_PORT+1" (torchrun's agent and torch.distributed hold MASTER_PORT itself).
  std::string store_port_origin;
  bool under_torchrun = false;  // TORCHELASTIC_RUN_ID is set
};

// The port zrt's store uses under torchrun when ZRT_STORE_PORT is not set: MASTER_PORT + 1
// (MASTER_PORT - 1 for 65535). Every rank derives the same one from the same MASTER_PORT.
int torchrun_store_port(int master_port);

// Reads EnvRanks from the process environment's launcher variables, taken at the call. Errors
// name the malformed variable.
Status read_env_ranks(EnvRanks* ranks);
// The same from a snapshot already taken (Settings::launcher(), or a test's).
Status read_env_ranks(const LauncherVariables& launcher, EnvRanks* ranks);

// Bootstrap over the TCP rendezvous store (rank 0 serves it unless store_external).
Status create_store_bootstrap(const EnvRanks& ranks, int64_t timeout_ms,
                              std::unique_ptr<Bootstrap>* bootstrap);

// Bootstrap over a caller-supplied out-of-band all-gather (zrt_oob_t). The oob struct is copied;
// its callbacks are only used during the lifetime of the returned object.
Status create_oob_bootstrap(const zrt_oob_t& oob, int64_t timeout_ms,
                            std::unique_ptr<Bootstrap>* bootstrap);

}  // namespace zrt
