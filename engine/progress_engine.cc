// The progress thread.
//
// One thread per communicator owns the transport once the engine is started. Each turn of its
// loop (1) moves the head task of every idle stream into "running", (2) drives the transport
// once, (3) starts or advances every running task, one per stream, so that the heads of
// different streams overlap while each stream stays in order, and (4) when nothing moved (no
// transport completion, no task progress marker changed, nothing started or finished), checks
// the no-progress timeouts, arms the transport and sleeps in poll() on the transport's event fd
// and the engine's wake eventfd; while a collective is in flight it first polls for up to
// EngineOptions::busy_poll_us, yielding each turn (the bounded poll, BoundedPoll). Submitters ring
// the eventfd after queuing, so a submission racing with the sleep is never lost. While it keeps
// finding work, the thread yields its core every kYieldInterval: the framework's threads share the
// cores with it, and Linux's EEVDF lets a busy thread run out its slice (0.75 ms or more) before a
// thread waking from a wait gets the core, so a training thread returning from a kernel wait would
// otherwise lose up to a slice each time (it shows in bench_overlap's step / max(compute, comm)
// on 2 cores; measured: docs/ARCHITECTURE.md#measured-costs). Host threads waiting for a point
// of a stream block on a condition variable that the thread notifies whenever a task finishes or
// a stream fails.
//
// Failures: a local task (host function, event wait) that fails fails only its stream. A
// communicating task that fails, times out, or a transport health() error fails the engine:
// the thread cancels every outstanding transport operation (so no completion written by the
// transport can outlive its task), then drops every task; every stream keeps the first cause.
#include <poll.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <limits>

#include <fmt/format.h>

#include "lib/core/dtype.h"
#include "lib/core/log.h"
#include "lib/core/settings.h"
#include "engine/engine_impl.h"
#include "engine/local_tasks.h"
#include "engine/silent_peers.h"
#include "transports/transport.h"

namespace zrt {

uint64_t make_tag_base(bool p2p, int stream_index, uint32_t sequence) {
  const uint64_t stream_bits = static_cast<uint64_t>(stream_index) & (kMaxLiveStreams - 1);
  const uint64_t sequence_bits = sequence & ((uint64_t{1} << kSequenceBits) - 1);
  uint64_t tag =
      (stream_bits << (kTaskTagBits + kSequenceBits + 1)) | (sequence_bits << kTaskTagBits);
  if (p2p) tag |= uint64_t{1} << (kTagBits - 1);
  return tag;
}

namespace {
std::atomic<int> g_engine_instances{0};
}  // namespace

EngineImpl::EngineImpl(Transport& transport, const EngineOptions& options)
    : transport_(transport),
      options_(options),
      recorder_(static_cast<size_t>(std::max(0, options.trace_depth))),
      trace_(g_engine_instances.fetch_add(1)),
      poll_(std::chrono::microseconds(options.busy_poll_us)) {}

EngineImpl::~EngineImpl() {
  (void)shutdown();
  if (trace_.registered) unregister_trace_source(this);
}

Status EngineImpl::dump_trace(const std::string& dir, const std::string& reason,
                              std::string* path) {
  const std::string& where = dir.empty() ? options_.trace_dir.value_or("") : dir;
  if (where.empty()) {
    return Status::invalid_argument(
        "dump_trace: no directory given and ZRT_TRACE_DIR is unset (name a directory)");
  }
  if (recorder_.depth() == 0) {
    return Status::invalid_usage("dump_trace: the flight recorder is off (ZRT_TRACE_DEPTH=0)");
  }
  TraceHeader header;
  header.rank = options_.rank;
  header.size = options_.size;
  header.instance = trace_.instance;
  header.reason = reason;
  const std::string file = trace_file_path(where, options_.rank, trace_.instance);
  ZRT_RETURN_IF_ERROR(write_trace_file(recorder_, header, file));
  if (path != nullptr) *path = file;
  return Status::ok();
}

void EngineImpl::dump_on_signal(const std::string& reason) {
  std::string path;
  Status status = dump_trace("", reason, &path);
  if (status.is_ok()) {
    ZRT_LOG_WARN("{}: flight recorder written to {}", reason, path);
  } else {
    ZRT_LOG_WARN("{}: {}", reason, status.message());
  }
}

Status EngineImpl::init() {
  if (options_.size < 1 || options_.rank < 0 || options_.rank >= options_.size) {
    return Status::invalid_argument("engine: rank {} is out of range for size {}", options_.rank,
                                    options_.size);
  }
  if (options_.busy_poll_us < 0 || options_.busy_poll_us > kMaxBusyPollMicros) {
    return Status::invalid_argument("engine: busy_poll_us must be 0 to {} (got {})",
                                    kMaxBusyPollMicros, options_.busy_poll_us);
  }
  if (options_.timeout_ms <= 0) {
    return Status::invalid_argument("engine: timeout_ms must be positive (got {})",
                                    options_.timeout_ms);
  }
  if (!options_.trace_dir.value_or("").empty() && recorder_.depth() > 0) {
    std::string error;
    if (!register_trace_source(this, &error)) return Status(ZRT_SYSTEM_ERROR, error);
    trace_.registered = true;
  }
  thread_.wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (thread_.wake_fd < 0) return Status::system_error("engine: eventfd", errno);
  thread_.handle = std::thread([this] { run(); });
  thread_.started = true;
  return Status::ok();
}

void EngineImpl::wake() {
  const uint64_t one = 1;
  // EAGAIN means the counter is already non-zero: the thread will wake anyway.
  ssize_t written = ::write(thread_.wake_fd, &one, sizeof(one));
  (void)written;
}

Status EngineImpl::create_stream(zrt_mem_kind_t kind, Stream** stream) {
  if (stream == nullptr) return Status::invalid_argument("create_stream: stream is NULL");
  if (kind != ZRT_MEM_HOST) {
    if (kind == ZRT_MEM_CUDA) {
      return Status(ZRT_UNSUPPORTED,
                    "create_stream: memory kind cuda is not served by the host progress engine "
                    "(this build has no CUDA stream support)");
    }
    return Status::invalid_argument("create_stream: unknown memory kind {}",
                                    static_cast<int>(kind));
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (stopping_) return Status::invalid_usage("create_stream: the progress engine was shut down");
  const int index = streams_.next_index;
  for (const auto& live : streams_.live) {
    if ((live->index() & (kMaxLiveStreams - 1)) == (index & (kMaxLiveStreams - 1))) {
      return Status::invalid_usage(
          "create_stream: a communicator holds at most {} live streams (the documented cap, set "
          "by the stream bits of message tags); destroy a stream first",
          kMaxLiveStreams);
    }
  }
  auto created = std::make_shared<StreamImpl>(*this, index, kind);
  if (failure_.failed) {
    created->failed_ = true;
    created->error_ = failure_.error;
  }
  ++streams_.next_index;
  streams_.live.push_back(created);
  ++streams_.version;
  *stream = created.get();
  return Status::ok();
}

std::shared_ptr<StreamImpl> EngineImpl::shared_stream(StreamImpl* stream) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& live : streams_.live) {
    if (live.get() == stream) return live;
  }
  return nullptr;
}

Status EngineImpl::destroy_stream(Stream* stream) {
  auto* impl = dynamic_cast<StreamImpl*>(stream);
  if (impl == nullptr || &impl->engine() != this) {
    return Status::invalid_argument("destroy_stream: the stream belongs to another engine");
  }
  std::shared_ptr<StreamImpl> shared = shared_stream(impl);
  if (shared == nullptr)
    return Status::invalid_argument("destroy_stream: stream already destroyed");
  Status status = shared->synchronize();
  {
    std::lock_guard<std::mutex> lock(mu_);
    shared->destroyed_ = true;
    shared->queue_.clear();
    Streams& live = streams_.live;
    live.erase(std::remove(live.begin(), live.end(), shared), live.end());
    streams_.retired.push_back(shared);
    ++streams_.version;
  }
  wake();
  // A failed stream's synchronize returns at once, while the progress thread may still be in
  // the middle of the stream's task: a partition's copy into a bucket, whose buffers the caller
  // frees next (a survivor segfaulted after a peer's death). The stream is the caller's to
  // forget once the thread has passed the top of its loop, where it lets go of it.
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [&] { return shared->released_ || loop_exited_ || !thread_.started; });
  return status;
}

Status EngineImpl::create_event(Event** event) {
  if (event == nullptr) return Status::invalid_argument("create_event: event is NULL");
  auto created = std::make_unique<EventImpl>(*this);
  std::lock_guard<std::mutex> lock(mu_);
  *event = created.get();
  events_.push_back(std::move(created));
  return Status::ok();
}

Status EngineImpl::destroy_event(Event* event) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = std::find_if(events_.begin(), events_.end(),
                         [event](const auto& owned) { return owned.get() == event; });
  if (it == events_.end()) return Status::invalid_argument("destroy_event: unknown event");
  events_.erase(it);
  return Status::ok();
}

Status EngineImpl::point_status_locked(const StreamImpl& stream, uint64_t ticket) {
  if (stream.tickets_.completed >= ticket) {
    // Reached before any failure; a failure afterwards is still the stream's sticky error.
    if (stream.failed_) return stream.error_;
    return Status::ok();
  }
  if (stream.failed_) return stream.error_;
  return Status(ZRT_IN_PROGRESS, fmt::format("stream {} has work in progress", stream.index()));
}

Status EngineImpl::wait_point(const std::shared_ptr<StreamImpl>& stream, uint64_t ticket) {
  if (stream == nullptr) return Status::ok();
  // The waiter's side of the bounded poll: a small collective ends within microseconds, and a
  // condition-variable sleep would add the waiter's own wake-up to it. It yields between looks,
  // and only while the stream's last task is a small collective that the engine is running.
  const auto poll_until =
      std::chrono::steady_clock::now() + std::chrono::microseconds(options_.busy_poll_us);
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    Status status = point_status_locked(*stream, ticket);
    if (status.code() != ZRT_IN_PROGRESS) return status;
    if (options_.busy_poll_us > 0 && stream->queue_.empty() &&
        stream->running_.small.load(std::memory_order_relaxed) &&
        std::chrono::steady_clock::now() < poll_until) {
      lock.unlock();
      sched_yield();
      lock.lock();
      continue;
    }
    // Bounded sleeps: progress is guaranteed by the tasks' own no-progress timeouts; the bound
    // only keeps a lost notification from stalling a waiter for long.
    stream->tickets_.wake_at = std::min(stream->tickets_.wake_at, ticket);
    done_cv_.wait_for(lock, std::chrono::milliseconds(200));
  }
}

void EngineImpl::fail_stream_locked(StreamImpl& stream, const Status& reason) {
  if (!stream.failed_) {
    stream.failed_ = true;
    stream.error_ = reason;
  }
  stream.queue_.clear();
  stream.inline_.handed_off.reset();  // started inline: it posted no transport operation
}

void EngineImpl::fail_engine(const Status& reason) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (failure_.failed) return;
    failure_.failed = true;
    failure_.error = reason;
    failure_.cancel_needed = true;
    for (const auto& stream : streams_.live) fail_stream_locked(*stream, reason);
  }
  ZRT_LOG_WARN("communicator failed: {}", reason.message());
  done_cv_.notify_all();
  wake();
  if (trace_.registered && !trace_.failure_dumped.exchange(true)) {
    std::string path;
    Status dumped = dump_trace("", reason.message(), &path);
    if (dumped.is_ok()) {
      ZRT_LOG_WARN("flight recorder written to {}", path);
    } else {
      ZRT_LOG_WARN("{}", dumped.message());
    }
  }
}

void EngineImpl::abort(const Status& reason) {
  fail_engine(reason);
}

Status EngineImpl::error() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failure_.failed ? failure_.error : Status::ok();
}

Status EngineImpl::start_task(StreamImpl& stream) {
  Task& task = *stream.running_.task;
  StreamResources& resources = stream.resources_;
  stream.running_.tag_base = 0;
  stream.running_.sequence = 0;
  if (task.communicates()) {
    const int peer = task.p2p_peer();
    if (peer >= 0) {
      if (peer >= options_.size) {
        return Status::invalid_argument("{}: peer {} >= size {}", task.describe(), peer,
                                        options_.size);
      }
      if (resources.p2p_send_seq.empty()) {
        resources.p2p_send_seq.assign(options_.size, 0);
        resources.p2p_recv_seq.assign(options_.size, 0);
      }
      uint32_t& sequence =
          task.p2p_is_send() ? resources.p2p_send_seq[peer] : resources.p2p_recv_seq[peer];
      stream.running_.tag_base = make_tag_base(true, stream.index(), sequence++);
    } else {
      stream.running_.sequence = resources.collective_seq++;
      stream.running_.tag_base = make_tag_base(false, stream.index(), stream.running_.sequence);
      ZRT_RETURN_IF_ERROR(acquire_staging(stream));
    }
  }
  stream.running_.start_time = std::chrono::steady_clock::now();
  stream.running_.small = task.communicates() && polls_for(task);
  stream.running_.last_advance = stream.running_.start_time;
  stream.running_.last_marker = task.progress_count();
  stream.running_.started = true;
  if (stream.running_.resumed) {
    // Started on the submitting thread (inline_run.cc), which recorded its start.
    stream.running_.start_time = stream.inline_.handed_off_start;
    return Status::ok();
  }
  recorder_.started(task.trace_ticket, stream.running_.sequence);
  TaskContext context = context_for(stream, stream.running_.tag_base, stream.running_.sequence);
  return task.start(context);
}

// Takes the next task of the stream out of the queue and prepares it, when it is a collective
// that wants to (the running one, being a collective too, has already drawn its sequence
// number, so the next one's is collective_seq). Nothing else can run between the two on this
// stream, so start_task later gives it the same tag_base and sequence.
Status EngineImpl::prepare_next(StreamImpl& stream) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stream.failed_ || stream.queue_.empty()) return Status::ok();
    Task& front = *stream.queue_.front();
    if (!front.communicates() || front.p2p_peer() >= 0 || !front.wants_prepare()) {
      return Status::ok();
    }
    stream.running_.next = std::move(stream.queue_.front());
    stream.queue_.pop_front();
  }
  const uint32_t sequence = stream.resources_.collective_seq;
  TaskContext context =
      context_for(stream, make_tag_base(false, stream.index(), sequence), sequence);
  Task& next = *stream.running_.next;
  return next.prepare(context).with_context(next.describe() + " (prepared)");
}

void EngineImpl::finish_task(StreamImpl& stream) {
  Task& task = *stream.running_.task;
  const auto now = std::chrono::steady_clock::now();
  const zrt_coll_kind_t kind = task.kind();
  if (kind >= 0 && kind < ZRT_COLL_KIND_COUNT) {
    const auto busy =
        std::chrono::duration_cast<std::chrono::nanoseconds>(now - stream.running_.start_time)
            .count();
    counters_.add(kind, task.internal(), task.bytes_sent(), task.bytes_received(),
                  static_cast<uint64_t>(busy));
  }
  if (task.check_messages_sent() > 0) {
    counters_.add_check(task.check_messages_sent(), task.check_bytes_sent());
  }
  recorder_.finished(task.trace_ticket, true);
  if (task.communicates() && stream.running_.small) poll_.collective_ended(now);
  ZRT_LOG_TRACE("stream {}: {} done", stream.index(), task.describe());
  stream.running_.task.reset();
  stream.running_.started = false;
  bool idle = false;
  bool notify = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++stream.tickets_.completed;
    idle = stream.queue_.empty() && stream.running_.next == nullptr;
    notify = stream.tickets_.take_waiters_locked();
  }
  // Every operation of the finished task has completed, so its scratch holds nothing: an idle
  // stream gives it back, and 1000 mostly idle streams share a few.
  if (idle) return_scratch(stream);
  if (notify) done_cv_.notify_all();
}

Status ScratchPool::take(Transport& transport, int stream_index, void** scratch) {
  if (!idle_.empty()) {
    *scratch = idle_.back();
    idle_.pop_back();
    return Status::ok();
  }
  ZRT_RETURN_IF_ERROR(
      transport.alloc_registered(kStreamScratchBytes, scratch)
          .with_context(fmt::format("staging memory of stream {} ({} bytes; {} already held by "
                                    "streams running collectives at once)",
                                    stream_index, kStreamScratchBytes,
                                    allocated_ * kStreamScratchBytes)));
  ++allocated_;
  return Status::ok();
}

void ScratchPool::free_all(Transport& transport) {
  for (void* scratch : idle_) transport.free_registered(scratch);
  idle_.clear();
  allocated_ = 0;
}

Status EngineImpl::acquire_staging(StreamImpl& stream) {
  StreamResources& resources = stream.resources_;
  if (resources.scratch == nullptr) {
    void* scratch = nullptr;
    ZRT_RETURN_IF_ERROR(scratch_.take(transport_, stream.index(), &scratch));
    resources.scratch = scratch;
    resources.scratch_bytes = kStreamScratchBytes;
  }
  // The inbox itself comes at the stream's first window phase (RingWindow::attach): a stream
  // that only ever runs small all-reduces, broadcasts or barriers never holds one.
  resources.windows = options_.peer_windows && options_.size > 1;
  resources.window_slots = options_.window_slots;
  resources.window_slot_bytes = options_.window_slot_bytes;
  return Status::ok();
}

void EngineImpl::return_scratch(StreamImpl& stream) {
  if (stream.resources_.scratch == nullptr) return;
  scratch_.give_back(stream.resources_.scratch);
  stream.resources_.scratch = nullptr;
  stream.resources_.scratch_bytes = 0;
}

void EngineImpl::release_resources(StreamImpl& stream) {
  if (stream.resources_.right_inbox != nullptr) {
    transport_.unmap_peer_registered(stream.resources_.right_inbox);
    stream.resources_.right_inbox = nullptr;
  }
  if (stream.resources_.inbox != nullptr) {
    transport_.free_registered(stream.resources_.inbox);
    stream.resources_.inbox = nullptr;
  }
  stream.resources_.windows = false;
  OneShotArena& arena = stream.resources_.one_shot;
  for (char* mapped : arena.ranks) {
    if (mapped != nullptr && mapped != arena.own) transport_.unmap_peer_registered(mapped);
  }
  arena.ranks.clear();
  for (const std::vector<MappedSource>& sources : arena.sources) {
    for (const MappedSource& source : sources) transport_.unmap_peer_registered(source.local);
  }
  arena.sources.clear();
  arena.ready = false;
  if (arena.own != nullptr) {
    transport_.free_registered(arena.own);
    arena.own = nullptr;
  }
  return_scratch(stream);
}

// Fails the engine for a communicating task that made no progress for the timeout; otherwise
// lowers *sleep_ms to the time left before the nearest deadline. Returns true if it failed.
bool EngineImpl::check_timeouts(const Streams& streams, std::chrono::steady_clock::time_point now,
                                int* sleep_ms) {
  const auto timeout = std::chrono::milliseconds(options_.timeout_ms);
  for (const auto& stream : streams) {
    if (!stream->running_.collective_started()) continue;
    const auto idle = now - stream->running_.last_advance;
    if (idle >= timeout) {
      const Task& task = *stream->running_.task;
      std::string waiting = task.waiting_on();
      // The rank waited on is often a neighbour that waits like this one; the peers that went
      // silent towards everyone are the likely cause, so they come first.
      std::vector<std::chrono::steady_clock::time_point> heard(static_cast<size_t>(options_.size));
      for (int peer = 0; peer < options_.size; ++peer) heard[peer] = transport_.last_heard(peer);
      std::string silent = describe_silent_peers(
          heard, now, options_.rank, silence_threshold(options_.timeout_ms), options_.host_names);
      fail_engine(Status::error(ZRT_TIMEOUT, "{} on stream {} made no progress for {} ms{}{}",
                                task.describe(), stream->index(), options_.timeout_ms,
                                silent.empty() ? "" : "; " + silent,
                                waiting.empty() ? "" : "; waiting on " + waiting));
      return true;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(timeout - idle);
    *sleep_ms = std::min<int>(*sleep_ms, static_cast<int>(left.count()) + 1);
  }
  return false;
}

namespace {
constexpr std::chrono::microseconds kYieldInterval{100};
}  // namespace

void BoundedPoll::worked() {
  if (polling_ && slept_in_spell_) {
    const auto spell = std::chrono::steady_clock::now() - since_;
    bound_ = spell < 2 * kAdaptivePollMax
                 ? std::min<std::chrono::microseconds>(2 * bound_, kAdaptivePollMax)
                 : busy_poll_;
  }
  polling_ = false;
  slept_in_spell_ = false;
  const auto now = std::chrono::steady_clock::now();
  if (now - last_yield_ >= kYieldInterval) {
    sched_yield();
    last_yield_ = now;
  }
}

bool BoundedPoll::poll_again(std::chrono::steady_clock::time_point now, bool in_flight) {
  if (in_flight && !polling_) {
    polling_ = true;
    since_ = now;
  }
  // One poll per quiet spell: after a sleep that brought nothing (a task waiting on memory
  // wakes by timer) the thread sleeps again at once.
  return (in_flight && now - since_ < bound_) || now - last_collective_end_ < busy_poll_;
}

void BoundedPoll::before_sleep(bool in_flight) {
  if (!in_flight) polling_ = false;
  if (polling_) slept_in_spell_ = true;  // the sleep ends this spell's poll
}

bool EngineImpl::collective_in_flight(const Streams& streams) {
  for (const auto& stream : streams) {
    if (stream->running_.collective_started()) return true;
  }
  return false;
}

bool EngineImpl::memory_tasks_only(const Streams& streams) {
  bool any = false;
  for (const auto& stream : streams) {
    const RunningTask& running = stream->running_;
    if (stream->inline_.busy || running.task == nullptr) continue;
    if (running.next != nullptr || !running.task->runs_inline(stream->resources_)) return false;
    any = true;
  }
  return any;
}

bool EngineImpl::small_collective_in_flight(const Streams& streams) {
  for (const auto& stream : streams) {
    if (stream->running_.collective_started() && stream->running_.small) return true;
  }
  return false;
}

namespace {
// A collective's size as nccl-tests and the issue count it: the reduce-scatter's input, the
// all-gather's output, else its buffer.
uint64_t table_bytes(const Task& task, int size) {
  const TraceCall call = task.trace_call();
  const size_t element = call.dtype >= 0 ? dtype_size(static_cast<zrt_dtype_t>(call.dtype)) : 1;
  uint64_t bytes = call.count * std::max<size_t>(element, 1);
  if (call.kind == ZRT_COLL_REDUCE_SCATTER || call.kind == ZRT_COLL_ALL_GATHER) {
    bytes *= static_cast<uint64_t>(size);
  }
  return bytes;
}
}  // namespace

bool EngineImpl::polls_for(const Task& task) const {
  return table_bytes(task, options_.size) <= kBusyPollMaxBytes;
}

bool EngineImpl::ends_soon(const Task& task) const {
  if (task.waits_on_memory()) return true;
  return task.communicates() && table_bytes(task, options_.size) <= kInlineWaitMaxBytes;
}

bool EngineImpl::verdict_due(const Streams& streams) const {
  if (std::chrono::steady_clock::now() - peers_.verdict_time >=
      std::chrono::milliseconds(PeerVerdicts::kHoldMs)) {
    return true;
  }
  const int verdict_stream = peers_.verdict.stream & (kMaxLiveStreams - 1);
  for (const auto& stream : streams) {
    if ((stream->index() & (kMaxLiveStreams - 1)) != verdict_stream) {
      continue;
    }
    // Started that collective (or a later one): its peers' verdict is about this call.
    return stream->resources_.collective_seq > peers_.verdict.sequence;
  }
  return true;  // no such stream here
}

Status EngineImpl::peer_failure_cause(const Status& failure, int stream, uint32_t sequence) {
  // A peer that failed and went (a mismatch it found, a death it saw) told every rank why just
  // before: its verdict names the cause, our error only the peer's end. A moment for it.
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(50);
  while (!peers_.verdict_pending && std::chrono::steady_clock::now() < until) {
    if (peers_.verdicts.poll(&peers_.verdict)) {
      peers_.verdict_pending = true;
    } else if (transport_.progress() == 0) {
      sched_yield();
    }
  }
  if (peers_.verdict_pending) {
    peers_.verdict_pending = false;
    return peers_.verdict.failure;
  }
  // None came: this rank saw the failure first, and tells the others before it closes.
  peers_.verdicts.tell(transport_, failure, stream, sequence);
  return failure;
}

TaskContext EngineImpl::context_for(StreamImpl& stream, uint64_t tag_base, uint32_t sequence) {
  TaskContext context{transport_,         options_.rank,  options_.size, tag_base,
                      &stream.resources_, stream.index(), sequence,      options_.check_order == 1};
  context.fingerprint = options_.fingerprint && options_.check_order != 1;
  return context;
}

// One turn: take the streams' next tasks, cancel (after a failure) or free what destroyed
// streams held, drive the transport and the tasks, hear the peers; then, when nothing moved,
// poll a while or sleep.
void EngineImpl::run() {
  log_set_thread_rank(options_.rank);
  start_peer_watch();
  poll_.start(std::chrono::steady_clock::now());
  LoopState loop;
  for (;;) {
    Turn turn = begin_turn(loop);
    if (turn.cancel) {
      cancel_tasks(loop.active, turn.cancel_reason);
      continue;
    }
    // Only after any cancel: a stream destroyed once the engine failed (its synchronize returned
    // the error at once) may still hold a running task whose transport operations write into
    // the task and the stream's scratch; cancel_all ends them. Freeing first was a
    // use-after-free (AddressSanitizer, dead_peers and abort_release).
    release_retired(loop.retired);
    if (turn.exit_now) break;

    PhaseMark clock(phase_clock_);
    if (drive_transport(loop, turn.memory_only)) turn.advanced = true;
    clock.add(PhaseClock::Part::kTransport);
    if (drive_tasks(loop.active, clock)) turn.advanced = true;
    if (watch_peers(loop, turn.engine_failed)) continue;
    if (turn.advanced) {
      poll_.worked();
      continue;
    }
    if (poll_before_sleep(loop.active, clock)) continue;
    sleep_until_work(loop, turn.engine_failed, clock);
  }
  end_loop(loop.active);
}

void EngineImpl::start_peer_watch() {
  Status posted = peers_.verdicts.post(transport_, options_.rank, options_.size);
  if (posted.is_ok()) {
    posted = peers_.beacons.start(transport_, options_.rank, options_.size, options_.timeout_ms);
  }
  if (!posted.is_ok()) fail_engine(posted);
}

// Under mu_: looks at the streams anew when they changed, takes over a cancel that a failure
// asked for, and gives every idle stream its next task.
EngineImpl::Turn EngineImpl::begin_turn(LoopState& loop) {
  Turn turn;
  std::lock_guard<std::mutex> lock(mu_);
  turn.engine_failed = failure_.failed;
  if (loop.seen_version != streams_.version) {
    loop.active = streams_.live;
    loop.retired.insert(loop.retired.end(), streams_.retired.begin(), streams_.retired.end());
    streams_.retired.clear();
    loop.seen_version = streams_.version;
  }
  if (failure_.cancel_needed) {
    turn.cancel = true;
    failure_.cancel_needed = false;
    turn.cancel_reason = failure_.error;
  }
  bool busy = false;
  for (const auto& stream : loop.active) {
    if (take_next_task_locked(*stream, &turn.advanced)) busy = true;
  }
  if (stopping_ && (!busy || failure_.failed) && !turn.cancel) turn.exit_now = true;
  turn.memory_only = memory_tasks_only(loop.active);
  return turn;
}

// Under mu_: a stream that runs nothing takes the task an inline run handed off, else the one
// prepared, else its queue's head. Returns whether the stream has work.
bool EngineImpl::take_next_task_locked(StreamImpl& stream, bool* advanced) {
  // The submitting thread runs this stream's task (inline_run.cc).
  if (stream.inline_.busy) return true;
  RunningTask& running = stream.running_;
  if (running.task == nullptr && !stream.failed_ && stream.inline_.handed_off != nullptr) {
    running.take(std::move(stream.inline_.handed_off), true);
    *advanced = true;
  }
  if (running.task == nullptr && !stream.failed_ && running.next != nullptr) {
    running.take(std::move(running.next), false);
    *advanced = true;
  }
  if (running.task == nullptr && !stream.failed_ && !stream.queue_.empty()) {
    running.take(std::move(stream.queue_.front()), false);
    stream.queue_.pop_front();
    *advanced = true;
  }
  return running.task != nullptr || running.next != nullptr || !stream.queue_.empty();
}

void EngineImpl::cancel_tasks(const Streams& active, const Status& reason) {
  transport_.cancel_all(reason);
  for (const auto& stream : active) stream->running_.drop();
  done_cv_.notify_all();
}

void EngineImpl::release_retired(Streams& retired) {
  if (retired.empty()) return;
  for (const auto& stream : retired) release_resources(*stream);
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& stream : retired) stream->released_ = true;
  }
  retired.clear();
  done_cv_.notify_all();
}

// Drive the transport, even with nothing running: arm() refuses to sleep while it has events
// pending, and only progress() drains them. While every running task moves its data through
// mapped memory (a one-shot collective, back to back), the transport has nothing of theirs,
// so it is driven every kMemoryPathTransportInterval only (its beacons and verdicts work in
// milliseconds): each progress call is an epoll_wait, 40% of a queued 8-byte all-reduce's
// samples (perf; measured: docs/ARCHITECTURE.md#progress-engine). Returns whether the transport
// completed something.
bool EngineImpl::drive_transport(LoopState& loop, bool memory_only) {
  const auto now = std::chrono::steady_clock::now();
  if (loop.transport_due || !memory_only ||
      now - loop.last_transport_progress >= kMemoryPathTransportInterval) {
    loop.transport_due = false;
    loop.last_transport_progress = now;
    if (transport_.progress() > 0) return true;
  }
  return false;
}

// Starts or advances every running task, one per stream; returns whether any moved.
bool EngineImpl::drive_tasks(const Streams& active, PhaseMark& clock) {
  bool advanced = false;
  for (const auto& stream : active) {
    if (stream->running_.task == nullptr) continue;
    if (drive_task(*stream, clock)) advanced = true;
  }
  return advanced;
}

bool EngineImpl::drive_task(StreamImpl& stream, PhaseMark& clock) {
  RunningTask& running = stream.running_;
  Task& task = *running.task;
  bool advanced = false;
  Status status;
  bool done = false;
  if (!running.started) {
    status = start_task(stream);
    advanced = true;
  }
  if (status.is_ok()) {
    TaskContext context = context_for(stream, running.tag_base, running.sequence);
    status = task.progress(context, &done);
  }
  if (clock.on()) {
    if (task.communicates()) {
      clock.add(PhaseClock::Part::kTask);
    } else {
      clock.skip();
    }
  }
  if (!status.is_ok()) {
    fail_task(stream, task, status);
    return true;
  }
  const uint64_t marker = task.progress_count();
  if (marker != running.last_marker) {
    running.last_marker = marker;
    running.last_advance = std::chrono::steady_clock::now();
    advanced = true;
  }
  if (done) {
    finish_task(stream);
    return true;
  }
  if (running.next == nullptr && task.ready_for_next()) {
    Status prepared = prepare_next(stream);
    if (!prepared.is_ok()) {
      fail_engine(prepared.with_context(fmt::format("stream {}", stream.index())));
      return true;
    }
  }
  return advanced;
}

// A communicating task's failure fails the engine (the peers hear of it, or tell this rank its
// cause); a local task's fails only its stream.
void EngineImpl::fail_task(StreamImpl& stream, Task& task, const Status& status) {
  Status failure =
      status.with_context(fmt::format("{} on stream {}", task.describe(), stream.index()));
  recorder_.finished(task.trace_ticket, false);
  if (task.communicates()) {
    if (task.tell_peers()) {
      peers_.verdicts.tell(transport_, failure, stream.index(), stream.running_.sequence);
    } else if (failure.code() == ZRT_REMOTE_ERROR) {
      failure = peer_failure_cause(failure, stream.index(), stream.running_.sequence);
    }
    fail_engine(failure);  // cancels the transport before any task is dropped
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    fail_stream_locked(stream, failure);
  }
  stream.running_.task.reset();
  stream.running_.started = false;
  done_cv_.notify_all();
}

// After the tasks: a peer's verdict, the transport's health, the beacons. Returns true when
// the engine failed here (the next turn cancels).
bool EngineImpl::watch_peers(LoopState& loop, bool engine_failed) {
  // A verdict is about a later collective than the one running here, which its peers
  // finished, so that one's last completions (delivered with the verdict) count.
  if (!peers_.verdict_pending && peers_.verdicts.poll(&peers_.verdict)) {
    peers_.verdict_pending = true;
    peers_.verdict_time = std::chrono::steady_clock::now();
  }
  if (peers_.verdict_pending && verdict_due(loop.active)) {
    peers_.verdict_pending = false;
    fail_engine(peers_.verdict.failure);
    return true;
  }
  if (!loop.transport_failed) {
    Status health = transport_.health();
    if (!health.is_ok()) {
      loop.transport_failed = true;  // reported once; the engine stays failed
      fail_engine(peer_failure_cause(health, -1, 0));
      return true;
    }
  }
  // A failed engine has cancelled its transport's operations and sends no more beacons.
  if (!engine_failed) {
    loop.beacon_due = peers_.beacons.tick(transport_, std::chrono::steady_clock::now());
  }
  return false;
}

// The bounded poll: a collective in flight waits on its peers' next notification, which
// usually comes within microseconds; a sleep would add a wake-up to each. Yielding every
// turn gives the core to any other runnable thread (more ranks than cores still run), and
// past the bound the thread sleeps as before, so an idle or stalled rank costs nothing.
// Just after a collective ended it polls as long too: small collectives come back to back
// (a layer's gathers, the step's votes), and the next one's enqueue then needs no wake-up.
// Returns whether to take another turn instead of sleeping.
bool EngineImpl::poll_before_sleep(const Streams& active, PhaseMark& clock) {
  if (!poll_.on()) return false;
  const auto now = std::chrono::steady_clock::now();
  const bool in_flight = small_collective_in_flight(active);
  if (!poll_.poll_again(now, in_flight)) return false;
  sched_yield();
  if (in_flight) {
    clock.add(PhaseClock::Part::kPoll);
  } else {
    clock.skip();
  }
  return true;
}

// A quiet turn's end: unless a task timed out or the transport has events pending, sleeps
// until the transport's or the engine's fd wakes the thread, the nearest deadline (a task's
// timeout, the beacons), or a task that waits on memory looks again.
void EngineImpl::sleep_until_work(LoopState& loop, bool engine_failed, PhaseMark& clock) {
  poll_.before_sleep(small_collective_in_flight(loop.active));
  int sleep_ms = 100;  // idle turns also let the transport run its keepalive
  if (!engine_failed) {
    sleep_ms = static_cast<int>(std::min<int64_t>(sleep_ms, loop.beacon_due.count()));
  }
  const int64_t memory_sleep_us = task_sleep_bound_us(loop.active, &sleep_ms);
  if (check_timeouts(loop.active, std::chrono::steady_clock::now(), &sleep_ms)) return;
  if (!transport_.arm()) {
    loop.transport_due = true;  // events are pending: the next turn drains them
    return;
  }
  int64_t sleep_us = int64_t{sleep_ms} * 1000;
  if (memory_sleep_us >= 0) sleep_us = std::min(sleep_us, memory_sleep_us);
  sleep_on_fds(loop.active, sleep_us, clock);
}

// What the running tasks allow the sleep: a foreign event's poll sets *sleep_ms; a task that
// waits on memory bounds the returned microseconds (-1: no task waits on memory).
int64_t EngineImpl::task_sleep_bound_us(const Streams& active, int* sleep_ms) const {
  const auto now = std::chrono::steady_clock::now();
  int64_t memory_sleep_us = -1;  // none: no task waits on memory
  for (const auto& stream : active) {
    const RunningTask& running = stream->running_;
    if (dynamic_cast<const ForeignEventWaitTask*>(running.task.get()) != nullptr) {
      *sleep_ms = kForeignPollMs;  // nothing to sleep on: poll the foreign event
    }
    if (running.task != nullptr && running.started && running.task->polls_memory()) {
      // Peers' stores wake nothing: look again soon, less often the longer the wait.
      const auto waited =
          std::chrono::duration_cast<std::chrono::microseconds>(now - running.last_advance);
      const int64_t interval =
          std::clamp<int64_t>(waited.count() / kMemoryWaitSleepDivisor, kMemoryWaitMinSleepUs,
                              int64_t{kMemoryWaitMaxSleepMs} * 1000);
      memory_sleep_us = memory_sleep_us < 0 ? interval : std::min(memory_sleep_us, interval);
    }
  }
  return memory_sleep_us;
}

void EngineImpl::sleep_on_fds(const Streams& active, int64_t sleep_us, PhaseMark& clock) {
  const timespec sleep_for{static_cast<time_t>(sleep_us / 1000000),
                           static_cast<long>(sleep_us % 1000000) * 1000};
  pollfd fds[2] = {{transport_.event_fd(), POLLIN, 0}, {thread_.wake_fd, POLLIN, 0}};
  const bool timed_sleep = clock.on() && collective_in_flight(active);
  if (timed_sleep) clock.skip();
  const int ready = ::ppoll(fds, 2, &sleep_for, nullptr);
  if (timed_sleep) clock.add(PhaseClock::Part::kSleep);
  if (ready < 0 && errno != EINTR) {
    fail_engine(Status::system_error("progress thread: poll", errno));
    return;
  }
  if (ready > 0 && (fds[1].revents & POLLIN) != 0) {
    uint64_t count = 0;
    ssize_t got = ::read(thread_.wake_fd, &count, sizeof(count));
    (void)got;
  }
}

void EngineImpl::end_loop(const Streams& active) {
  peers_.verdicts.close(transport_);
  peers_.beacons.close(transport_);
  for (const auto& stream : active) {
    stream->running_.task.reset();
    stream->running_.next.reset();
    release_resources(*stream);
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    loop_exited_ = true;
  }
  done_cv_.notify_all();
}

Status EngineImpl::shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shut_down_) return failure_.failed ? failure_.error : Status::ok();
    shut_down_ = true;
    stopping_ = true;
  }
  if (thread_.started) {
    wake();
    thread_.handle.join();
    thread_.started = false;
  }
  // The thread is gone: this thread may touch the transport now.
  Streams streams;
  {
    std::lock_guard<std::mutex> lock(mu_);
    streams = streams_.live;
    streams.insert(streams.end(), streams_.retired.begin(), streams_.retired.end());
    streams_.retired.clear();
    for (const auto& stream : streams_.live) {
      if (!stream->queue_.empty()) {
        fail_stream_locked(*stream, Status::invalid_usage("the progress engine was shut down"));
      }
    }
  }
  for (const auto& stream : streams) release_resources(*stream);
  scratch_.free_all(transport_);
  if (thread_.wake_fd >= 0) {
    ::close(thread_.wake_fd);
    thread_.wake_fd = -1;
  }
  done_cv_.notify_all();
  return error();
}

Status resolve_check_order(int requested, int* resolved) {
  if (requested == 0 || requested == 1) {
    *resolved = requested;
    return Status::ok();
  }
  if (requested != -1) {
    return Status::invalid_argument("check_order must be -1, 0 or 1 (got {})", requested);
  }
  SettingValue value;
  ZRT_RETURN_IF_ERROR(load_setting(SettingId::kCheck, &value));
  *resolved = static_cast<int>(value.integer);
  return Status::ok();
}

Status create_progress_engine(Transport& transport, const EngineOptions& options,
                              std::unique_ptr<ProgressEngine>* engine) {
  if (engine == nullptr) return Status::invalid_argument("create_progress_engine: engine is NULL");
  EngineOptions resolved = options;
  ZRT_RETURN_IF_ERROR(resolve_check_order(options.check_order, &resolved.check_order));
  ZRT_RETURN_IF_ERROR(resolve_window_geometry(&resolved));
  if (resolved.trace_depth < 0) {
    SettingValue depth;
    ZRT_RETURN_IF_ERROR(load_setting(SettingId::kTraceDepth, &depth));
    resolved.trace_depth = static_cast<int>(depth.integer);
  }
  if (!resolved.trace_dir.has_value()) {
    SettingValue dir;
    ZRT_RETURN_IF_ERROR(load_setting(SettingId::kTraceDir, &dir));
    resolved.trace_dir = dir.text;
  }
  if (!resolved.all_reduce_algorithm.has_value()) {
    SettingValue algorithm;
    ZRT_RETURN_IF_ERROR(load_setting(SettingId::kAlgo, &algorithm));
    resolved.all_reduce_algorithm = all_reduce_algorithm(algorithm.text);
  }
  auto created = std::make_unique<EngineImpl>(transport, resolved);
  ZRT_RETURN_IF_ERROR(created->init());
  *engine = std::move(created);
  return Status::ok();
}

}  // namespace zrt
