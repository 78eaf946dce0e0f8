// A rank's communicator below the C API for collective and engine tests: a file bootstrap, the
// real UCX transport and the progress engine, with one or more host streams. Created inside a
// forked rank (tests/harness); torn down engine first, transport last.
#pragma once

#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "collectives/algorithm_plan.h"
#include "collectives/collectives.h"
#include "collectives/peer_memory.h"
#include "engine/engine.h"
#include "tests/harness/file_bootstrap.h"
#include "transports/transport.h"

namespace zrt::testing {

// A collective's arguments with the fields most tests set.
inline CollectiveArgs collective_args(zrt_coll_kind_t kind, const void* send, void* recv,
                                      size_t count, zrt_dtype_t dtype = ZRT_F32,
                                      zrt_op_t op = ZRT_SUM) {
  CollectiveArgs args;
  args.kind = kind;
  args.sendbuf = send;
  args.recvbuf = recv;
  args.count = count;
  args.dtype = dtype;
  args.op = op;
  return args;
}

struct Rig {
  int rank = 0;
  int size = 1;
  std::unique_ptr<Bootstrap> bootstrap;
  std::unique_ptr<Transport> transport;
  std::unique_ptr<ProgressEngine> engine;
  std::vector<Stream*> streams;

  // Ring reduce-scatter / all-gather through peer windows (EngineOptions::peer_windows), as a
  // communicator of ranks on one host runs them; false runs the tagged-message rings that
  // ranks on several hosts use. ZRT_WINDOWS=0 in the environment turns the default off.
  bool windows = windows_default();
  // Forces an algorithm (EngineOptions::all_reduce_algorithm, as ZRT_ALGO does); unset: ZRT_ALGO.
  std::optional<AllReduceAlgorithm> algorithm;
  // > 1: the ranks stand for this many hosts of size / two_level_hosts consecutive ranks
  // (EngineOptions::two_level_hosts), so the two-level collectives run on one machine; with
  // `windows`, their ring inside each simulated host writes into the mapped inboxes.
  int two_level_hosts = 0;
  int check_order = -1;  // EngineOptions::check_order: -1 = ZRT_CHECK / the build's default
  // Probes cross-memory reads as a communicator of one host does (EngineOptions::peer_pids), so
  // that the cma all-gather may run.
  bool peer_memory = false;
  // EngineOptions::core_per_rank: inline waits pause for busy_poll_us before they yield the core,
  // and spin longer before the hand-off (a communicator decides it from the ranks and CPUs of
  // the host; the rig's default is the oversubscribed host's, yielding early).
  bool core_per_rank = false;

  static bool windows_default() {
    const char* value = std::getenv("ZRT_WINDOWS");
    return value == nullptr || std::string(value) != "0";
  }

  Status init(int rank_, int size_, const std::string& name, int64_t timeout_ms = 30000,
              int stream_count = 1) {
    rank = rank_;
    size = size_;
    const char* dir = std::getenv("ZRT_TEST_RUN_DIR");
    ZRT_RETURN_IF_ERROR(
        create_file_bootstrap(dir != nullptr ? dir : "/tmp", name, rank, size, 30000, &bootstrap));
    TransportOptions options;
    options.timeout_ms = timeout_ms;
    ZRT_RETURN_IF_ERROR(create_ucx_transport(*bootstrap, options, &transport));
    EngineOptions engine_options;
    engine_options.rank = rank;
    engine_options.size = size;
    engine_options.timeout_ms = timeout_ms;
    engine_options.peer_windows = windows && size > 1;
    engine_options.two_level_hosts = two_level_hosts;
    engine_options.all_reduce_algorithm = algorithm;
    ZRT_RETURN_IF_ERROR(add_algorithm_plan(&engine_options));
    engine_options.check_order = check_order;
    engine_options.core_per_rank = core_per_rank;
    if (peer_memory && engine_options.peer_windows) {
      const PeerGather gather = [this](const void* input, void* output, size_t bytes) {
        return bootstrap->allgather(input, output, bytes);
      };
      ZRT_RETURN_IF_ERROR(probe_peer_memory(rank, size, gather, name, &engine_options.peer_pids));
    }
    ZRT_RETURN_IF_ERROR(create_progress_engine(*transport, engine_options, &engine));
    for (int i = 0; i < stream_count; ++i) {
      Stream* stream = nullptr;
      ZRT_RETURN_IF_ERROR(engine->create_stream(ZRT_MEM_HOST, &stream));
      streams.push_back(stream);
    }
    return Status::ok();
  }

  Stream& stream(int i = 0) { return *streams.at(i); }

  Status run(const CollectiveArgs& args, int stream_index = 0) {
    ZRT_RETURN_IF_ERROR(enqueue_collective(stream(stream_index), rank, size, args));
    return stream(stream_index).synchronize();
  }

  ~Rig() {
    if (engine != nullptr) (void)engine->shutdown();
    engine.reset();
    transport.reset();
  }
};

}  // namespace zrt::testing
