// ShardGroups: hybrid sharding's communicators (docs/ARCHITECTURE.md#hybrid-sharding). The N
// ranks of the world form R = N/G shard groups of G consecutive ranks; a manager shards its
// state inside its group, as a flat manager would on G ranks, and the ranks with the same index
// in every group form a replica communicator, across which the gradient shard is all-reduced
// once per step. G = N is flat sharding: no communicator of its own, the world's is used.
//
// hpZ (stage 3, config.hpz_group_size = H) shards nothing differently: the manager stays flat on
// the world, and the H consecutive ranks [kH, kH+H) get a communicator of their own for the
// gathers from the secondary parameter copy (gather_window.h). It cannot be combined with G < N:
// hybrid's gathers already stay inside the group, there is no world-wide gather to spare.
#pragma once

#include <memory>

#include "lib/core/status.h"
#include "zero/partition/config.h"

namespace zrt {

class Communicator;

struct ShardGroups {
  int group_size = 1;      // G as resolved
  int replica_groups = 1;  // R = N / G
  // Null when G = N (flat) or at stage 0.
  std::unique_ptr<Communicator> group;     // this rank's G ranks
  std::unique_ptr<Communicator> replicas;  // the R ranks of this rank's index in each group
  // hpZ: H as resolved (0 = off) and the H ranks sharing the secondary copy (null when off).
  int secondary_size = 0;
  std::unique_ptr<Communicator> secondary;
  bool formed = false;  // form_shard_groups succeeded (finalize may be called again after)

  bool hybrid() const { return group != nullptr; }
  // Waits for the communicators' work and closes them (collective while healthy).
  Status destroy();
};

// The group size config.shard_group_size asks for on `ranks` ranks, this rank having
// `local_size` ranks on its host: 0 = local_size when it divides ranks, else ranks. Errors name
// config.shard_group_size and say what to set. Stage 0: always `ranks` (nothing is sharded).
Status resolve_shard_group_size(const PartitionOptions& options, int ranks, int local_size,
                                int* group_size);

// The secondary group size config.hpz_group_size asks for (0 = off): ZRT_SHARD_GROUP_HOST =
// local_size when it divides ranks and is below it (one host holding the world gains nothing),
// else off. Errors name config.hpz_group_size.
Status resolve_hpz_group_size(const PartitionOptions& options, int ranks, int local_size,
                              int* group_size);

// Resolves G (and hpZ's H) on every rank of `world` (one internal all-gather makes every rank take
// the same decision: the ranks of one host only when every host has the same count) and, when G <
// N, splits `world` into the two communicators (with H, into the secondary's groups). Collective
// over world.
Status form_shard_groups(Communicator& world, const PartitionOptions& options, ShardGroups* groups);

}  // namespace zrt
