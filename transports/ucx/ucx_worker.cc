#include "transports/ucx/ucx_worker.h"

#include <string>

#include "lib/core/launcher_variables.h"
#include "lib/core/log.h"

namespace zrt {
namespace {

// Sets a UCX variable in `config` unless the user set it in the environment (theirs wins).
void set_default(const LauncherVariables& launcher, ucp_config_t* config, const char* name,
                 const char* value) {
  if (launcher.is_set(std::string("UCX_") + name)) return;
  ucs_status_t status = ucp_config_modify(config, name, value);
  if (status != UCS_OK) {
    ZRT_LOG_DEBUG("ucx: could not set {}={}: {}", name, value, ucs_status_string(status));
  }
}

// Messages below this go eager when the job spans hosts (TransportOptions::spans_hosts).
constexpr const char* kSpanningEagerLimit = "256K";

}  // namespace

Status ucx_status(zrt_status_t code, const std::string& what, ucs_status_t status) {
  return Status(code, what + ": " + ucs_status_string(status));
}

Status UcxWorker::create(const TransportOptions& options, std::unique_ptr<UcxWorker>* out) {
  std::unique_ptr<UcxWorker> self(new UcxWorker());

  ucp_config_t* config = nullptr;
  ucs_status_t status = ucp_config_read(nullptr, nullptr, &config);
  if (status != UCS_OK) return ucx_status(ZRT_SYSTEM_ERROR, "ucp_config_read", status);
  // The UCX_* variables of the communicator's snapshot (its settings took it once), else now.
  const LauncherVariables taken_now =
      options.launcher != nullptr ? LauncherVariables() : LauncherVariables::load();
  const LauncherVariables& launcher = options.launcher != nullptr ? *options.launcher : taken_now;
  // The liveness endpoints (see ucx_transport.cc, error modes) rely on keepalive when a peer
  // hangs without closing its sockets; UCX's 20 s default would take a third of zrt's default
  // timeout, 1 s costs one tiny message per peer per second.
  set_default(launcher, config, "KEEPALIVE_INTERVAL", "1s");
  // UCX's posix shared memory names a file in /dev/shm and writes it through before unlinking
  // it (uct_posix_test_mem), so a process killed in between leaves the file behind; sysv carries
  // the same messages through segments removed as soon as they are attached (IPC_RMID), which
  // vanish with their last process. Everything else stays UCX's choice.
  set_default(launcher, config, "TLS", "^posix");
  // UCX 1.13's rendezvous over tcp moves 64 and 256 KiB messages between hosts well below
  // eager's rate, and it slowed the two-level collectives' 256 KiB cells by about half again
  // (the figures: docs/MEASURED.md#the-order-checker-and-ucxs-rendezvous-across-hosts). The
  // threshold is one for every transport in 1.13, so it is set only where the job crosses hosts;
  // rendezvous stays above it, where an unexpected message would otherwise be buffered whole.
  if (options.spans_hosts) set_default(launcher, config, "RNDV_THRESH", kSpanningEagerLimit);

  ucp_params_t params{};
  params.field_mask =
      UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED | UCP_PARAM_FIELD_NAME;
  params.features = UCP_FEATURE_TAG | UCP_FEATURE_RMA | UCP_FEATURE_WAKEUP;
  // The worker is driven by one thread, but alloc_registered (ucp_mem_map) may run on another
  // thread while that one progresses. mt_workers_shared makes the context-level state that both
  // touch (memory domains, registration cache) lock-protected, which is exactly the shared
  // part; the worker itself stays single-threaded and lock-free on the hot path.
  params.mt_workers_shared = 1;
  params.name = options.name;
  status = ucp_init(&params, config, &self->context_);
  ucp_config_release(config);
  if (status != UCS_OK) return ucx_status(ZRT_SYSTEM_ERROR, "ucp_init", status);

  ucp_worker_params_t worker_params{};
  worker_params.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  worker_params.thread_mode = UCS_THREAD_MODE_SINGLE;
  status = ucp_worker_create(self->context_, &worker_params, &self->worker_);
  if (status != UCS_OK) return ucx_status(ZRT_SYSTEM_ERROR, "ucp_worker_create", status);

  ucp_address_t* address = nullptr;
  size_t length = 0;
  status = ucp_worker_get_address(self->worker_, &address, &length);
  if (status != UCS_OK) return ucx_status(ZRT_SYSTEM_ERROR, "ucp_worker_get_address", status);
  const uint8_t* bytes = reinterpret_cast<const uint8_t*>(address);
  self->address_.assign(bytes, bytes + length);
  ucp_worker_release_address(self->worker_, address);

  *out = std::move(self);
  return Status::ok();
}

UcxWorker::~UcxWorker() {
  if (worker_ != nullptr) ucp_worker_destroy(worker_);
  if (context_ != nullptr) ucp_cleanup(context_);
}

}  // namespace zrt
