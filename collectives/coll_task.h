// CollTask: the Task every host collective runs as. A collective is a short sequence of phases
// (all-reduce = ring reduce-scatter, then ring all-gather); each phase is a non-blocking state
// machine that posts transport operations and advances when they complete. CollTask runs the
// phases in order and keeps what the engine reads: kind, byte counts, a progress marker and the
// peers still waited for. Alongside the phases it runs the collective-order check
// (order_check.h) when the engine asks for it.
#pragma once

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "collectives/fingerprint_check.h"
#include "collectives/order_check.h"
#include "kernels/reduce/reduce_kernels.h"
#include "engine/stream_resources.h"
#include "engine/task.h"
#include "transports/transport.h"

namespace zrt {

class CollTask;

// One posted transport operation.
struct PostedOp {
  TransportCompletion completion;
  bool posted = false;
  bool fingerprinted = false;  // a receive with the call's fingerprint in front of the data
  bool busy() const { return posted && !completion.done; }
  bool finished() const { return posted && completion.done; }
};

// How elements combine: the kernel op and the pre-multiplication (1.0 = none; 1/N for ZRT_AVG).
struct ReduceSpec {
  zrt_dtype_t dtype = ZRT_F32;
  size_t element_size = 4;
  ReduceOp op = ReduceOp::kSum;
  double scale = 1.0;
  // The collective's result is larger than the caches (kStreamOutputMinBytes): its final
  // reductions write the user's output with non-temporal stores (reduce_elements).
  bool stream_output = false;
};

inline constexpr size_t kStreamOutputMinBytes = size_t{16} << 20;

// N blocks of a buffer as even as possible: block b has base + (b < extra) elements.
struct BlockLayout {
  size_t base = 0;
  size_t extra = 0;
  // `count` elements in `blocks` blocks, the first count % blocks one longer: the ring
  // all-reduce's layout, which the one-shot all-reduce reduces by to keep the ring's bits.
  static BlockLayout split(size_t count, int blocks) {
    const size_t n = static_cast<size_t>(blocks);
    return BlockLayout{count / n, count % n};
  }
  size_t offset(int block) const {
    const size_t b = static_cast<size_t>(block);
    return b * base + (b < extra ? b : extra);
  }
  size_t length(int block) const { return base + (static_cast<size_t>(block) < extra ? 1 : 0); }
  size_t max_length() const { return base + (extra > 0 ? 1 : 0); }
  // Elements of chunk `chunk` of `block` when blocks are cut into chunks of chunk_elems (the
  // last chunks of a shorter block may be empty).
  size_t chunk_length(int block, size_t chunk, size_t chunk_elems) const {
    const size_t begin = chunk * chunk_elems;
    const size_t block_length = length(block);
    return begin >= block_length ? 0 : std::min(chunk_elems, block_length - begin);
  }
};

class Phase {
 public:
  virtual ~Phase() = default;
  virtual Status start(TaskContext& context, CollTask& task) = 0;
  virtual Status progress(TaskContext& context, CollTask& task, bool* done) = 0;
  // On the task's first phase, before start(), while the default fingerprint is on
  // (fingerprint_check.h): posts what carries it beyond the phase's own messages. By default the
  // companion around the ring; phases whose first messages carry it (window READY(0), the direct
  // all-reduce's and one-shot's headers) post nothing.
  virtual Status start_fingerprint(TaskContext& context, CollTask& task);
  // The phase waits for peers' stores into mapped memory (Task::polls_memory).
  virtual bool waits_on_memory() const { return false; }
};

// A collective's arguments as describe() prints them ("all_reduce(8 x f32, sum)"), kept as
// fields and formatted only when asked (errors, logs): a string formatted with every call took
// a visible share of a small collective's own time on the submitting thread (measured:
// docs/ARCHITECTURE.md#measured-costs).
struct CallDescription {
  zrt_coll_kind_t kind = ZRT_COLL_ALL_REDUCE;
  size_t count = 0;
  zrt_dtype_t dtype = ZRT_F32;
  const char* op = "";  // op_name()'s literal, or "premul_sum"
  int root = -1;
  int peer = -1;
};
std::string describe_call(const CallDescription& call);

class CollTask final : public Task {
 public:
  CollTask(const CallDescription& description, int p2p_peer = -1, bool is_send = false)
      : description_(description),
        p2p_peer_(p2p_peer),
        p2p_is_send_(is_send) {}

  void add_phase(std::unique_ptr<Phase> phase) { phases_.add(std::move(phase)); }
  void set_local() { local_ = true; }
  void set_trace(const TraceCall& call) { trace_ = call; }
  TraceCall trace_call() const override { return trace_; }
  void set_internal() { internal_ = true; }
  // The data moves through memory the peers map (one_shot.h): once the stream's arena is mapped
  // the task may run on the submitting thread (Task::runs_inline), and the progress thread looks
  // again at short intervals while it waits (Task::waits_on_memory). Its phase compares every
  // peer's fingerprint before using the peer's data, so the order checker's messages are
  // skipped (and with them its lookahead, wants_prepare).
  void set_memory_path() { memory_path_ = true; }
  bool runs_inline(const StreamResources& resources) const override {
    return memory_path_ && resources.one_shot.ready;
  }
  bool waits_on_memory() const override { return memory_path_; }
  bool polls_memory() const override {
    return memory_path_ || (phases_started_ && phases_.current() != nullptr &&
                            phases_.current()->waits_on_memory());
  }
  // The call's fingerprint for the order checker (collectives only, not point-to-point).
  void set_fingerprint(const OrderFingerprint& fingerprint) {
    fingerprinted_ = true;
    fingerprint_.set(fingerprint);
  }
  // OrderFingerprint::variant, once the algorithm is chosen (before the task is enqueued).
  void set_fingerprint_variant(uint8_t variant) {
    OrderFingerprint fingerprint = fingerprint_.mine();
    fingerprint.variant = variant;
    fingerprint_.set(fingerprint);
  }

  Status start(TaskContext& context) override;
  Status progress(TaskContext& context, bool* done) override;
  bool communicates() const override { return !local_; }
  zrt_coll_kind_t kind() const override { return description_.kind; }
  bool internal() const override { return internal_; }
  uint64_t bytes_sent() const override { return bytes_sent_; }
  uint64_t bytes_received() const override { return bytes_received_; }
  uint64_t check_bytes_sent() const override { return checking() ? check_->bytes_sent() : 0; }
  uint64_t check_messages_sent() const override { return checking() ? check_->messages_sent() : 0; }
  std::string describe() const override { return describe_call(description_); }
  uint64_t progress_count() const override { return marker_; }
  int p2p_peer() const override { return local_ ? -1 : p2p_peer_; }
  bool p2p_is_send() const override { return p2p_is_send_; }
  std::string waiting_on() const override;
  // Lookahead (Task::prepare): a checked collective posts its fingerprints while the one before
  // it on the stream still moves data.
  bool wants_prepare() const override { return !local_ && !memory_path_ && fingerprinted_; }
  Status prepare(TaskContext& context) override;
  bool ready_for_next() const override { return checking() && phases_started_; }
  bool tell_peers() const override { return tell_peers_; }

  // For phases.
  // `data` false: a control message (window notifications and handshake), not counted in
  // bytes_sent, as UCX's own rendezvous messages are not on the tagged path.
  Status post_send(TaskContext& context, int peer, uint32_t tag, const void* buffer, size_t bytes,
                   PostedOp* op, bool data = true);
  Status post_recv(TaskContext& context, int peer, uint32_t tag, void* buffer, size_t bytes,
                   PostedOp* op);
  // A data message that, with `with_fingerprint` (only while fingerprint_on()), carries the
  // default fingerprint in front of its data (Phase::start_fingerprint, fingerprint_check.h):
  // the receive's collect() compares what arrived before it checks the length. Without, as
  // post_send / post_recv. And the companion for the links such headers leave out (-1: no such
  // neighbour).
  Status post_data_send(TaskContext& context, int peer, uint32_t tag, const void* buffer,
                        size_t bytes, PostedOp* op, bool with_fingerprint);
  Status post_data_recv(TaskContext& context, int peer, uint32_t tag, void* buffer, size_t bytes,
                        PostedOp* op, bool with_fingerprint);
  Status post_fingerprint_companion(TaskContext& context, int left, int right);
  // The error of a finished op (naming the peer), else ok; counts received bytes once.
  Status collect(PostedOp* op, int peer, bool is_send, size_t expected_bytes);
  void advanced() { ++marker_; }
  void note_waiting(int peer) { waiting_peer_ = peer; }
  void add_received(uint64_t bytes) { bytes_received_ += bytes; }
  // Bytes a phase moved to a peer by plain stores into its mapped memory (ring_window.h).
  void add_sent(uint64_t bytes) { bytes_sent_ += bytes; }
  // The default fingerprint, for phases that carry it in their own messages.
  bool fingerprint_on() const { return fingerprint_.enabled(); }
  const OrderFingerprint& fingerprint() const { return fingerprint_.mine(); }
  // Compares what `peer` sent as its fingerprint with this task's call: ok, or the mismatch,
  // which the phase returns (the task then fails with it and tells every peer).
  Status check_fingerprint(const void* data, size_t bytes, int peer) {
    return fingerprint_.compare(data, bytes, peer);
  }

 private:
  // The task's phases in order (at most two), and the one that runs now.
  class PhaseList {
   public:
    void add(std::unique_ptr<Phase> phase) { phases_[count_++] = std::move(phase); }
    bool empty() const { return count_ == 0; }
    Phase& first() const { return *phases_[0]; }
    // The phase that runs now; null once the last one is done.
    Phase* current() const { return index_ < count_ ? phases_[index_].get() : nullptr; }
    void next() { ++index_; }
    void rewind() { index_ = 0; }

   private:
    std::array<std::unique_ptr<Phase>, 2> phases_;
    int count_ = 0;
    int index_ = 0;
  };

  // A data error waiting for the fingerprint that would name the calls (run_fingerprinted).
  struct HeldError {
    Status status;
    std::chrono::steady_clock::time_point since;
  };

  CallDescription description_;
  int p2p_peer_;
  bool p2p_is_send_;
  bool local_ = false;
  bool internal_ = false;
  bool memory_path_ = false;
  PhaseList phases_;
  uint64_t bytes_sent_ = 0;
  uint64_t bytes_received_ = 0;
  uint64_t marker_ = 0;
  int waiting_peer_ = -1;
  bool phases_started_ = false;
  bool phases_done_ = false;
  bool prepared_ = false;  // prepare() already started the order check
  bool fingerprinted_ = false;
  // Only while ZRT_CHECK asks for the order check: as a member its ~2.9 KB of per-peer state
  // (Statuses among it) was built and destroyed with every task, about a quarter of a small
  // collective's own time on the submitting thread.
  std::unique_ptr<OrderCheck> check_;
  FingerprintCheck fingerprint_;
  bool tell_peers_ = false;
  TraceCall trace_;
  HeldError held_;

  bool checking() const { return check_ != nullptr && check_->active(); }
  Status start_order_check(TaskContext& context);
  Status start_phases(TaskContext& context);
  Status run_phases(TaskContext& context, bool* done);
  Status run_fingerprinted(TaskContext& context, bool* done);
  Status mismatch_failure();
  // post_send / post_recv and their fingerprinted forms (post_data_send / post_data_recv).
  Status post_send_parts(TaskContext& context, int peer, uint32_t tag, bool with_fingerprint,
                         const void* buffer, size_t bytes, PostedOp* op, bool data);
  Status post_recv_parts(TaskContext& context, int peer, uint32_t tag, bool with_fingerprint,
                         void* buffer, size_t bytes, PostedOp* op);
};

// Reduces b into a with spec (out = scale_a * a OP scale_b * b); count may be 0. `final`: out
// is the user's output (streamed when spec.stream_output), not staging another step reads.
void reduce_chunk(const ReduceSpec& spec, const void* a, double a_scale, const void* b,
                  double b_scale, void* out, size_t count, bool final = false);
// out = scale * in (a copy when scale is 1 or the op is not a sum); count may be 0.
void copy_scaled(const ReduceSpec& spec, const void* in, void* out, size_t count);

inline int ring_mod(int value, int size) {
  return ((value % size) + size) % size;
}

}  // namespace zrt
