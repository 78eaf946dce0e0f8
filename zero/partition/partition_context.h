// PartitionContext: what the parts of a partition manager share (partition_manager.h). The
// manager fills it in finalize, once: the layout and the maps derived from it, the buffer plan
// and the buffers carved from the arena, the streams and events, and the element operations.
// GatherWindow, GradientPipeline and StepTransaction read it; each keeps its own state apart.
#pragma once

#include <cstddef>
#include <functional>
#include <vector>

#include "lib/core/status.h"
#include "zero/partition/config.h"
#include "zero/partition/element_ops.h"
#include "zero/partition/layout.h"
#include "zero/partition/memory_model.h"
#include "zero/partition/stage_policy.h"

namespace zrt {

class Communicator;
class Stream;
class Event;
class MappedWindow;

// The flat buffers (null when the stage has none).
struct PartitionBuffers {
  char* full_params = nullptr;
  char* frozen = nullptr;
  char* param_shard = nullptr;
  // hpZ: this rank's 1/H slice of every unit segment, segment after segment (gather_window.h).
  char* param_secondary = nullptr;
  char* full_grads = nullptr;
  char* grad_shard = nullptr;
  float* master = nullptr;
  std::vector<float*> state;
  std::vector<char*> buckets;
  char* persistent_bucket = nullptr;
  // Stage 3 gather window: window_slots slots of slot_bytes, in the arena (slot addresses, the
  // old path bench_overlap compares against), or in `mapped_window` (every unit at an address
  // of its own; window and slot_bytes stay unset, the window knows its slots' addresses).
  char* window = nullptr;
  size_t slot_bytes = 0;
  MappedWindow* mapped_window = nullptr;
  // The framework's gradient staging windows (one, or two that alternate).
  std::vector<char*> grad_windows;
  float* optimizer_grad = nullptr;
  float* backup_master = nullptr;    // step_backup: master before the optimizer
  std::vector<float*> backup_state;  // step_backup: each state slot before it
};

// Streams and events. Created in the same order on every rank: stream k talks to stream k.
struct PartitionStreams {
  Stream* ag = nullptr;  // parameter all-gathers, conversions of master, the backup's copies
  Stream* rs = nullptr;  // gradient reductions and what accumulates their results
  // Host buckets: copies a gradient window into the buckets on the progress thread; the
  // reduce-scatter stream waits for copy_event before each bucket's reduction.
  Stream* copy = nullptr;
  Event* copy_event = nullptr;
  std::vector<Event*> window_read;     // per gradient window: after what reads it
  std::vector<Event*> segment_events;  // stages 1/2: after each segment's post-step gather
  Event* persistent_event = nullptr;   // stage 3: after the persistent segment's gather
  std::vector<Event*> slot_events;     // stage 3: per window slot, after its all-gather
  std::vector<Event*> bucket_events;   // after each bucket's reduction and accumulation
  // offload_optimizer: per segment, events after its last reduction and (CUDA) after its
  // gradient reached the host; CUDA copies the gradient slices on a stream of their own (on
  // host memory the training thread copies them).
  Stream* offload = nullptr;
  std::vector<Event*> segment_reduced;
  std::vector<Event*> segment_copied;
  // The optimizer run during backward (zrt_partition_step_in_backward) waits for this before
  // its first callback: recorded on the all-gather stream behind the step backup's copy and
  // the last step's conversions and gathers.
  Event* backup_taken = nullptr;
  // hpZ: gathers from the secondary copy run on the secondary group's communicator, whose
  // events the world's streams cannot wait for: per slot after such a gather (on that
  // communicator), and per segment after the copy into the secondary (on the world's).
  Stream* secondary_ag = nullptr;
  std::vector<Event*> secondary_slot_events;
  std::vector<Event*> secondary_copied;
};

// A communicator and this rank's place in it (rank and size read once).
struct RankGroup {
  Communicator* comm = nullptr;
  int rank = 0;
  int size = 0;
};

struct PartitionContext {
  // Flat: comm is the world.
  PartitionContext(Communicator& comm, const PartitionOptions& options);
  // Hybrid sharding (shard_groups.h): comm is this rank's shard group, `replicas` the ranks of
  // its index in every group (null when flat).
  PartitionContext(Communicator& comm, Communicator& world, Communicator* replicas,
                   const PartitionOptions& options);

  // Element offset of a segment in a full (unsharded) view.
  size_t segment_start(int segment) const {
    return layout.segments()[segment].shard_offset * static_cast<size_t>(layout.shards());
  }
  char* param_ptr(char* base, size_t elements) const { return base + elements * p_size; }
  char* grad_ptr(char* base, size_t elements) const { return base + elements * g_size; }
  // The rank whose slice of each segment this rank owns (stage 0: one shard, slice 0).
  int owner() const { return layout.shards() == 1 ? 0 : rank; }
  // Where segment s's slice of this rank's parameters lives, the one an optimizer called per
  // segment may write (stage 3: the parameter shard; otherwise the owned slice of the full
  // buffer, all of it at stage 0).
  char* segment_params(int segment) const;
  // Runs work(begin, count) over elements [0, total) after everything enqueued on `stream` so
  // far: host buffers piece by piece on the progress thread (piecewise_task.h), device buffers
  // as kernels launched on the stream at once (ElementOps::run_on).
  Status run_piecewise(Stream& stream, size_t total, std::function<void(size_t, size_t)> work,
                       const char* name) const;

  // The shard group's ranks: every gather and reduce-scatter, the streams, the arena. rank and
  // size are in it; with flat sharding it is the world.
  Communicator& comm;
  // Every rank of the job: the step's vote, the cross-rank checks.
  const RankGroup world;
  // Hybrid sharding: the gradient shard's all-reduce across the groups; null when flat.
  Communicator* replicas;
  // hpZ (shard_groups.h): the H ranks sharing the secondary parameter copy (comm null when off);
  // set by finalize before the resources. rank is this rank's index among them.
  RankGroup secondary;
  // Fixed at create, but for optimizer_slots, which set_optimizer_slots may change (with
  // plan.optimizer_slots) before the first step.
  PartitionOptions options;
  const StagePolicy policy;
  const int rank;
  const int size;
  const size_t p_size;  // bytes per param element
  const size_t g_size;  // bytes per reduce element

  // Set by finalize.
  Layout layout;
  std::vector<std::string> unit_names;  // as registered, for messages (may be empty)
  ShardMap shard;                       // this rank's pieces (shards == 1: rank 0's)
  BufferPlan plan;
  PartitionBuffers buffers;
  PartitionStreams streams;
  ElementOps* ops = nullptr;
  // The ops for master, state, backup and the optimizer's gradient: `ops`, except host ops
  // when offload_optimizer keeps them in host memory beside CUDA parameters.
  ElementOps* master_ops = nullptr;
  bool on_device = false;  // ZRT_MEM_CUDA: buffers, streams and events are the device's
};

}  // namespace zrt
