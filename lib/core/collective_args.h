// The arguments of one collective: what the C API, the communicator, the partition managers and
// the checkpoint layer build, what the collectives layer validates and runs, and what a device
// stream (engine/device.h) hands to NCCL. A leaf: it needs only lib/core and zrt.h, so every
// layer can name a collective without depending on the layer that runs it.
#pragma once

#include <cstddef>
#include <cstdint>

#include "zrt/zrt.h"

namespace zrt {

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

}  // namespace zrt
