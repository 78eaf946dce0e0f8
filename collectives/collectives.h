// The entry point of the collectives layer: validates a collective's arguments and enqueues the
// task that runs the chosen algorithm on a stream. The C API and the partition managers both
// come through here.
#pragma once

#include <cstddef>
#include <cstdint>

#include "lib/core/status.h"
#include "zrt/zrt.h"

namespace zrt {

class Stream;

// What an operation serves, for logs and the collective-order checker: "unit 7", "bucket 3".
enum class Purpose : uint8_t { kNone = 0, kUnit = 1, kBucket = 2, kInternal = 3 };

struct CollectiveArgs {
  zrt_coll_kind_t kind = ZRT_COLL_ALL_REDUCE;
  const void* sendbuf = nullptr;
  void* recvbuf = nullptr;
  size_t count = 0;  // per rank for reduce_scatter (recvcount) and all_gather (sendcount)
  zrt_dtype_t dtype = ZRT_F32;
  zrt_op_t op = ZRT_SUM;  // built-in op; see premul_scale
  bool premul = false;    // multiply each input by premul_scale, then sum
  double premul_scale = 1.0;
  int root = 0;   // broadcast, reduce
  int peer = -1;  // send, recv
  Purpose purpose = Purpose::kNone;
  int32_t purpose_id = -1;
  // Nothing reads the output soon (a gradient shard the optimizer reads after backward): the
  // reduction writes it with non-temporal stores whatever its size, which spares the caches and
  // the read-for-ownership of every output line. Host reductions only.
  bool output_read_late = false;
};

// Checks the arguments (messages name the argument) and enqueues the collective on `stream`.
// rank/size are the communicator's.
Status enqueue_collective(Stream& stream, int rank, int size, const CollectiveArgs& args);

}  // namespace zrt
