// The progress engine's concrete classes (engine.h is the contract). One mutex, mu_, guards
// every stream's queue and counters and every event; the progress thread runs tasks without it.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <limits>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "lib/core/tick_clock.h"
#include "engine/engine.h"
#include "engine/peer_beacons.h"
#include "engine/peer_verdicts.h"
#include "engine/phase_clock.h"
#include "engine/stream_resources.h"
#include "engine/trace_dump.h"

namespace zrt {

class EngineImpl;

// Tag layout (kTagBits = 44): bit 43 set for point-to-point; bits 33..42 the stream index
// (mod 1024); bit 32 the order checker's (kOrderCheckTagBit); bits 16..31 the sequence number
// (mod 2^16); bits 0..15 the task's own.
inline constexpr int kStreamIndexBits = 10;
inline constexpr int kSequenceBits = 16;
static_assert(kOrderCheckTagBit == uint64_t{1} << (kTaskTagBits + kSequenceBits));
inline constexpr int kMaxLiveStreams = 1 << kStreamIndexBits;
// The largest collective (nccl-tests' size) that the bounded poll serves
// (EngineOptions::busy_poll_us): the small and medium messages.
inline constexpr uint64_t kBusyPollMaxBytes = uint64_t{4} << 20;
// The largest collective a submission waits behind to run its own inline (EngineImpl::
// ends_soon, inline_run.cc): a barrier, a vote, a small layer's gather.
inline constexpr uint64_t kInlineWaitMaxBytes = uint64_t{64} << 10;
// How long the progress thread sleeps between looks at a task that waits on memory
// (Task::waits_on_memory): an eighth of the wait so far, at least kMemoryWaitMinSleepUs and at
// most kMemoryWaitMaxSleepMs, so that a rank waiting long for a late peer stays under 1% of a
// core and arrives at most 1/8 of its wait late. Each look runs the transport's progress (tcp's
// epoll among it), which is what such a wait's CPU is made of: looks at most 20 ms apart left
// too little of that budget under a sanitizer (test_small_path's late-peer test). The floor was
// 1 ms: with more ranks than cores a one-shot collective whose peer was descheduled past the
// submitting thread's spin then paid a whole millisecond, several times its own time (measured:
// docs/ARCHITECTURE.md#measured-costs).
inline constexpr int64_t kMemoryWaitMinSleepUs = 50;
inline constexpr int kMemoryWaitMaxSleepMs = 50;
inline constexpr int kMemoryWaitSleepDivisor = 8;
// How often the progress thread drives the transport while every running task moves its data
// through mapped memory (EngineImpl::memory_tasks_only).
inline constexpr std::chrono::microseconds kMemoryPathTransportInterval{20};
// The longest the in-flight bounded poll grows to (BoundedPoll's bound).
inline constexpr std::chrono::microseconds kAdaptivePollMax{1000};
// The submitting thread's spin on an inline task: EngineOptions::busy_poll_us times this, where
// ranks outnumber cores (a peer on this core runs when the spin yields it).
inline constexpr int kInlineSpinFactor = 4;
// The same where every rank has a core of its own (EngineOptions::core_per_rank): 4 ms at the
// default. Another process on the cores (2 busy loops beside 2 bound ranks) deschedules a peer
// for a time slice, milliseconds; a spin that gave up after 200 us handed the call to the
// progress thread, which then waited for a slice of its own, and so did the caller it woke: a
// 256 KiB all-gather took 30-2,478 us (3 runs) against 36-66 with this spin (Open MPI, which
// never stops spinning: 28-77; measured: docs/MEASURED.md#the-8-byte-all-reduce). A rank
// waiting for a late peer still sleeps after it.
inline constexpr int kInlineSpinFactorCorePerRank = 80;
// How long a submission waits, asleep, for its stream to complete the next of the small tasks
// ahead of it (inline_run.cc): EngineOptions::busy_poll_us times this. Queued 8-byte
// all-reduces complete on the progress thread 27-142 us apart (10th-90th percentile) under
// AddressSanitizer with ranks sharing 2 cores, up to 330 us: a bound at the spin's 200 us ran
// out every few hundred and the loop queued again (measured:
// docs/ARCHITECTURE.md#one-shot-collectives, "Behind small work").
inline constexpr int kInlineWaitFactor = 20;
// After a wait for idle ran out (a late peer), the submissions that follow queue without
// waiting until the stream completes a task, but only this many: beyond, each waits again. A
// submitter that queued without bound ran ahead of its own progress thread, with which it shares
// a core when ranks are bound: 8-byte all-reduces queued by the hundred thousand and ran at
// 1.5-5 us each for the rest of the loop (1 run in 5; measured:
// docs/MEASURED.md#the-8-byte-all-reduce).
inline constexpr uint64_t kQueuedBehindLateMax = 16;
uint64_t make_tag_base(bool p2p, int stream_index, uint32_t sequence);

// A stream's task counts and the marks set on them (guarded by the engine's mu_).
struct StreamTickets {
  static constexpr uint64_t kNoWaiter = ~uint64_t{0};
  uint64_t enqueued = 0;   // tasks ever accepted
  uint64_t completed = 0;  // tasks finished successfully, in order
  // The ticket of the last task queued that may take long (not EngineImpl::ends_soon): once
  // `completed` reaches it, whatever is pending ends within a small collective's time, and a
  // submission that would run inline may wait for it (inline_run.cc).
  uint64_t last_slow_ticket = 0;
  // `completed` when such a wait last ran out (a late peer holds the stream): no submission
  // waits again before a task completes.
  uint64_t inline_wait_expired_at = kNoWaiter;
  // The lowest ticket a waiter sleeps on (wait_point): a completion wakes the waiters only when
  // it reaches it, not on every task, so a rank that queues many small collectives and then
  // synchronizes does not pay a thread switch per collective (queued back to back, 8-byte
  // all-reduces took many times their inline time while the progress thread woke the waiter
  // after each; measured: docs/ARCHITECTURE.md#measured-costs).
  uint64_t wake_at = kNoWaiter;

  // Whether `completed` now reaches a waiter's ticket; if so the waiters wake and re-register.
  bool take_waiters_locked() {
    if (completed < wake_at) return false;
    wake_at = kNoWaiter;
    return true;
  }
};

// The task the progress thread runs on a stream and what it knows of it (progress thread only,
// but `small`, which waiters read too).
struct RunningTask {
  std::unique_ptr<Task> task;
  std::unique_ptr<Task> next;  // taken from the queue and prepared (Task::prepare), runs next
  bool started = false;
  // Started on the submitting thread, which handed it off (inline_run.cc): continued without
  // start().
  bool resumed = false;
  uint64_t last_marker = 0;
  uint64_t tag_base = 0;
  uint32_t sequence = 0;  // the running task's collective number on this stream
  std::chrono::steady_clock::time_point start_time;
  std::chrono::steady_clock::time_point last_advance;
  // The running task is one the bounded poll serves (EngineImpl::polls_for); written by the
  // progress thread, read by waiters too.
  std::atomic<bool> small{false};

  // Makes `taken` the task to run, not started yet.
  void take(std::unique_ptr<Task> taken, bool resumed_inline) {
    task = std::move(taken);
    started = false;
    resumed = resumed_inline;
  }
  // Drops the running and the prepared task.
  void drop() {
    task.reset();
    next.reset();
    started = false;
  }
  // A communicating task has started and not finished.
  bool collective_started() const { return task != nullptr && started && task->communicates(); }
};

// Inline execution (inline_run.cc), guarded by the engine's mu_: the submitting thread runs a
// task of the stream (`busy`: the progress thread starts nothing of it meanwhile); a task it
// started but did not finish within its spin waits in `handed_off` for the progress thread,
// which continues it without calling start() again (RunningTask::resumed).
struct InlineState {
  bool busy = false;
  TickClock clock;  // the inline path's clock, read under mu_
  std::unique_ptr<Task> handed_off;
  std::chrono::steady_clock::time_point handed_off_start;
};

class StreamImpl final : public Stream {
 public:
  StreamImpl(EngineImpl& engine, int index, zrt_mem_kind_t kind)
      : engine_(engine), index_(index), kind_(kind) {}

  Status enqueue(std::unique_ptr<Task> task) override;
  Status enqueue_host_function(std::function<Status()> function, const char* name) override;
  Status synchronize() override;
  Status query() override;
  Status wait_event(Event& event) override;
  bool begin_inline(InlineCall* call) override;
  InlineSpin inline_spin(const InlineCall& call) const override {
    const uint64_t now = inline_.clock.read();
    if (now >= call.until) return InlineSpin::kExpired;
    return now >= call.yield_from ? InlineSpin::kYield : InlineSpin::kPause;
  }
  void end_inline(InlineCall& call, zrt_coll_kind_t kind, bool internal, uint64_t bytes_sent,
                  uint64_t bytes_received) override;
  void hand_off_inline(InlineCall& call, std::unique_ptr<Task> task) override;
  int index() const override { return index_; }
  zrt_mem_kind_t mem_kind() const override { return kind_; }
  ProgressEngine& engine() override;

  // Guarded by the engine's mu_.
  std::deque<std::unique_ptr<Task>> queue_;
  StreamTickets tickets_;
  bool failed_ = false;
  Status error_;
  bool destroyed_ = false;
  bool released_ = false;  // destroyed, and the progress thread has let go of it

  RunningTask running_;  // progress thread
  StreamResources resources_;
  InlineState inline_;  // guarded by the engine's mu_

 private:
  EngineImpl& engine_;
  const int index_;
  const zrt_mem_kind_t kind_;
};

class EventImpl final : public Event {
 public:
  explicit EventImpl(EngineImpl& engine) : engine_(engine) {}
  Status record(Stream& stream) override;
  Status query() override;
  Status synchronize() override;
  ProgressEngine& engine() override;

  // Guarded by the engine's mu_: the recorded point (stream, number of tasks before it).
  std::shared_ptr<StreamImpl> stream_;
  uint64_t ticket_ = 0;

 private:
  EngineImpl& engine_;
};

// The engine's streams (guarded by its mu_).
struct StreamSet {
  std::vector<std::shared_ptr<StreamImpl>> live;
  std::vector<std::shared_ptr<StreamImpl>> retired;  // destroyed, resources to free
  int next_index = 0;
  uint64_t version = 0;  // bumped when `live` or `retired` change
};

// The engine's first failure (guarded by its mu_).
struct EngineFailure {
  bool failed = false;
  Status error;
  bool cancel_needed = false;  // the progress thread has yet to cancel the transport's operations
};

// The progress thread and the eventfd that wakes it.
struct ProgressThread {
  std::thread handle;
  bool started = false;
  int wake_fd = -1;
};

// The flight recorder's dumps to files (trace_dump.h).
struct TraceDumps {
  explicit TraceDumps(int instance) : instance(instance) {}
  // The engine's creation number in this process, which names the trace file.
  const int instance;
  bool registered = false;  // a trace source (register_trace_source), dumped on a signal
  std::atomic<bool> failure_dumped{false};
};

// What this rank hears from and tells its peers besides the tasks' messages (progress thread):
// the verdicts of peers that failed (peer_verdicts.h) and the beacons (peer_beacons.h), which
// stop once the engine failed.
struct PeerWatch {
  PeerVerdicts verdicts;
  PeerBeacons beacons;
  // A peer's verdict waiting until this rank starts the collective it is about (see
  // peer_verdicts.h).
  bool verdict_pending = false;
  PeerVerdicts::Verdict verdict;
  std::chrono::steady_clock::time_point verdict_time;
};

// Staging scratch (progress thread): a stream takes a kStreamScratchBytes buffer from the pool
// (or a new one) at its first collective after being idle and gives it back when idle again.
class ScratchPool {
 public:
  // An idle buffer, else a new one registered with `transport` (for stream `stream_index`).
  Status take(Transport& transport, int stream_index, void** scratch);
  void give_back(void* scratch) { idle_.push_back(scratch); }
  void free_all(Transport& transport);  // the idle buffers, after the thread stopped

 private:
  std::vector<void*> idle_;
  size_t allocated_ = 0;  // buffers that exist (idle or held)
};

// How the progress thread waits for work (progress thread only; see EngineImpl::run). While it
// keeps finding work it yields its core every kYieldInterval. In a quiet spell while a small
// collective is in flight, or just after one ended, it polls, yielding each turn, before it
// sleeps (the bounded poll, EngineOptions::busy_poll_us).
class BoundedPoll {
 public:
  explicit BoundedPoll(std::chrono::microseconds busy_poll)
      : busy_poll_(busy_poll), bound_(busy_poll) {}

  bool on() const { return busy_poll_.count() > 0; }
  void start(std::chrono::steady_clock::time_point now) { last_yield_ = now; }
  // A turn moved something: ends the quiet spell, adapting the bound, and yields when due.
  void worked();
  // A quiet turn (`in_flight`: a small collective is): whether to poll again rather than sleep.
  bool poll_again(std::chrono::steady_clock::time_point now, bool in_flight);
  // The thread is about to sleep.
  void before_sleep(bool in_flight);
  // A small communicating task finished: the poll goes on that long after it too.
  void collective_ended(std::chrono::steady_clock::time_point now) { last_collective_end_ = now; }

 private:
  const std::chrono::microseconds busy_poll_;
  // The in-flight poll's bound adapts: a spell in which the thread gave up polling and slept,
  // only for the peer to come soon after, doubles it (up to kAdaptivePollMax); a spell that
  // outlasts twice that (a peer late by its own work) sets it back to busy_poll_us. Peers of
  // back-to-back small collectives otherwise fall into a cascade: one sleeps (50 us and the
  // timer's slack), the other's poll ends before it returns and it sleeps too, and so on each
  // time: queued 8-byte all-reduces took many times longer than with the longer poll (measured:
  // docs/ARCHITECTURE.md#measured-costs).
  std::chrono::microseconds bound_;
  bool polling_ = false;  // in the bounded poll, since since_
  bool slept_in_spell_ = false;
  std::chrono::steady_clock::time_point since_;
  std::chrono::steady_clock::time_point last_collective_end_;
  std::chrono::steady_clock::time_point last_yield_;
};

class EngineImpl final : public ProgressEngine, public TraceSource {
 public:
  EngineImpl(Transport& transport, const EngineOptions& options);
  ~EngineImpl() override;

  Status init();  // creates the wake fd and starts the thread

  // Runs `task` on the calling thread when its stream is idle and the task runs_inline
  // (inline_run.cc): true when it took the task (completed, or handed to the progress thread),
  // false when the caller must enqueue it as usual (then `task` is untouched).
  bool run_inline(StreamImpl& stream, std::unique_ptr<Task>& task);
  // Its parts, which task-less inline collectives use too (Stream::begin_inline): the claim
  // (`task`: the task to run, whose runs_inline decides; null: the one-shot arena must be
  // mapped), its end once completed, and the hand-off of what is left to the progress thread.
  bool begin_inline(StreamImpl& stream, const Task* task, InlineCall* call);
  void end_inline(StreamImpl& stream, InlineCall& call, zrt_coll_kind_t kind, bool internal,
                  uint64_t bytes_sent, uint64_t bytes_received);
  void hand_off_inline(StreamImpl& stream, InlineCall& call, std::unique_ptr<Task> task);
  // Whether `task` ends within a small collective's time once its peers are there: it moves
  // its data through mapped memory, or it communicates at most kInlineWaitMaxBytes.
  bool ends_soon(const Task& task) const;

  Status create_stream(zrt_mem_kind_t kind, Stream** stream) override;
  Status destroy_stream(Stream* stream) override;
  Status create_event(Event** event) override;
  Status destroy_event(Event* event) override;
  void abort(const Status& reason) override;
  Status error() const override;
  CommCounters& counters() override { return counters_; }
  FlightRecorder& recorder() override { return recorder_; }
  // bench_breakdown turns it on (phase_clock.h); the engine only adds to it.
  PhaseClock& phase_clock() { return phase_clock_; }
  Status dump_trace(const std::string& dir, const std::string& reason, std::string* path) override;
  void dump_on_signal(const std::string& reason) override;
  Transport& transport() override { return transport_; }
  const EngineOptions& options() const override { return options_; }
  Status shutdown() override;

  // For streams and events.
  std::mutex& mutex() const { return mu_; }
  std::condition_variable& done_cv() { return done_cv_; }
  void wake();
  std::shared_ptr<StreamImpl> shared_stream(StreamImpl* stream);
  // Status of the point (stream, ticket) under mu_: ok, ZRT_IN_PROGRESS or the stream's error.
  static Status point_status_locked(const StreamImpl& stream, uint64_t ticket);
  // Blocks until point_status_locked(stream, ticket) is not ZRT_IN_PROGRESS.
  Status wait_point(const std::shared_ptr<StreamImpl>& stream, uint64_t ticket);
  bool accepting_locked() const { return !stopping_; }

 private:
  using Streams = std::vector<std::shared_ptr<StreamImpl>>;
  // run()'s state across its turns.
  struct LoopState {
    Streams active;   // the live streams when last looked at
    Streams retired;  // destroyed streams whose resources are still to free
    uint64_t seen_version = std::numeric_limits<uint64_t>::max();
    bool transport_failed = false;  // health() failed (reported once; the engine stays failed)
    bool transport_due = false;     // drive the transport on the next turn whatever runs
    std::chrono::steady_clock::time_point last_transport_progress{};
    std::chrono::milliseconds beacon_due{0};  // until the next beacons (PeerBeacons::tick)
  };
  // What a turn of run() found at its start (under mu_), and whether it moved anything.
  struct Turn {
    bool advanced = false;
    bool cancel = false;  // cancel every transport operation, for cancel_reason
    Status cancel_reason;
    bool exit_now = false;
    bool engine_failed = false;
    bool memory_only = false;  // every running task moves its data through mapped memory
  };

  // The progress thread's loop (progress_engine.cc's top comment) and its phases.
  void run();
  void start_peer_watch();
  Turn begin_turn(LoopState& loop);
  bool take_next_task_locked(StreamImpl& stream, bool* advanced);
  void cancel_tasks(const Streams& active, const Status& reason);
  void release_retired(Streams& retired);
  bool drive_transport(LoopState& loop, bool memory_only);
  bool drive_tasks(const Streams& active, PhaseMark& clock);
  bool drive_task(StreamImpl& stream, PhaseMark& clock);
  void fail_task(StreamImpl& stream, Task& task, const Status& status);
  bool watch_peers(LoopState& loop, bool engine_failed);
  bool poll_before_sleep(const Streams& active, PhaseMark& clock);
  void sleep_until_work(LoopState& loop, bool engine_failed, PhaseMark& clock);
  int64_t task_sleep_bound_us(const Streams& active, int* sleep_ms) const;
  void sleep_on_fds(const Streams& active, int64_t sleep_us, PhaseMark& clock);
  void end_loop(const Streams& active);

  void fail_engine(const Status& reason);  // any thread
  void fail_stream_locked(StreamImpl& stream, const Status& reason);
  void finish_task(StreamImpl& stream);     // progress thread
  Status start_task(StreamImpl& stream);    // progress thread
  Status prepare_next(StreamImpl& stream);  // progress thread
  // Whether a communicating task has started and not finished: then the thread polls a while
  // before it sleeps (EngineOptions::busy_poll_us).
  static bool collective_in_flight(const Streams& streams);
  // The same, among the collectives of at most kBusyPollMaxBytes, the only ones the bounded
  // poll serves: a large collective's notifications come a chunk's copy apart, each wake-up is
  // small beside it, and a thread polling through all of it would only take the core from the
  // framework's threads (and, on a loaded host, its fair share from its own later turns).
  static bool small_collective_in_flight(const Streams& streams);
  // Whether some task runs and every running one moves its data through mapped memory only
  // (Task::runs_inline), with no prepared task behind it: the transport has nothing of theirs.
  // Under mu_ (InlineState::busy).
  static bool memory_tasks_only(const Streams& streams);
  bool polls_for(const Task& task) const;
  // run_inline's look at a stream with tasks pending (under mu_, held by `lock`, which it may
  // release while it spins or sleeps): whether to look again.
  struct InlineWait {
    std::chrono::steady_clock::time_point until;  // the bound, from the last completion seen
    uint64_t completed = 0;                       // the stream's tickets_.completed then
  };
  bool wait_for_idle_locked(StreamImpl& stream, std::unique_lock<std::mutex>& lock, int look,
                            InlineWait* wait);
  bool check_timeouts(const Streams& streams, std::chrono::steady_clock::time_point now,
                      int* sleep_ms);
  void release_resources(StreamImpl& stream);  // progress thread
  // Staging (progress thread): a stream takes a scratch from the pool (or allocates one) at its
  // first collective after being idle and gives it back when idle again; its window inbox, which
  // its left neighbour has mapped, stays with it until the stream goes.
  Status acquire_staging(StreamImpl& stream);
  void return_scratch(StreamImpl& stream);
  TaskContext context_for(StreamImpl& stream, uint64_t tag_base, uint32_t sequence);
  bool verdict_due(const Streams& streams) const;
  // This rank failed because a peer did (`failure`, ZRT_REMOTE_ERROR, in collective `sequence`
  // of `stream`, or -1): a verdict on its way within 50 ms names the cause better and is
  // returned; otherwise every peer is told `failure` (so that a neighbour seeing this rank
  // close names the root, not this rank) and it is returned.
  Status peer_failure_cause(const Status& failure, int stream, uint32_t sequence);

  Transport& transport_;
  const EngineOptions options_;
  CommCounters counters_;
  FlightRecorder recorder_;
  PhaseClock phase_clock_;
  TraceDumps trace_;

  mutable std::mutex mu_;
  std::condition_variable done_cv_;
  StreamSet streams_;                                // guarded by mu_
  std::vector<std::unique_ptr<EventImpl>> events_;  // guarded by mu_
  EngineFailure failure_;                           // guarded by mu_
  bool stopping_ = false;
  bool loop_exited_ = false;  // guarded by mu_: the progress thread touches no stream again
  bool shut_down_ = false;
  ProgressThread thread_;
  ScratchPool scratch_;  // progress thread
  PeerWatch peers_;      // progress thread
  BoundedPoll poll_;     // progress thread
};

}  // namespace zrt
