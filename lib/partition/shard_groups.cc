#include "lib/partition/shard_groups.h"

#include <vector>

#include "lib/comm/communicator.h"

namespace zrt {

Status ShardGroups::destroy() {
  Status first = Status::ok();
  for (std::unique_ptr<Communicator>* comm : {&replicas, &group}) {
    if (*comm == nullptr) continue;
    const Status status = (*comm)->destroy();
    if (first.is_ok() && !status.is_ok()) first = status;
    comm->reset();
  }
  return first;
}

Status resolve_shard_group_size(const PartitionOptions& options, int ranks, int local_size,
                                int* group_size) {
  const int asked = options.shard_group_size;
  if (options.stage == 0) {
    *group_size = ranks;
    return Status::ok();
  }
  if (asked == 0) {
    *group_size = ranks;
    return Status::ok();
  }
  if (asked == ZRT_SHARD_GROUP_HOST) {
    *group_size = local_size > 0 && ranks % local_size == 0 ? local_size : ranks;
    return Status::ok();
  }
  if (asked > ranks || ranks % asked != 0) {
    return Status::invalid_argument(
        "config.shard_group_size is {} but the communicator has {} ranks; it must divide the "
        "number of ranks (1..{}; 0 or {} = flat sharding, ZRT_SHARD_GROUP_HOST = the ranks of one "
        "host)",
        asked, ranks, ranks, ranks);
  }
  *group_size = asked;
  return Status::ok();
}

Status form_shard_groups(Communicator& world, const PartitionOptions& options,
                         ShardGroups* groups) {
  const int n = world.size();
  int mine = n;
  ZRT_RETURN_IF_ERROR(resolve_shard_group_size(options, n, world.local_size(), &mine));
  int g = mine;
  if (n > 1 && options.stage > 0 && options.shard_group_size == ZRT_SHARD_GROUP_HOST) {
    // Hosts with different rank counts resolve "one host" differently: every rank must see
    // every host's choice, and fall back to flat sharding unless they all agree.
    std::vector<int> all(static_cast<size_t>(n), 0);
    ZRT_RETURN_IF_ERROR(world.gather_internal(&mine, all.data(), sizeof(int),
                                              "partition: agreeing on the shard group size"));
    for (int other : all) {
      if (other != mine) g = n;
    }
  }
  groups->group_size = g;
  groups->replica_groups = n / g;
  if (g == n) return Status::ok();
  if (options.offload_optimizer) {
    return Status::invalid_argument(
        "config.shard_group_size resolves to {} of {} ranks (hybrid sharding) with "
        "offload_optimizer = 1: the offloaded step runs each segment's optimizer as its group "
        "reduction ends, before the all-reduce across groups; set shard_group_size = {} (flat) "
        "or offload_optimizer = 0",
        g, n, n);
  }
  if (options.mem_kind != ZRT_MEM_HOST) {
    return Status(ZRT_UNSUPPORTED,
                  fmt::format("config.shard_group_size resolves to {} of {} ranks (hybrid "
                              "sharding), which runs on ZRT_MEM_HOST buffers only; set "
                              "shard_group_size = {} (flat) for ZRT_MEM_CUDA",
                              g, n, n));
  }
  const CommOptions& comm_options = world.options();
  const int rank = world.rank();
  ZRT_RETURN_IF_ERROR(world.split(rank / g, rank, comm_options, &groups->group)
                          .with_context("partition: forming the shard groups"));
  ZRT_RETURN_IF_ERROR(world.split(rank % g, rank, comm_options, &groups->replicas)
                          .with_context("partition: forming the replica groups"));
  return Status::ok();
}

}  // namespace zrt
