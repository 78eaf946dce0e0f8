// Task: one unit of asynchronous work on a stream, as a non-blocking state machine (post /
// progress / test, the shape of UCC's tasks and NCCL's proxy). The progress engine calls start()
// once when the task reaches the head of its stream, then progress() until it reports done.
// Both run on the communicator's progress thread and must never block.
#pragma once

#include <cstdint>
#include <string>

#include "lib/core/status.h"
#include "engine/flight_recorder.h"
#include "zrt/zrt.h"

namespace zrt {

class Transport;
class CommCounters;
struct StreamResources;  // engine/stream_resources.h

// What a running task sees of its communicator.
struct TaskContext {
  Transport& transport;
  int rank;
  int size;
  // Distinct for every tagged task of the communicator and identical on every rank for the
  // matching task (stream index and per-stream sequence number). The task may use the low
  // kTaskTagBits bits freely (e.g. step * chunks + chunk); it wraps safely because the transport
  // matches messages with equal tags from one peer in posting order.
  uint64_t tag_base;
  // Per-stream resources the engine keeps for the task's stream (constant-size staging memory
  // from transport.alloc_registered, the self-send mailbox). Owned by the engine.
  StreamResources* resources = nullptr;
  // The stream's index and the task's collective number on it (collectives only), for the
  // collective-order checker's messages.
  int stream_index = 0;
  uint32_t sequence = 0;
  // Whether collectives exchange and compare fingerprints (EngineOptions::check_order).
  bool check_order = false;
  // Whether collectives carry the default fingerprint (EngineOptions::fingerprint, when
  // check_order is off).
  bool fingerprint = false;
};

inline constexpr int kTaskTagBits = 16;
// Reserved for the collective-order checker's fingerprint messages: set in tag_base | bit, never
// in the bits a task uses itself, so fingerprints never match a data message.
inline constexpr uint64_t kOrderCheckTagBit = uint64_t{1} << 32;

class Task {
 public:
  virtual ~Task() = default;

  // Posts the first operations. An error fails the stream.
  virtual Status start(TaskContext& context) = 0;
  // Advances after transport progress; sets *done when finished. An error fails the stream.
  virtual Status progress(TaskContext& context, bool* done) = 0;

  // Whether the task talks to peers (and so consumes a sequence number of its stream). Local
  // tasks (host callbacks, event records) return false.
  virtual bool communicates() const { return true; }

  // Inline execution (engine/inline_run.cc): a task whose start() and progress() touch
  // neither the transport nor the stream's scratch (its data moves through memory the peers
  // map) may run them on the submitting thread while its stream is idle, saving a small
  // collective the two thread hand-offs (submitter to progress thread and back). Asked (only of
  // tasks that waits_on_memory) under the engine's lock with the stream's resources.
  virtual bool runs_inline(const StreamResources& /*resources*/) const { return false; }
  // The task waits for peers' stores into mapped memory, which wake no file descriptor: the
  // progress thread then sleeps only briefly between looks (kMemoryWaitMaxSleepMs).
  virtual bool waits_on_memory() const { return false; }
  // Whether it waits so now: a task that waits on memory, or one whose current part does (the
  // ring all-reduce's cma all-gather). Asked by the thread that runs the task only.
  virtual bool polls_memory() const { return waits_on_memory(); }

  // For counters and logs.
  virtual zrt_coll_kind_t kind() const = 0;
  // zrt's own exchange (an agreement, a split, a closing barrier), not the caller's: counted
  // apart (CommCounters) so that the caller's figures hold only its own traffic.
  virtual bool internal() const { return false; }
  virtual uint64_t bytes_sent() const = 0;
  virtual uint64_t bytes_received() const = 0;
  // Bytes and messages the collective-order checker sent for this task: counted apart from the
  // payload (CommCounters::check_bytes), so bytes_sent() stays the algorithm's own traffic.
  virtual uint64_t check_bytes_sent() const { return 0; }
  virtual uint64_t check_messages_sent() const { return 0; }
  // One line for logs and errors, e.g. "reduce_scatter(4194304 x f32, sum)".
  virtual std::string describe() const = 0;

  // A counter that grows whenever the task advanced (an operation completed, a chunk was
  // reduced). The engine's no-progress timeout watches it, and a change makes the engine call
  // progress() again before sleeping. Tasks that keep 0 are timed from their start.
  virtual uint64_t progress_count() const { return 0; }
  // Point-to-point tasks name their peer: their tag_base then comes from a per-(stream, peer,
  // direction) sequence instead of the stream's collective sequence, so that a send/recv pair
  // does not shift the collective sequence of ranks that take no part in it. -1 = collective.
  virtual int p2p_peer() const { return -1; }
  virtual bool p2p_is_send() const { return false; }
  // Lookahead. While a stream's running collective reports ready_for_next(), the engine may take
  // the next task of the stream, if it wants_prepare(), out of the queue and call prepare() on
  // it with the tag_base and sequence it will run with, so that it posts its first small
  // messages early (the order checker's fingerprints: their latency then hides behind the
  // running collective). start() follows as usual, with the same context. A task that was
  // prepared is dropped only after the transport cancelled its operations.
  virtual bool wants_prepare() const { return false; }
  virtual Status prepare(TaskContext& /*context*/) { return Status::ok(); }
  virtual bool ready_for_next() const { return false; }
  // The error the task just failed with is a mismatch that its peers may not see themselves:
  // the engine sends its message to every peer before failing (engine/peer_verdicts.h).
  virtual bool tell_peers() const { return false; }
  // What the flight recorder notes of the task (its stream is filled in by the engine).
  virtual TraceCall trace_call() const {
    TraceCall call;
    call.kind = kind();
    return call;
  }
  // The recorder's ticket for this task (FlightRecorder::post); 0 = not recorded.
  uint64_t trace_ticket = 0;
  // For timeout messages: the ranks the task still waits for, e.g. "ranks 2, 3" ("" = unknown).
  virtual std::string waiting_on() const { return ""; }
};

}  // namespace zrt
