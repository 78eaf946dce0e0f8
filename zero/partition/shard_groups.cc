#include "zero/partition/shard_groups.h"

#include <vector>

#include "zero/comm/communicator.h"

namespace zrt {

Status ShardGroups::destroy() {
  Status first = Status::ok();
  for (std::unique_ptr<Communicator>* comm : {&secondary, &replicas, &group}) {
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

Status resolve_hpz_group_size(const PartitionOptions& options, int ranks, int local_size,
                              int* group_size) {
  const int asked = options.hpz_group_size;
  if (asked == 0) {
    *group_size = 0;
    return Status::ok();
  }
  if (asked == ZRT_SHARD_GROUP_HOST) {
    const bool spans_hosts = local_size > 0 && local_size < ranks && ranks % local_size == 0;
    *group_size = spans_hosts ? local_size : 0;
    return Status::ok();
  }
  if (asked > ranks || ranks % asked != 0) {
    return Status::invalid_argument(
        "config.hpz_group_size is {} but the communicator has {} ranks; it must divide the "
        "number of ranks (1..{}; 0 = off, ZRT_SHARD_GROUP_HOST = the ranks of one host)",
        asked, ranks, ranks);
  }
  *group_size = asked;
  return Status::ok();
}

namespace {

// "The ranks of one host" is one decision for the whole world: hosts with different rank counts
// resolve it differently, so every rank sees every rank's choice and takes `fallback` unless they
// all agree.
Status agree_across_hosts(Communicator& world, int fallback, const char* what, int* size) {
  const int n = world.size();
  if (n == 1) return Status::ok();
  const int mine = *size;
  std::vector<int> all(static_cast<size_t>(n), 0);
  ZRT_RETURN_IF_ERROR(world.gather_internal(&mine, all.data(), sizeof(int), what));
  for (int other : all) {
    if (other != mine) *size = fallback;
  }
  return Status::ok();
}

}  // namespace

Status form_shard_groups(Communicator& world, const PartitionOptions& options,
                         ShardGroups* groups) {
  const int n = world.size();
  int g = n;
  ZRT_RETURN_IF_ERROR(resolve_shard_group_size(options, n, world.local_size(), &g));
  if (options.stage > 0 && options.shard_group_size == ZRT_SHARD_GROUP_HOST) {
    ZRT_RETURN_IF_ERROR(
        agree_across_hosts(world, n, "partition: agreeing on the shard group size", &g));
  }
  int h = 0;
  ZRT_RETURN_IF_ERROR(resolve_hpz_group_size(options, n, world.local_size(), &h));
  if (options.hpz_group_size == ZRT_SHARD_GROUP_HOST) {
    ZRT_RETURN_IF_ERROR(
        agree_across_hosts(world, 0, "partition: agreeing on the hpZ group size", &h));
  }
  if (g < n && h != 0) {
    return Status::invalid_argument(
        "config.shard_group_size resolves to {} of {} ranks (hybrid sharding) with "
        "config.hpz_group_size {}: hybrid sharding already gathers inside the group, so hpZ's "
        "secondary copy has nothing to save; set shard_group_size = 0 (flat, with hpZ) or "
        "hpz_group_size = 0",
        g, n, h);
  }
  if (g < n && options.offload_optimizer) {
    return Status::invalid_argument(
        "config.shard_group_size resolves to {} of {} ranks (hybrid sharding) with "
        "offload_optimizer = 1: the offloaded step runs each segment's optimizer as its group "
        "reduction ends, before the all-reduce across groups; set shard_group_size = {} (flat) "
        "or offload_optimizer = 0",
        g, n, n);
  }
  if ((g < n || h != 0) && options.mem_kind != ZRT_MEM_HOST) {
    const char* field = g < n ? "shard_group_size" : "hpz_group_size";
    return Status(ZRT_UNSUPPORTED,
                  fmt::format("config.{} resolves to {} of {} ranks ({}), which runs on "
                              "ZRT_MEM_HOST buffers only; set {} = {} for ZRT_MEM_CUDA",
                              field, g < n ? g : h, n, g < n ? "hybrid sharding" : "hpZ", field,
                              g < n ? "0 (flat)" : "0 (off)"));
  }
  const CommOptions& comm_options = world.options();
  const int rank = world.rank();
  if (g < n) {
    ZRT_RETURN_IF_ERROR(world.split(rank / g, rank, comm_options, &groups->group)
                            .with_context("partition: forming the shard groups"));
    ZRT_RETURN_IF_ERROR(world.split(rank % g, rank, comm_options, &groups->replicas)
                            .with_context("partition: forming the replica groups"));
  }
  if (h != 0) {
    ZRT_RETURN_IF_ERROR(world.split(rank / h, rank, comm_options, &groups->secondary)
                            .with_context("partition: forming hpZ's secondary groups"));
  }
  groups->group_size = g;
  groups->replica_groups = n / g;
  groups->secondary_size = h;
  groups->formed = true;
  return Status::ok();
}

}  // namespace zrt
