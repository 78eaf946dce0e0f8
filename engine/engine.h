// The progress engine of one communicator: one thread that owns the transport, runs the head
// task of every stream, and sleeps on the transport's event fd (plus an eventfd for new work)
// when nothing can advance. Streams order work; events connect streams and host threads.
//
// Threading: Stream/Event methods may be called from any thread. Tasks and the transport are
// touched only by the progress thread once start() has returned.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lib/core/settings.h"
#include "lib/core/status.h"
#include "engine/counters.h"
#include "engine/flight_recorder.h"
#include "engine/task.h"
#include "zrt/zrt.h"

namespace zrt {

class Transport;
class ProgressEngine;
class Event;
class AlgorithmTable;  // collectives/algorithm.h; the engine only carries it to the collectives
class AlgorithmPlan;   // collectives/algorithm_plan.h; likewise

// One spin of a busy wait (the processor's pause), and a yield of the core.
void spin_pause();
void spin_yield();
// How often an inline spin looks at the clock (spin_inline), which also decides whether it
// pauses or yields: where ranks outnumber cores it yields from the first look on, after 16
// spins, the peer it waits for possibly needing this core (4 ranks on 2 cores, 3 runs each, us:
// the 8-byte all-reduce 2.9-5.5 against 4.7-9.0 when it yielded after 64 spins, a 4 KiB
// all-gather 3.6-4.0 against 5.5-5.6).
inline constexpr int kInlineSpinsPerClockLook = 16;

// What an inline spin does next, by the stream's clock (InlineCall::yield_from, until).
enum class InlineSpin { kPause, kYield, kExpired };

// A collective that the submitting thread runs from start to end without a Task: a one-shot
// collective (collectives/one_shot_lane.h). Stream::begin_inline claims the idle stream as a
// task that runs inline would (engine/inline_run.cc); the caller then moves the data,
// spinning until Stream::inline_spin says kExpired, and ends the claim with end_inline
// (completed) or hand_off_inline (a task already started, continued by the progress thread).
struct InlineCall {
  TraceCall trace;  // in: what the flight recorder notes (the engine fills in the stream)
  // Out, from begin_inline until the claim ends.
  std::optional<TaskContext> context;
  uint64_t start = 0;       // readings of the stream's clock
  uint64_t until = 0;       // when the caller's spin ends
  uint64_t yield_from = 0;  // from when its pauses give way to yields of the core
  int64_t start_ns = 0;
  uint64_t trace_ticket = 0;
};

class Stream {
 public:
  virtual ~Stream() = default;

  // Appends a task. Returns the stream's error if it has already failed (the task is dropped).
  virtual Status enqueue(std::unique_ptr<Task> task) = 0;
  // Appends a local function run on the progress thread in stream order (for work that must
  // follow a collective, e.g. converting a gathered bucket). It must not block.
  virtual Status enqueue_host_function(std::function<Status()> function, const char* name) = 0;

  // Blocks (without spinning) until everything enqueued so far completed; returns the error.
  virtual Status synchronize() = 0;
  // ok, ZRT_IN_PROGRESS, or the stream's error.
  virtual Status query() = 0;
  // Work enqueued after this call waits for `event`.
  virtual Status wait_event(Event& event) = 0;

  // Task-less inline collectives (InlineCall above). begin_inline: whether the calling thread
  // now holds the stream, which was idle (or became so within a short wait) and has its one-shot
  // arena mapped; false: enqueue the collective as a task instead. Every claim ends with exactly
  // one of end_inline (the collective completed: it counts one sequence number, its bytes and
  // busy time, as a task would) and hand_off_inline (`task`, whose start() has run, continues on
  // the progress thread; its errors and timeouts are the engine's as for any task).
  virtual bool begin_inline(InlineCall* /*call*/) { return false; }
  virtual InlineSpin inline_spin(const InlineCall& /*call*/) const { return InlineSpin::kExpired; }
  virtual void end_inline(InlineCall& /*call*/, zrt_coll_kind_t /*kind*/, bool /*internal*/,
                          uint64_t /*bytes_sent*/, uint64_t /*bytes_received*/) {}
  virtual void hand_off_inline(InlineCall& /*call*/, std::unique_ptr<Task> /*task*/) {}

  virtual int index() const = 0;  // creation order within the communicator
  virtual zrt_mem_kind_t mem_kind() const = 0;
  virtual ProgressEngine& engine() = 0;
};

// Calls `step` (Status(bool* done)) on the claiming thread until it reports done or fails, or
// the claim's spin ends (stream.inline_spin, looked at every kInlineSpinsPerClockLook calls:
// read on every call the clock was 12% of an 8-byte all-reduce's samples, perf, all of it
// between a peer's store and this rank seeing it; measured: docs/ARCHITECTURE.md#progress-engine).
// A pause between calls until a look finds InlineCall::yield_from passed, a yield of the core
// from then on, which a peer sharing it may need to arrive (more ranks than cores).
template <typename Step>
Status spin_inline(const Stream& stream, const InlineCall& call, Step&& step, bool* done) {
  *done = false;
  InlineSpin next = InlineSpin::kPause;
  for (int spin = 0;; ++spin) {
    ZRT_RETURN_IF_ERROR(step(done));
    if (*done) return Status::ok();
    if (spin % kInlineSpinsPerClockLook == kInlineSpinsPerClockLook - 1) {
      next = stream.inline_spin(call);
      if (next == InlineSpin::kExpired) return Status::ok();
    }
    if (next == InlineSpin::kPause) {
      spin_pause();
    } else {
      spin_yield();
    }
  }
}

class Event {
 public:
  virtual ~Event() = default;
  virtual Status record(Stream& stream) = 0;
  virtual Status query() = 0;        // ok, ZRT_IN_PROGRESS, or the error of the work it follows
  virtual Status synchronize() = 0;  // blocks without spinning
  virtual ProgressEngine& engine() = 0;
};

// EngineOptions::busy_poll_us's default: covers a notification round trip through UCX's shared
// memory (a few microseconds) with room for a loaded host's scheduling delays.
inline constexpr int64_t kBusyPollMicros = 50;
inline constexpr int64_t kMaxBusyPollMicros = 1000000;

struct EngineOptions {
  int rank = 0;
  int size = 1;
  int64_t timeout_ms = 60000;  // a task that makes no progress this long fails with ZRT_TIMEOUT
  // The collective-order checker (collectives/order_check.h): 1 on, 0 off, -1 = from ZRT_CHECK
  // in the environment ("1"/"0"), and when that is unset, on in builds without NDEBUG (meson's
  // debug and debugoptimized buildtypes, the project's default) and off in release builds.
  // create_progress_engine resolves it: options().check_order is then 0 or 1.
  int check_order = -1;
  // The default mismatch fingerprint (collectives/fingerprint_check.h), which runs whenever the
  // checker does not: every collective's first message on each link it uses carries its call, so
  // mismatched calls fail naming both. Not a setting: off only to measure its cost
  // (bench/bench_collectives.cc's "fingerprint" mode).
  bool fingerprint = true;
  // Rings write into the right neighbour's mapped inbox (collectives/ring_window.h), not tagged
  // messages: all rings with every rank on this host, else the two-level ones' ring in each host
  // (two_level_hosts > 1; the communicator decides, ZRT_WINDOWS=0 turns it off).
  bool peer_windows = false;
  // The inbox geometry: window_slots slots (2 to kWindowMaxSlots) of window_slot_bytes (a
  // multiple of 4 KiB from kWindowMinSlotBytes to kWindowMaxSlotBytes; stream_resources.h).
  // -1 / 0: from ZRT_WINDOW_SLOTS / ZRT_WINDOW_SLOT_KIB in the environment, else the defaults
  // kWindowSlots / kWindowSlotBytes. create_progress_engine resolves them.
  int window_slots = -1;
  size_t window_slot_bytes = 0;
  // The flight recorder (flight_recorder.h): how many calls it keeps (-1 = ZRT_TRACE_DEPTH) and
  // where it is written on a failure or a signal (unset = ZRT_TRACE_DIR; "" = only on request).
  int trace_depth = -1;
  std::optional<std::string> trace_dir;
  // The all-reduce algorithm (collectives/algorithm.h); unset = ZRT_ALGO, which
  // create_progress_engine reads once, so a bad value fails the engine's creation, not a call.
  std::optional<AllReduceAlgorithm> all_reduce_algorithm;
  // Two-level collectives (collectives/two_level_reduce_scatter.h): > 1 when the ranks are on
  // this many hosts of size / two_level_hosts consecutive ranks each and ZRT_HIERARCHY allows
  // it (the communicator decides, alike on every rank); 0 = one ring over all ranks.
  int two_level_hosts = 0;
  // How many hosts the ranks are on (the communicator counts them; 1: all on this one), for
  // the algorithm table's hosts column (collectives/algorithm.h), whatever ZRT_HIERARCHY says.
  int hosts = 1;
  // One host name per rank when the ranks span hosts (the communicator learns them at
  // creation), else empty: a timeout names the host of each peer that went silent.
  std::vector<std::string> host_names;
  // Every rank's pid when every rank is on this host, peer windows are on and each rank can read
  // every other's memory with process_vm_readv (the communicator probes it at creation), else
  // empty: the `cma` all-gather (collectives/one_shot.h) runs only where this is filled.
  std::vector<int> peer_pids;
  // While a communicating task is in flight and a turn of the progress thread found nothing to
  // do, it keeps polling the transport (yielding its core each turn) for up to this long before
  // it sleeps, so that a peer's notification arriving meanwhile does not pay a wake-up (tens
  // of microseconds on a loaded host, the whole of a small collective). Idle, it sleeps at once.
  // 0: always sleep at once; at most kMaxBusyPollMicros (else engine creation fails).
  int64_t busy_poll_us = kBusyPollMicros;
  // Every rank on this host can have a core of its own (no more of them than the CPUs they may
  // run on; the communicator decides from their CPU masks). An inline collective's wait
  // (spin_inline) then only pauses for its first busy_poll_us, where it would yield the core after
  // a few hundred nanoseconds: a peer on another core arrives within that, and each yield is a
  // system call on the path between its store and this rank seeing it (an 8-byte all-reduce
  // took 0.35 us with them, 0.24 without, N = 2, bound; measured:
  // docs/MEASURED.md#the-8-byte-all-reduce). With more ranks than cores the peer may need this
  // core, so it yields early.
  bool core_per_rank = false;
  // The algorithm table from ZRT_ALGO_TABLE, which the communicator loads (null: the built-in
  // table alone). Shared and immutable: split communicators may hold the same one.
  std::shared_ptr<const AlgorithmTable> algorithm_table;
  // all_reduce_algorithm and algorithm_table resolved for `size` once, which the communicator
  // builds (null: every collective resolves its algorithm from the table itself, slower).
  std::shared_ptr<const AlgorithmPlan> algorithm_plan;
};

// Resolves EngineOptions::window_slots / window_slot_bytes as described there. Values out of
// range (given or from the environment) are ZRT_INVALID_ARGUMENT naming them.
Status resolve_window_geometry(EngineOptions* options);

// Resolves EngineOptions::check_order -1 as described there; other values pass through. A
// ZRT_CHECK value the registry does not accept is ZRT_INVALID_ARGUMENT naming it.
Status resolve_check_order(int requested, int* resolved);

class ProgressEngine {
 public:
  virtual ~ProgressEngine() = default;

  // Streams and events live until destroy_* or the engine's destruction.
  virtual Status create_stream(zrt_mem_kind_t kind, Stream** stream) = 0;
  virtual Status destroy_stream(Stream* stream) = 0;  // waits for its work first
  virtual Status create_event(Event** event) = 0;
  virtual Status destroy_event(Event* event) = 0;

  // Fails all pending and future work with `reason` and wakes every waiter. Any thread.
  virtual void abort(const Status& reason) = 0;
  // ok while healthy; else the first failure that broke the communicator (abort, dead peer,
  // timeout of a communicating task).
  virtual Status error() const = 0;

  virtual CommCounters& counters() = 0;
  // This communicator's flight recorder; partition calls record into it too.
  virtual FlightRecorder& recorder() = 0;
  // Writes the recorder as this rank's file in `dir` ("" = the trace directory, which must then
  // be set) and returns the file's path in *path (may be NULL). Any thread.
  virtual Status dump_trace(const std::string& dir, const std::string& reason,
                            std::string* path) = 0;
  virtual Transport& transport() = 0;
  virtual const EngineOptions& options() const = 0;

  // Stops the progress thread after all streams drained (or the engine failed). Idempotent.
  virtual Status shutdown() = 0;
};

// Starts the progress thread over `transport`, which must outlive the engine.
Status create_progress_engine(Transport& transport, const EngineOptions& options,
                              std::unique_ptr<ProgressEngine>* engine);

}  // namespace zrt
