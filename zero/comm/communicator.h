// Communicator: the ranks of one job (or of a split), their transport, and the progress engine
// that runs their streams. Built from a Bootstrap; everything it owns is released by destroy().
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "lib/bootstrap/bootstrap.h"
#include "zero/comm/user_memory.h"
#include "lib/core/settings.h"
#include "lib/core/status.h"
#include "engine/device.h"
#include "engine/engine.h"
#include "transports/transport.h"

namespace zrt {

struct CollectiveArgs;

struct CommOptions {
  int64_t timeout_ms = 60000;
  std::string name = "zrt";
  // Peer windows for ring reduce-scatter / all-gather when every rank is on this host
  // (EngineOptions::peer_windows); ZRT_WINDOWS=0 turns them off, for comparison or for hosts
  // whose processes cannot share memory (separate IPC namespaces).
  bool windows = true;
  // The ZRT_* settings, loaded once when the options are resolved; the engine and transport
  // options are filled from them, so nothing below reads the environment per call.
  Settings settings;
};

// Resolves a caller's config (may be null) and the settings registry (lib/core/settings.h:
// ZRT_TIMEOUT unless the config gives a timeout, ZRT_WINDOWS, and the rest for the engine and
// transport) into options. Errors name the bad field, or the variable, its value and what it
// accepts.
Status resolve_comm_options(const zrt_comm_config_t* config, CommOptions* options);

class Communicator {
 public:
  // Wires a transport through `bootstrap` and starts the progress engine. Collective.
  static Status create(Bootstrap& bootstrap, const CommOptions& options,
                       std::unique_ptr<Communicator>* communicator);
  ~Communicator();

  int rank() const { return rank_; }
  int size() const { return size_; }
  int local_rank() const { return local_rank_; }
  int local_size() const { return local_size_; }
  const CommOptions& options() const { return options_; }

  ProgressEngine& engine() { return *engine_; }
  Transport& transport() { return *transport_; }
  Stream& default_stream() { return *default_stream_; }
  // The caller's registered buffers (zrt_mem_alloc), freed with the communicator.
  UserMemory& user_memory() { return *user_memory_; }

  // One of zrt's own blocking exchanges on the default stream (run_internal_collective,
  // collectives/internal.h): counted apart from the caller's traffic, waited for, errors
  // carrying `what`. Collective.
  Status run_internal(const CollectiveArgs& args, const std::string& what);
  // run_internal of an all-gather of `bytes` bytes per rank (rank r's at output + r * bytes).
  Status gather_internal(const void* input, void* output, size_t bytes, const std::string& what);

  // Ranks with equal color form a new communicator ordered by (key, old rank). Collective.
  // color == ZRT_SPLIT_NOCOLOR yields a null *communicator.
  Status split(int color, int key, const CommOptions& options,
               std::unique_ptr<Communicator>* communicator);

  // Drains the streams, then closes connections in step with the peers (a barrier) when
  // healthy. Returns the first error met; always leaves the object safe to delete.
  Status destroy();

  // Fails the host side and, when it exists, the device side (ncclCommAbort, which releases
  // kernels waiting on a dead peer). Any thread.
  void abort(const Status& reason);
  Status error() const { return engine_->error(); }

  // The device side (engine/device.h: CUDA streams and events, NCCL, device memory and
  // kernels), made on first use, which is collective: the NCCL unique id travels over the host
  // path. ZRT_UNSUPPORTED, saying why, in builds without NCCL. Thread-safe (comm_device.cc).
  Status device(std::shared_ptr<DeviceContext>* context);
  // The device side's health: ok when it is healthy or was never made.
  Status device_error() const;
  // Called right after a host split on every rank of this communicator, with `child` null on
  // ranks that passed ZRT_SPLIT_NOCOLOR: when this one has a device side, the child's comes
  // from ncclCommSplit (collective over this communicator); otherwise nothing happens and the
  // child makes its own on first use.
  Status split_device(int color, int key, Communicator* child);
  // Drops this communicator's hold on its device side; the device streams, events and
  // partition managers that share it keep it alive until they go.
  void release_device();

  // Communicator-scoped reductions (zrt_op_create_premul_sum). Thread-safe.
  Status create_premul_op(double scalar, zrt_op_t* op);
  Status destroy_op(zrt_op_t op);
  // True and the scalar when `op` is a live premul op of this communicator.
  bool lookup_premul_op(zrt_op_t op, double* scalar) const;

 private:
  Communicator() = default;
  // Starts the progress engine over transport_ and creates the default stream.
  Status start_engine();
  // EngineOptions::two_level_hosts from host_ids_ and ZRT_HIERARCHY, with the log line saying
  // which collectives run and why.
  int two_level_hosts() const;
  // split's phases (communicator.cc): the two exchanges over this communicator, then the child's
  // ranks, hosts and peers from what they gathered.
  struct SplitExchange;
  Status exchange_split_records(int color, int key, const std::vector<uint8_t>& address,
                                SplitExchange* exchange);
  void place_split_child(const SplitExchange& exchange, const std::vector<int>& members,
                         Communicator* child) const;

  int rank_ = 0;
  int size_ = 1;
  int local_rank_ = 0;
  int local_size_ = 1;
  // The processes of this job on this host: local_size_ for a communicator made from the
  // bootstrap, the parent's for a split one (the other ranks still share the cores).
  int host_processes_ = 1;
  // The CPUs those processes may run on (zero/comm/host_cpus.h): a split one keeps its parent's.
  int host_cpus_ = 1;
  // One identifier per rank, equal on the ranks of one host (a hash of the host name); empty
  // when every rank is on this host. Decides the two-level collectives (start_engine).
  std::vector<uint64_t> host_ids_;
  // The host names behind host_ids_ (same size), for messages (EngineOptions::host_names).
  std::vector<std::string> host_names_;
  // Every rank's pid when every rank is on this host and each can read the others' memory
  // (collectives/peer_memory.h), else empty (EngineOptions::peer_pids).
  std::vector<int> peer_pids_;
  CommOptions options_;
  std::unique_ptr<Transport> transport_;
  std::unique_ptr<UserMemory> user_memory_;  // over transport_, freed before it
  std::unique_ptr<ProgressEngine> engine_;
  Stream* default_stream_ = nullptr;

  mutable std::mutex ops_mutex_;
  std::vector<double> premul_scalars_;  // index = op - ZRT_OP_COUNT
  std::vector<bool> premul_live_;

  mutable std::mutex device_mutex_;
  std::shared_ptr<DeviceContext> device_;  // made by device(), shared with its users
};

}  // namespace zrt
