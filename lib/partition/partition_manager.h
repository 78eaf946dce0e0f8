// PartitionManager: the ZeRO stage-0/1/2/3 manager behind zrt_partition_t. It owns the flat
// sharded buffers (layout.h), runs the parameter all-gathers on its all-gather stream and the
// gradient reductions on its reduce-scatter stream, and hands the local shard to the
// framework's optimizer. zrt.h documents the protocol; this header documents the machinery.
//
// Threading: one training thread calls the manager; the progress thread runs the host
// functions the manager enqueues after reductions (they touch only the grad shard and the
// reduced bucket/segment, which the training thread leaves alone until it waits for them).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "lib/core/status.h"
#include "lib/partition/arena.h"
#include "lib/partition/config.h"
#include "lib/partition/element_ops.h"
#include "lib/partition/layout.h"
#include "lib/partition/memory_model.h"
#include "zrt/zrt.h"

namespace zrt {

class Communicator;
class Stream;
class Event;
class DeviceContext;

// Counters of the stage 3 gather window (zrt_partition_stats).
struct WindowStats {
  uint64_t fetches = 0;
  uint64_t gathers = 0;        // all-gathers issued on demand
  uint64_t prefetches = 0;     // all-gathers issued ahead
  uint64_t prefetch_hits = 0;  // fetches that found their unit gathered or in flight
  uint64_t evictions = 0;      // prefetched units dropped unused (order changed)
  int max_gathered_units = 0;
  uint64_t max_gathered_bytes = 0;
  bool order_recorded = false;
  bool order_invalidated = false;
};

class PartitionManager {
 public:
  PartitionManager(Communicator& comm, const PartitionOptions& options);
  ~PartitionManager();
  PartitionManager(const PartitionManager&) = delete;
  PartitionManager& operator=(const PartitionManager&) = delete;

  Status add_unit(const std::string& name, int* unit);
  Status add_param(int unit, const std::string& name, size_t numel, uint32_t flags, int* param);
  Status finalize();

  Status load_param(int param, const void* values, zrt_dtype_t dtype);
  Status param_info(int param, zrt_param_info_t* info) const;
  Status shard_pieces(const zrt_shard_piece_t** pieces, size_t* count) const;

  Status fetch(int unit);
  Status release(int unit);
  Status param_data(int param, void** data) const;
  Status grad_data(int param, void** grad);
  Status set_sync(bool sync);
  Status grad_ready(int unit);
  Status grad_norm(double* norm, bool* has_nonfinite);
  Status step(zrt_optimizer_fn optimizer, void* user_data);

  Status memory(MemoryFigures* figures) const;
  Status window_stats(WindowStats* stats) const;
  const PartitionOptions& options() const { return options_; }

  // Waits for pending communication and releases streams, events and the arena.
  Status destroy();

  // ZRT_MEM_CUDA: the communicator's device context (made by the C API before finalize); the
  // manager's streams and events are CUDA ones from it, its buffers device memory.
  void set_device_context(std::shared_ptr<DeviceContext> device) { device_ = std::move(device); }

  // --- Checkpoint access (used by lib/checkpoint: zrt_partition_save/load/export_full) ---
  // Read access to the trained state and one call that replaces it. The checkpoint layer owns
  // the file format; the manager only exposes its buffers in shard layout.
  Communicator& communicator() { return comm_; }
  const Layout& layout() const { return layout_; }
  const std::vector<ParamSpec>& param_specs() const { return param_specs_; }
  const std::vector<UnitSpec>& unit_specs() const { return unit_specs_; }
  bool is_finalized() const { return finalized_ && !destroyed_; }
  int64_t step_count() const { return step_; }
  const float* master_shard() const { return master_; }
  const std::vector<float*>& state_shards() const { return state_; }
  const char* frozen_store() const { return frozen_; }  // param_dtype, frozen view offsets
  // Fails unless finalized and between steps: no unit fetched, no micro-batch begun. Waits for
  // the post-step all-gathers, so the buffers above are quiescent afterwards.
  Status checkpoint_quiesce(const char* what);
  // Copies `count` param_dtype elements of the local shard from `shard_offset` into `out`,
  // wherever the stage keeps them (shard buffer, or the owned slices of the full buffer).
  Status read_param_shard(size_t shard_offset, size_t count, void* out) const;
  // Replaces the state with a checkpoint's (staging buffers in this manager's shard layout, the
  // frozen store in `frozen_dtype`), then does what a step does after the optimizer: converts
  // master to param_dtype and publishes it (stages 1/2 gather, stage 3 shard + persistent
  // gather), so the manager behaves as if it had trained to `step`. Call checkpoint_quiesce first.
  Status restore_checkpoint(const float* master, const std::vector<const float*>& states,
                            const void* frozen, zrt_dtype_t frozen_dtype, int64_t step);

 private:
  struct Slot {
    int unit = -1;
    bool prefetched = false;  // gathered ahead and not fetched yet
    Event* event = nullptr;   // recorded after its all-gather
  };

  Status check_finalized(const char* what) const;
  Status check_unit(int unit) const;
  Status check_param(int param) const;
  Status allocate_buffers();
  Status create_streams();
  Status create_device_streams();
  Status create_events(const std::function<Status(Event**)>& make);
  Status check_ranks_agree();
  size_t segment_start(int segment) const;  // element offset of the segment in a full view
  char* param_ptr(char* base, size_t elements) const;
  // Runs work(begin, count) over elements [0, total) after everything enqueued on `stream` so
  // far: host buffers piece by piece on the progress thread (piecewise_task.h), device buffers
  // as kernels launched on the stream at once (ElementOps::run_on).
  Status run_piecewise(Stream& stream, size_t total, std::function<void(size_t, size_t)> work,
                       const char* name);
  char* grad_ptr(char* base, size_t elements) const;

  // Stage 3 window (partition_fetch.cc).
  Status fetch_stage3(int unit);
  // again: a second copy of a fetched unit, which release makes its copy (next_slot_).
  Status gather_into_slot(int unit, int slot, bool prefetch, bool again = false);
  void drop_slot(int slot);  // forgets a slot's unit (a prefetch, or a copy not fetched)
  int find_free_slot() const;
  // Gathers ahead of a fetch of `unit` (-1: before the step's first fetch), in the expected
  // order from order_pos_, within the depth and the byte caps.
  void prefetch_after(int unit);
  void note_fetch_order(int unit);
  void update_window_peaks();
  size_t unit_gather_bytes(int unit) const;
  void forget_window();  // drops every copy not fetched (its parameters are about to change)
  Status convert_shard_segment(int segment);
  Status flush_shard_conversions();

  // The all-or-nothing step (partition_step.cc).
  Status check_step_ready();
  Status exchange_codes(zrt_status_t mine, const char* what, std::vector<int32_t>* codes);
  size_t backup_total() const { return layout_.shard_numel() * (1 + state_.size()); }
  bool backup_current() const { return backup_cursor_ == backup_total(); }
  void take_backup();
  void advance_backup();
  Status settle_backup();
  void invalidate_backup();
  // Copies elements [begin, end) of master and the state slots, seen as one array, into the
  // backup: at once, or (stream non-null) as piecewise tasks on the stream.
  Status copy_backup_range(size_t begin, size_t end, Stream* stream);
  void restore_backup();
  Status publish_params();
  void rederive_params();

  // Gradients (partition_grads.cc).
  Status reduce_segment(int segment, void* data);
  Status acquire_bucket(int segment, int* bucket);
  // Makes the window the next unit's gradients go to open_window_, once it has been read.
  Status open_grad_window();
  Status finish_reductions();

  Communicator& comm_;
  PartitionOptions options_;
  int rank_ = 0;
  int size_ = 1;
  bool finalized_ = false;
  bool destroyed_ = false;
  std::vector<UnitSpec> unit_specs_;
  std::vector<ParamSpec> param_specs_;
  Layout layout_;
  BufferPlan plan_;
  std::unique_ptr<Arena> arena_;
  std::unique_ptr<ElementOps> ops_;
  size_t p_size_ = 4;  // bytes per param element
  size_t g_size_ = 4;  // bytes per reduce element

  // Buffers (null when the stage has none).
  char* full_params_ = nullptr;
  char* frozen_ = nullptr;
  char* param_shard_ = nullptr;
  char* full_grads_ = nullptr;
  char* grad_shard_ = nullptr;
  float* master_ = nullptr;
  std::vector<float*> state_;
  std::vector<char*> buckets_;
  char* persistent_bucket_ = nullptr;
  char* window_ = nullptr;
  // The framework's gradient staging windows (one, or two that alternate: see grad_windows_).
  std::vector<char*> grad_windows_;
  float* optimizer_grad_ = nullptr;
  float* backup_master_ = nullptr;    // step_backup: master before the optimizer
  std::vector<float*> backup_state_;  // step_backup: each state slot before it
  // Elements of master and the state slots (seen as one array) copied into the backup, or
  // enqueued, since they last changed: the backup is current once it reaches backup_total().
  size_t backup_cursor_ = 0;
  bool backup_in_flight_ = false;  // copies of it are enqueued on the all-gather stream

  std::shared_ptr<DeviceContext> device_;                // ZRT_MEM_CUDA only
  std::vector<std::unique_ptr<Stream>> device_streams_;  // CUDA streams, owned here
  std::vector<std::unique_ptr<Event>> device_events_;    // CUDA events, owned here

  Stream* ag_stream_ = nullptr;
  Stream* rs_stream_ = nullptr;
  // Host buckets: copies a gradient window into the buckets on the progress thread, so that
  // grad_ready returns at once; the reduce-scatter stream waits for copy_event_ before each
  // bucket's reduction, and grad_data for the window it hands out to have been read, which
  // window_read_[w] marks (partition_grads.cc). Two windows alternate, so the framework writes
  // one unit's gradients while the previous unit's leave the other.
  Stream* copy_stream_ = nullptr;
  Event* copy_event_ = nullptr;
  std::vector<Event*> window_read_;     // per window: after the copies and reductions reading it
  std::vector<char> window_busy_;       // per window: they may still be running
  int next_window_ = 0;                 // the window the next unit's gradients go to
  int open_window_ = -1;                // the window of the open unit (open_unit_), or -1
  bool copies_unwaited_ = false;        // copies into a bucket no reduction has waited for yet
  std::vector<Event*> segment_events_;  // stages 1/2: after each segment's post-step gather
  Event* persistent_event_ = nullptr;   // stage 3: after the persistent segment's gather
  std::vector<Event*> bucket_events_;   // after each bucket's reduction and accumulation

  std::vector<zrt_shard_piece_t> pieces_;               // this rank's shard, in order
  std::vector<std::vector<int>> param_shard_pieces_;    // per param: indexes into pieces_
  std::vector<std::vector<int>> unit_segments_;         // per unit: segments it feeds
  std::vector<std::vector<SegmentPiece>> unit_pieces_;  // per unit: its pieces, all segments
  std::vector<std::vector<int>> unit_piece_segment_;    // segment of each unit_pieces_ entry
  // Per segment: where it starts in its unit's gradient window, when the window holds it whole,
  // in segment order and in the reduce dtype (host buckets only); kNotInWindow otherwise. Such a
  // segment's first reduction after a step reads the window itself (partition_grads.cc).
  static constexpr size_t kNotInWindow = static_cast<size_t>(-1);
  std::vector<size_t> segment_window_offset_;
  std::vector<int> segment_units_;  // units feeding each segment
  int trainable_units_ = 0;

  // Per unit state.
  std::vector<uint8_t> fetched_;
  std::vector<uint8_t> signalled_;
  std::vector<int> slot_of_;    // stage 3: window slot holding the unit, or -1
  std::vector<int> next_slot_;  // stage 3: slot of a fetched unit's second copy, or -1
  // Stage 3: per segment, the parameter shard still holds the parameters before the last step
  // (publishing converts each unit's master slice on the all-gather stream just before its first
  // gather, so the conversion overlaps the framework's compute instead of ending the step).
  std::vector<uint8_t> shard_stale_;

  // Stage 3 window.
  std::vector<Slot> slots_;
  size_t slot_bytes_ = 0;
  uint64_t prefetched_bytes_ = 0;
  WindowStats stats_;
  int last_fetched_ = -1;
  int direction_ = 1;
  bool recording_ = true;
  bool recorded_ = false;
  std::vector<int> order_;  // fetch order recorded during the first step
  size_t order_pos_ = 0;

  // Gradient state.
  bool sync_ = true;
  int open_unit_ = -1;
  int signalled_count_ = 0;
  bool microbatch_started_ = false;
  bool reduced_since_step_ = false;  // a synchronised micro-batch completed
  bool unreduced_local_ = false;     // a no-sync micro-batch completed after the last sync
  bool reductions_in_flight_ = false;
  bool grads_prepared_ = false;
  std::vector<int> pending_;         // per segment: units still to signal
  std::vector<int> bucket_of_;       // per segment: bucket index, or -1
  std::vector<int> bucket_segment_;  // per bucket: segment, or -1
  // Stages 2/3, per segment: the gradient shard's slice holds the previous step's gradients, so
  // the first reduction after a step overwrites it instead of adding (no clearing pass).
  std::vector<uint8_t> grad_fresh_;
  int next_bucket_ = 0;
  int64_t step_ = 0;
  double norm_buffer_[2] = {0, 0};
};

}  // namespace zrt
