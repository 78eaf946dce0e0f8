// Inline execution: a small collective that moves its data through memory its peers map
// (Task::runs_inline; collectives/one_shot.h) runs on the thread that submits it, when its
// stream is idle, instead of going through the progress thread. A small collective's time on
// the progress thread is mostly two thread hand-offs (the submitter waking the progress thread,
// then the progress thread waking the waiter: tens of microseconds each on a loaded host,
// bench_breakdown's queue and wake columns); inline, a call whose peers are there finishes
// before the submission returns, and synchronize() finds it complete.
//
// The stream is claimed under the engine's lock (nothing enqueued and not completed, no inline
// run already), which keeps the progress thread off the stream's tasks and resources until the
// claim ends; behind small collectives only, the submission first waits, asleep, for the
// stream to be idle (wait_for_idle_locked). The task's start() and progress() then run on this
// thread for a bounded spin (kInlineSpinFactor x EngineOptions::busy_poll_us, yielding the core
// between looks from its start, where ranks outnumber cores; kInlineSpinFactorCorePerRank x
// busy_poll_us, yielding after the first busy_poll_us, where they do not,
// EngineOptions::core_per_rank); a task still waiting then (a late peer), or failing,
// goes to the progress thread as it stands (InlineState::handed_off), which continues it
// without start(): the engine's timeouts, peer verdicts and failure handling then apply as to
// any task, and a submission never blocks for long, so collectives on several streams submitted
// in different orders on different ranks cannot deadlock. Either way the collective counts one
// sequence number of its stream, as a task the progress thread ran would.
#include <sched.h>

#include <algorithm>
#include <chrono>

#include <fmt/format.h>

#include "lib/core/log.h"
#include "engine/engine_impl.h"

namespace zrt {
namespace {

// Spins of a few hundred nanoseconds before the waiter sleeps: a completion on the progress
// thread comes within them when the peer is there, and a sleep costs a wake-up.
constexpr int kSpinsBeforeSleep = 64;

}  // namespace

void spin_pause() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

void spin_yield() {
  sched_yield();
}

// Small collectives only ahead of the submission (the previous one handed off after a late
// peer, or a barrier): they end within microseconds, and this one then runs inline. Queued
// instead, it would run on the progress thread, which costs a hand-off and a wake-up a call, so
// a submitter ahead of it stays ahead: back-to-back 8-byte all-reduces behind a barrier took
// 2-11 us each for the rest of the run instead of 0.8 us (1 run in 5; measured:
// docs/ARCHITECTURE.md#one-shot-collectives), and the queue held every call the loop issued.
// The wait lasts while the stream completes a task at least every kInlineWaitFactor x
// busy_poll_us; one that runs out (a late peer) is not repeated before a task completes while at
// most kQueuedBehindLateMax tasks are ahead, so a submission waits at most one bound per late
// collective and the queue stays short. After a few spins the waiter
// sleeps until the next completion (StreamTickets::wake_at): the tasks ahead run on the progress
// thread, whose core a yielding waiter would share when ranks outnumber cores.
bool EngineImpl::wait_for_idle_locked(StreamImpl& stream, std::unique_lock<std::mutex>& lock,
                                      int look, InlineWait* wait) {
  StreamTickets& tickets = stream.tickets_;
  if (tickets.completed < tickets.last_slow_ticket) return false;
  if (tickets.completed == tickets.inline_wait_expired_at &&
      tickets.enqueued - tickets.completed <= kQueuedBehindLateMax) {
    return false;
  }
  const bool sleeps = look >= kSpinsBeforeSleep;
  if (look == 0 || tickets.completed != wait->completed) {
    wait->completed = tickets.completed;
    wait->until = std::chrono::steady_clock::now() +
                  std::chrono::microseconds(options_.busy_poll_us * kInlineWaitFactor);
  } else if ((sleeps || look % kInlineSpinsPerClockLook == 0) &&
             std::chrono::steady_clock::now() >= wait->until) {
    tickets.inline_wait_expired_at = tickets.completed;
    return false;
  }
  if (sleeps) {
    tickets.wake_at = std::min(tickets.wake_at, tickets.completed + 1);
    done_cv_.wait_until(lock, wait->until);
  } else {
    lock.unlock();
    spin_pause();
  }
  return true;
}

bool EngineImpl::run_inline(StreamImpl& stream, std::unique_ptr<Task>& task) {
  // Only tasks that move their data through mapped memory run inline: the others skip the lock.
  if (!task->waits_on_memory()) return false;
  InlineCall call;
  call.trace = task->trace_call();
  if (!begin_inline(stream, task.get(), &call)) return false;
  task->trace_ticket = call.trace_ticket;
  TaskContext& context = *call.context;
  bool done = false;
  Status status = task->start(context);
  if (status.is_ok()) {
    status = spin_inline(
        stream, call, [&](bool* finished) { return task->progress(context, finished); }, &done);
  }
  if (status.is_ok() && done) {
    end_inline(stream, call, task->kind(), task->internal(), task->bytes_sent(),
               task->bytes_received());
    ZRT_LOG_TRACE("stream {}: {} done inline", stream.index(), task->describe());
    task.reset();
  } else {
    // The task's progress() reports a failure again (phases keep their first error), now where
    // the engine handles it.
    hand_off_inline(stream, call, std::move(task));
  }
  return true;
}

bool EngineImpl::begin_inline(StreamImpl& stream, const Task* task, InlineCall* call) {
  uint32_t sequence = 0;
  InlineWait wait;
  for (int look = 0;; ++look) {
    std::unique_lock<std::mutex> lock(mu_);
    if (failure_.failed || stopping_ || stream.failed_ || stream.destroyed_ ||
        stream.inline_.busy) {
      return false;
    }
    if (stream.tickets_.enqueued != stream.tickets_.completed) {
      if (!wait_for_idle_locked(stream, lock, look, &wait)) return false;
      continue;
    }
    // Only an idle stream's resources are this thread's to read: the progress thread's else.
    const bool ready =
        task != nullptr ? task->runs_inline(stream.resources_) : stream.resources_.one_shot.ready;
    if (!ready) return false;
    stream.inline_.busy = true;
    ++stream.tickets_.enqueued;
    TickClock& clock = stream.inline_.clock;
    call->trace.stream = stream.index();
    call->start = clock.read();
    call->start_ns = clock.to_ns(call->start);
    const int spin_factor =
        options_.core_per_rank ? kInlineSpinFactorCorePerRank : kInlineSpinFactor;
    call->until = call->start + clock.ticks_in(options_.busy_poll_us * spin_factor * 1000);
    call->yield_from = options_.core_per_rank
                           ? call->start + clock.ticks_in(options_.busy_poll_us * 1000)
                           : call->start;
    call->trace_ticket = recorder_.post(call->trace, call->start_ns);
    sequence = stream.resources_.collective_seq.load(std::memory_order_relaxed);
    break;
  }
  recorder_.started(call->trace_ticket, sequence, call->start_ns);
  call->context.emplace(
      context_for(stream, make_tag_base(false, stream.index(), sequence), sequence));
  return true;
}

void EngineImpl::end_inline(StreamImpl& stream, InlineCall& call, zrt_coll_kind_t kind,
                            bool internal, uint64_t bytes_sent, uint64_t bytes_received) {
  int64_t busy = 0;
  bool notify = false;
  bool wake_thread = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    busy = stream.inline_.clock.duration_ns(call.start, stream.inline_.clock.read());
    stream.inline_.busy = false;
    stream.resources_.collective_seq.fetch_add(1, std::memory_order_relaxed);
    ++stream.tickets_.completed;
    notify = stream.tickets_.take_waiters_locked();
    wake_thread = !stream.queue_.empty();
  }
  if (kind >= 0 && kind < ZRT_COLL_KIND_COUNT) {
    counters_.add(kind, internal, bytes_sent, bytes_received, static_cast<uint64_t>(busy));
  }
  recorder_.finished(call.trace_ticket, true, call.start_ns + busy);
  if (notify) done_cv_.notify_all();
  if (wake_thread) wake();
}

void EngineImpl::hand_off_inline(StreamImpl& stream, InlineCall& call, std::unique_ptr<Task> task) {
  task->trace_ticket = call.trace_ticket;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stream.inline_.busy = false;
    if (!stream.failed_) {
      stream.inline_.handed_off = std::move(task);
      stream.inline_.handed_off_start =
          std::chrono::steady_clock::time_point(std::chrono::nanoseconds(call.start_ns));
    }
  }
  if (task != nullptr) {
    recorder_.finished(call.trace_ticket, false);
    task.reset();  // the stream failed meanwhile: dropped, as its queue was
  }
  wake();
}

}  // namespace zrt
