// PartitionResources: the memory, streams and events of a partition manager, and the only
// place that knows whether they are host or device ones. setup() carves the buffers of the
// plan from an arena and creates the streams and events into a PartitionContext; release()
// waits for their work and frees them, in reverse.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <vector>

#include "lib/core/status.h"
#include "engine/mapped_window.h"
#include "zero/partition/arena.h"
#include "zero/partition/element_ops.h"
#include "zero/partition/partition_context.h"

namespace zrt {

class DeviceContext;
class Stream;
class Event;

class PartitionResources {
 public:
  PartitionResources() = default;
  PartitionResources(const PartitionResources&) = delete;
  PartitionResources& operator=(const PartitionResources&) = delete;

  // ZRT_MEM_CUDA: the communicator's device context (made by the C API before finalize); the
  // streams and events are CUDA ones from it, the buffers device memory.
  void set_device_context(std::shared_ptr<DeviceContext> device) { device_ = std::move(device); }
  bool on_device() const { return device_ != nullptr; }

  // Stage 3's units at fixed addresses (mapped_window.h), the default; false: at their slots'
  // addresses, which change from fetch to fetch (the path before stable addresses, kept for
  // bench_overlap, which times the two side by side, and the tests that show the difference).
  // Before setup.
  void set_stable_addresses(bool stable) { stable_addresses_ = stable; }

  // Needs ctx.layout and ctx.plan; fills ctx.buffers, ctx.streams and ctx.ops.
  Status setup(PartitionContext& ctx);
  // Waits for pending work and frees streams, events and the arena; the first failure.
  Status release(PartitionContext& ctx);

  // Bytes carved per category, every arena, with the host (offload) columns.
  void measure(MemoryFigures* figures) const;

  // The optimizer state arrays and their step backups live in an arena of their own, beside
  // master, so that zrt_partition_set_optimizer_slots can replace them before the first step.
  // In two phases, for a collective change: prepare allocates `slots` zeroed arrays (and their
  // backups, of backup_numel elements each) beside the current ones, which stay in use (a
  // failure changes nothing); adopt puts the staged ones into ctx.buffers and frees the old.
  struct OptimizerState {
    std::unique_ptr<Arena> arena;
    std::vector<float*> state;
    std::vector<float*> backup_state;
  };
  Status prepare_optimizer_state(const PartitionContext& ctx, int slots, size_t backup_numel,
                                 OptimizerState* staged) const;
  void adopt_optimizer_state(PartitionContext& ctx, OptimizerState staged);

 private:
  // Where each buffer of the plan will sit in its arena (Arena::plan's handles, named as
  // PartitionBuffers names the addresses), until the arenas are committed.
  struct BufferHandles {
    size_t full_params = 0;
    size_t frozen = 0;
    size_t param_shard = 0;
    size_t param_secondary = 0;
    size_t full_grads = 0;
    size_t grad_shard = 0;
    size_t master = 0;
    std::vector<size_t> buckets;
    size_t persistent_bucket = 0;
    size_t window = 0;  // unless `mapped`
    size_t slot_bytes = 0;
    bool mapped = false;  // stage 3's window is a mapped one (stable addresses), not carved
    std::vector<size_t> grad_windows;
    size_t optimizer_grad = 0;
    size_t backup_master = 0;
  };

  // The arenas, planned, committed and carved into ctx.buffers.
  Status allocate_buffers(PartitionContext& ctx);
  // The parameters' arena and its element ops (host, or the device context's).
  Status create_arena(PartitionContext& ctx);
  // Plans every buffer: in `a`, the parameters' arena, or `m`, master's (offload: host memory).
  BufferHandles plan_in_arenas(const PartitionContext& ctx, Arena& a, Arena& m) const;
  static void carve_buffers(const BufferHandles& handles, Arena& a, Arena& m,
                            PartitionBuffers* buffers);
  Status make_host_arena(PartitionContext& ctx);
  // A backend of the kind master's arena has (host, device, or offload's host memory).
  Status make_master_side_backend(const PartitionContext& ctx,
                                  std::unique_ptr<ArenaBackend>* backend) const;
  Status create_mapped_window(PartitionContext& ctx);
  Status create_streams(PartitionContext& ctx);
  Status create_device_streams(PartitionContext& ctx);
  Status create_secondary_streams(PartitionContext& ctx);
  Status create_events(PartitionContext& ctx, const std::function<Status(Event**)>& make);
  // release's first phase on a device: waits for the CUDA streams and frees them and their
  // events; the first failure into *first.
  void release_device_streams(PartitionStreams& streams, Status* first);

  std::unique_ptr<Arena> arena_;
  std::unique_ptr<Arena> host_arena_;            // offload_optimizer only
  OptimizerState optimizer_state_;               // on master's side
  std::unique_ptr<MappedWindow> mapped_window_;  // stage 3 with stable addresses
  std::unique_ptr<ElementOps> ops_;
  std::unique_ptr<ElementOps> host_ops_;   // offload beside CUDA parameters: the CPU's ops
  std::shared_ptr<DeviceContext> device_;  // ZRT_MEM_CUDA only
  std::vector<std::unique_ptr<Stream>> device_streams_;  // CUDA streams, owned here
  std::vector<std::unique_ptr<Event>> device_events_;    // CUDA events, owned here
  bool stable_addresses_ = true;
};

}  // namespace zrt
