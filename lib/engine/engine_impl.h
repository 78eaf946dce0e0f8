// The progress engine's concrete classes (engine.h is the contract). One mutex, mu_, guards
// every stream's queue and counters and every event; the progress thread runs tasks without it.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "lib/core/tick_clock.h"
#include "lib/engine/engine.h"
#include "lib/engine/peer_beacons.h"
#include "lib/engine/peer_verdicts.h"
#include "lib/engine/phase_clock.h"
#include "lib/engine/stream_resources.h"
#include "lib/engine/trace_dump.h"

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
// epoll among it): about 100 us on this 2-core host, so at a 20 ms bound a 1.5 s wait used
// 9.5-11.4 ms of CPU (0.7% of a core) and 22 ms under ASan; at 50 ms it uses 4.0-4.4 ms
// (test_small_path's late-peer test). The floor was 1 ms: with more ranks than cores a one-shot
// collective whose peer was descheduled past the submitting thread's spin then paid a whole
// millisecond (a 512 KiB reduce-scatter at 4 ranks: 80 us or 400-800 us, at random).
inline constexpr int64_t kMemoryWaitMinSleepUs = 50;
inline constexpr int kMemoryWaitMaxSleepMs = 50;
inline constexpr int kMemoryWaitSleepDivisor = 8;
// How often the progress thread drives the transport while every running task moves its data
// through mapped memory (EngineImpl::memory_tasks_only).
inline constexpr std::chrono::microseconds kMemoryPathTransportInterval{20};
// The longest the in-flight bounded poll grows to (EngineImpl::run's poll_bound).
inline constexpr std::chrono::microseconds kAdaptivePollMax{1000};
// The submitting thread's spin on an inline task: EngineOptions::busy_poll_us times this, where
// ranks outnumber cores (a peer on this core runs when the spin yields it).
inline constexpr int kInlineSpinFactor = 4;
// The same where every rank has a core of its own (EngineOptions::core_per_rank): 4 ms at the
// default. Another process on the cores (2 busy loops beside 2 bound ranks) deschedules a peer
// for a time slice, milliseconds; a spin that gave up after 200 us handed the call to the
// progress thread, which then waited for a slice of its own, and so did the caller it woke: a
// 256 KiB all-gather took 30-2,478 us (3 runs) against 36-66 with this spin (Open MPI, which
// never stops spinning: 28-77). A rank waiting for a late peer still sleeps after it.
inline constexpr int kInlineSpinFactorCorePerRank = 80;
// How long a submission waits, asleep, for its stream to complete the next of the small tasks
// ahead of it (inline_run.cc): EngineOptions::busy_poll_us times this. Queued 8-byte
// all-reduces complete on the progress thread 27-142 us apart (10th-90th percentile) under
// AddressSanitizer with ranks sharing 2 cores, up to 330 us: a bound at the spin's 200 us ran
// out every few hundred and the loop queued again.
inline constexpr int kInlineWaitFactor = 20;
// After a wait for idle ran out (a late peer), the submissions that follow queue without
// waiting until the stream completes a task, but only this many: beyond, each waits again. A
// submitter that queued without bound ran ahead of its own progress thread, with which it shares
// a core when ranks are bound: 8-byte all-reduces queued by the hundred thousand and ran at
// 1.5-5 us each for the rest of the loop instead of 0.5 (1 run in 5).
inline constexpr uint64_t kQueuedBehindLateMax = 16;
uint64_t make_tag_base(bool p2p, int stream_index, uint32_t sequence);

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
    const uint64_t now = clock_.read();
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
  uint64_t enqueued_ = 0;   // tasks ever accepted
  uint64_t completed_ = 0;  // tasks finished successfully, in order
  // The ticket of the last task queued that may take long (not EngineImpl::ends_soon): once
  // completed_ reaches it, whatever is pending ends within a small collective's time, and a
  // submission that would run inline may wait for it (inline_run.cc).
  uint64_t last_slow_ticket_ = 0;
  // completed_ when such a wait last ran out (a late peer holds the stream): no submission
  // waits again before a task completes.
  uint64_t inline_wait_expired_at_ = kNoWaiter;
  // The lowest ticket a waiter sleeps on (wait_point): a completion wakes the waiters only when
  // it reaches it, not on every task, so a rank that queues many small collectives and then
  // synchronizes does not pay a thread switch per collective (8-byte all-reduces queued back to
  // back took 21 us each, 1.4 us inline: the progress thread woke the waiter after each).
  uint64_t wake_at_ = kNoWaiter;
  static constexpr uint64_t kNoWaiter = ~uint64_t{0};
  // Whether completed_ now reaches a waiter's ticket; if so the waiters wake and re-register.
  bool take_waiters_locked() {
    if (completed_ < wake_at_) return false;
    wake_at_ = kNoWaiter;
    return true;
  }
  bool failed_ = false;
  Status error_;
  bool destroyed_ = false;
  bool released_ = false;  // destroyed, and the progress thread has let go of it

  // Progress thread only.
  std::unique_ptr<Task> running_;
  std::unique_ptr<Task> next_;  // taken from queue_ and prepared (Task::prepare), runs next
  bool started_ = false;
  uint64_t last_marker_ = 0;
  uint64_t tag_base_ = 0;
  uint32_t sequence_ = 0;  // the running task's collective number on this stream
  std::chrono::steady_clock::time_point start_time_;
  std::chrono::steady_clock::time_point last_advance_;
  // The running task is one the bounded poll serves (EngineImpl::polls_for); written by the
  // progress thread, read by waiters too.
  std::atomic<bool> running_small_{false};
  StreamResources resources_;

  // Inline execution (inline_run.cc), guarded by the engine's mu_: the submitting thread runs a
  // task of this stream (the progress thread starts nothing of it meanwhile); a task it started
  // but did not finish within its spin waits in handed_off_ for the progress thread, which
  // continues it without calling start() again (resumed_, progress thread only).
  bool inline_busy_ = false;
  // The inline path's clock (inline_run.cc), read under mu_.
  TickClock clock_;
  std::unique_ptr<Task> handed_off_;
  std::chrono::steady_clock::time_point handed_off_start_;
  bool resumed_ = false;

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
  void run();
  void fail_engine(const Status& reason);  // any thread
  void fail_stream_locked(StreamImpl& stream, const Status& reason);
  void finish_task(StreamImpl& stream);     // progress thread
  Status start_task(StreamImpl& stream);    // progress thread
  Status prepare_next(StreamImpl& stream);  // progress thread
  // Whether a communicating task has started and not finished: then the thread polls a while
  // before it sleeps (EngineOptions::busy_poll_us).
  static bool collective_in_flight(const std::vector<std::shared_ptr<StreamImpl>>& streams);
  // The same, among the collectives of at most kBusyPollMaxBytes, the only ones the bounded
  // poll serves: a large collective's notifications come a chunk's copy apart, each wake-up is
  // small beside it, and a thread polling through all of it would only take the core from the
  // framework's threads (and, on a loaded host, its fair share from its own later turns).
  static bool small_collective_in_flight(const std::vector<std::shared_ptr<StreamImpl>>& streams);
  // Whether some task runs and every running one moves its data through mapped memory only
  // (Task::runs_inline), with no prepared task behind it: the transport has nothing of theirs.
  // Under mu_ (inline_busy_).
  static bool memory_tasks_only(const std::vector<std::shared_ptr<StreamImpl>>& streams);
  bool polls_for(const Task& task) const;
  // run_inline's look at a stream with tasks pending (under mu_, held by `lock`, which it may
  // release while it spins or sleeps): whether to look again.
  struct InlineWait {
    std::chrono::steady_clock::time_point until;  // the bound, from the last completion seen
    uint64_t completed = 0;                       // the stream's completed_ then
  };
  bool wait_for_idle_locked(StreamImpl& stream, std::unique_lock<std::mutex>& lock, int look,
                            InlineWait* wait);
  bool check_timeouts(const std::vector<std::shared_ptr<StreamImpl>>& streams,
                      std::chrono::steady_clock::time_point now, int* sleep_ms);
  void release_resources(StreamImpl& stream);  // progress thread
  // Staging (progress thread): a stream takes a scratch from the pool (or allocates one) at its
  // first collective after being idle and gives it back when idle again; its window inbox, which
  // its left neighbour has mapped, stays with it until the stream goes.
  Status acquire_staging(StreamImpl& stream);
  void return_scratch(StreamImpl& stream);
  void free_scratch_pool();  // after the thread stopped
  TaskContext context_for(StreamImpl& stream, uint64_t tag_base, uint32_t sequence);

  Transport& transport_;
  const EngineOptions options_;
  CommCounters counters_;
  FlightRecorder recorder_;
  PhaseClock phase_clock_;
  const int instance_;  // creation number in this process, names the trace file
  bool trace_registered_ = false;
  std::atomic<bool> failure_dumped_{false};

  mutable std::mutex mu_;
  std::condition_variable done_cv_;
  std::vector<std::shared_ptr<StreamImpl>> streams_;  // live streams, guarded by mu_
  std::vector<std::shared_ptr<StreamImpl>> retired_;  // destroyed, resources to free (mu_)
  std::vector<std::unique_ptr<EventImpl>> events_;    // guarded by mu_
  int next_stream_index_ = 0;
  uint64_t streams_version_ = 0;  // bumped when streams_ or retired_ change
  bool failed_ = false;           // guarded by mu_
  Status error_;                  // guarded by mu_
  bool cancel_needed_ = false;
  bool stopping_ = false;
  bool loop_exited_ = false;  // guarded by mu_: the progress thread touches no stream again
  bool thread_started_ = false;
  bool shut_down_ = false;
  int wake_fd_ = -1;
  std::vector<void*> free_scratch_;  // progress thread: idle kStreamScratchBytes buffers
  size_t scratch_allocated_ = 0;     // scratch buffers that exist (idle or held)
  PeerVerdicts verdicts_;            // progress thread
  PeerBeacons beacons_;              // progress thread; stops once the engine failed
  // A peer's verdict waiting until this rank starts the collective it is about (progress
  // thread; see peer_verdicts.h).
  bool verdict_pending_ = false;
  PeerVerdicts::Verdict verdict_;
  std::chrono::steady_clock::time_point verdict_time_;
  // When the last communicating task finished (progress thread): the bounded poll goes on
  // that long after it too.
  std::chrono::steady_clock::time_point last_collective_end_;
  bool verdict_due(const std::vector<std::shared_ptr<StreamImpl>>& streams) const;
  // This rank failed because a peer did (`failure`, ZRT_REMOTE_ERROR, in collective `sequence`
  // of `stream`, or -1): a verdict on its way within 50 ms names the cause better and is
  // returned; otherwise every peer is told `failure` (so that a neighbour seeing this rank
  // close names the root, not this rank) and it is returned.
  Status peer_failure_cause(const Status& failure, int stream, uint32_t sequence);
  std::thread thread_;
};

}  // namespace zrt
