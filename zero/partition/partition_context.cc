#include "zero/partition/partition_context.h"

#include <memory>
#include <utility>

#include "zero/comm/communicator.h"
#include "lib/core/dtype.h"
#include "engine/engine.h"
#include "zero/partition/piecewise_task.h"

namespace zrt {

PartitionContext::PartitionContext(Communicator& comm_in, const PartitionOptions& options_in)
    : PartitionContext(comm_in, comm_in, nullptr, options_in) {}

PartitionContext::PartitionContext(Communicator& comm_in, Communicator& world_in,
                                   Communicator* replicas_in, const PartitionOptions& options_in)
    : comm(comm_in),
      world{&world_in, world_in.rank(), world_in.size()},
      replicas(replicas_in),
      options(options_in),
      policy(options_in),
      rank(comm_in.rank()),
      size(comm_in.size()),
      p_size(dtype_size(options_in.param_dtype)),
      g_size(dtype_size(options_in.reduce_dtype)) {}

Status PartitionContext::run_piecewise(Stream& stream, size_t total,
                                       std::function<void(size_t, size_t)> work,
                                       const char* name) const {
  if (total == 0) return Status::ok();
  if (on_device) {
    return ops->run_on(
        stream,
        [&work, total]() {
          work(0, total);
          return Status::ok();
        },
        name);
  }
  // 64 Ki elements: at most 256 KiB of f32, the size of a collective's chunk.
  constexpr size_t kPiece = size_t{64} << 10;
  return stream.enqueue(std::make_unique<PiecewiseTask>(total, kPiece, std::move(work), name));
}

char* PartitionContext::segment_params(int s) const {
  const Segment& seg = layout.segments()[s];
  if (policy.param_home() == ParamHome::kShard) {
    return param_ptr(buffers.param_shard, seg.shard_offset);
  }
  return param_ptr(buffers.full_params,
                   segment_start(s) + static_cast<size_t>(owner()) * seg.slice);
}

}  // namespace zrt
