// The progress thread.
//
// One thread per communicator owns the transport once the engine is started. Each turn of its
// loop (1) moves the head task of every idle stream into "running", (2) drives the transport
// once, (3) starts or advances every running task, one per stream, so that the heads of
// different streams overlap while each stream stays in order, and (4) when nothing moved (no
// transport completion, no task progress marker changed, nothing started or finished), checks
// the no-progress timeouts, arms the transport and sleeps in poll() on the transport's event fd
// and the engine's wake eventfd; while a collective is in flight it first polls for up to
// EngineOptions::busy_poll_us, yielding each turn (the bounded poll, see run()). Submitters ring
// the eventfd after queuing, so a submission racing with the sleep is never lost. While it keeps
// finding work, the thread yields its core every kYieldInterval: the framework's threads share the
// cores with it, and Linux's EEVDF lets a busy thread run out its slice (0.75 ms or more) before a
// thread waking from a wait gets the core, so a training thread returning from a kernel wait would
// otherwise lose up to a slice each time (bench_overlap: 0.02-0.04 of step / max(compute, comm) on
// 2 cores). Host threads waiting for a point of a stream block on a condition variable that the
// thread notifies whenever a task finishes or a stream fails.
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
#include "lib/engine/engine_impl.h"
#include "lib/engine/local_tasks.h"
#include "lib/engine/silent_peers.h"
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
      instance_(g_engine_instances.fetch_add(1)) {}

EngineImpl::~EngineImpl() {
  (void)shutdown();
  if (trace_registered_) unregister_trace_source(this);
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
  header.instance = instance_;
  header.reason = reason;
  const std::string file = trace_file_path(where, options_.rank, instance_);
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
    trace_registered_ = true;
  }
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd_ < 0) return Status::system_error("engine: eventfd", errno);
  thread_ = std::thread([this] { run(); });
  thread_started_ = true;
  return Status::ok();
}

void EngineImpl::wake() {
  const uint64_t one = 1;
  // EAGAIN means the counter is already non-zero: the thread will wake anyway.
  ssize_t written = ::write(wake_fd_, &one, sizeof(one));
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
  const int index = next_stream_index_;
  for (const auto& live : streams_) {
    if ((live->index() & (kMaxLiveStreams - 1)) == (index & (kMaxLiveStreams - 1))) {
      return Status::invalid_usage(
          "create_stream: a communicator holds at most {} live streams (the documented cap, set "
          "by the stream bits of message tags); destroy a stream first",
          kMaxLiveStreams);
    }
  }
  auto created = std::make_shared<StreamImpl>(*this, index, kind);
  if (failed_) {
    created->failed_ = true;
    created->error_ = error_;
  }
  ++next_stream_index_;
  streams_.push_back(created);
  ++streams_version_;
  *stream = created.get();
  return Status::ok();
}

std::shared_ptr<StreamImpl> EngineImpl::shared_stream(StreamImpl* stream) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& live : streams_) {
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
    streams_.erase(std::remove(streams_.begin(), streams_.end(), shared), streams_.end());
    retired_.push_back(shared);
    ++streams_version_;
  }
  wake();
  // A failed stream's synchronize returns at once, while the progress thread may still be in
  // the middle of the stream's task: a partition's copy into a bucket, whose buffers the caller
  // frees next (a survivor segfaulted after a peer's death). The stream is the caller's to
  // forget once the thread has passed the top of its loop, where it lets go of it.
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [&] { return shared->released_ || loop_exited_ || !thread_started_; });
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
  if (stream.completed_ >= ticket) {
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
        stream->running_small_.load(std::memory_order_relaxed) &&
        std::chrono::steady_clock::now() < poll_until) {
      lock.unlock();
      sched_yield();
      lock.lock();
      continue;
    }
    // Bounded sleeps: progress is guaranteed by the tasks' own no-progress timeouts; the bound
    // only keeps a lost notification from stalling a waiter for long.
    stream->wake_at_ = std::min(stream->wake_at_, ticket);
    done_cv_.wait_for(lock, std::chrono::milliseconds(200));
  }
}

void EngineImpl::fail_stream_locked(StreamImpl& stream, const Status& reason) {
  if (!stream.failed_) {
    stream.failed_ = true;
    stream.error_ = reason;
  }
  stream.queue_.clear();
  stream.handed_off_.reset();  // started inline: it posted no transport operation
}

void EngineImpl::fail_engine(const Status& reason) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (failed_) return;
    failed_ = true;
    error_ = reason;
    cancel_needed_ = true;
    for (const auto& stream : streams_) fail_stream_locked(*stream, reason);
  }
  ZRT_LOG_WARN("communicator failed: {}", reason.message());
  done_cv_.notify_all();
  wake();
  if (trace_registered_ && !failure_dumped_.exchange(true)) {
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
  return failed_ ? error_ : Status::ok();
}

Status EngineImpl::start_task(StreamImpl& stream) {
  Task& task = *stream.running_;
  StreamResources& resources = stream.resources_;
  stream.tag_base_ = 0;
  stream.sequence_ = 0;
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
      stream.tag_base_ = make_tag_base(true, stream.index(), sequence++);
    } else {
      stream.sequence_ = resources.collective_seq++;
      stream.tag_base_ = make_tag_base(false, stream.index(), stream.sequence_);
      ZRT_RETURN_IF_ERROR(acquire_staging(stream));
    }
  }
  stream.start_time_ = std::chrono::steady_clock::now();
  stream.running_small_ = task.communicates() && polls_for(task);
  stream.last_advance_ = stream.start_time_;
  stream.last_marker_ = task.progress_count();
  stream.started_ = true;
  if (stream.resumed_) {
    // Started on the submitting thread (inline_run.cc), which recorded its start.
    stream.start_time_ = stream.handed_off_start_;
    return Status::ok();
  }
  recorder_.started(task.trace_ticket, stream.sequence_);
  TaskContext context = context_for(stream, stream.tag_base_, stream.sequence_);
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
    stream.next_ = std::move(stream.queue_.front());
    stream.queue_.pop_front();
  }
  const uint32_t sequence = stream.resources_.collective_seq;
  TaskContext context =
      context_for(stream, make_tag_base(false, stream.index(), sequence), sequence);
  return stream.next_->prepare(context).with_context(stream.next_->describe() + " (prepared)");
}

void EngineImpl::finish_task(StreamImpl& stream) {
  Task& task = *stream.running_;
  const auto now = std::chrono::steady_clock::now();
  const zrt_coll_kind_t kind = task.kind();
  if (kind >= 0 && kind < ZRT_COLL_KIND_COUNT) {
    const auto busy =
        std::chrono::duration_cast<std::chrono::nanoseconds>(now - stream.start_time_).count();
    counters_.add(kind, task.internal(), task.bytes_sent(), task.bytes_received(),
                  static_cast<uint64_t>(busy));
  }
  if (task.check_messages_sent() > 0) {
    counters_.add_check(task.check_messages_sent(), task.check_bytes_sent());
  }
  recorder_.finished(task.trace_ticket, true);
  if (task.communicates() && stream.running_small_) last_collective_end_ = now;
  ZRT_LOG_TRACE("stream {}: {} done", stream.index(), task.describe());
  stream.running_.reset();
  stream.started_ = false;
  bool idle = false;
  bool notify = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++stream.completed_;
    idle = stream.queue_.empty() && stream.next_ == nullptr;
    notify = stream.take_waiters_locked();
  }
  // Every operation of the finished task has completed, so its scratch holds nothing: an idle
  // stream gives it back, and 1000 mostly idle streams share a few.
  if (idle) return_scratch(stream);
  if (notify) done_cv_.notify_all();
}

Status EngineImpl::acquire_staging(StreamImpl& stream) {
  StreamResources& resources = stream.resources_;
  if (resources.scratch == nullptr) {
    void* scratch = nullptr;
    if (!free_scratch_.empty()) {
      scratch = free_scratch_.back();
      free_scratch_.pop_back();
    } else {
      ZRT_RETURN_IF_ERROR(
          transport_.alloc_registered(kStreamScratchBytes, &scratch)
              .with_context(fmt::format("staging memory of stream {} ({} bytes; {} already held by "
                                        "streams running collectives at once)",
                                        stream.index(), kStreamScratchBytes,
                                        scratch_allocated_ * kStreamScratchBytes)));
      ++scratch_allocated_;
    }
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
  free_scratch_.push_back(stream.resources_.scratch);
  stream.resources_.scratch = nullptr;
  stream.resources_.scratch_bytes = 0;
}

void EngineImpl::free_scratch_pool() {
  for (void* scratch : free_scratch_) transport_.free_registered(scratch);
  free_scratch_.clear();
  scratch_allocated_ = 0;
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
bool EngineImpl::check_timeouts(const std::vector<std::shared_ptr<StreamImpl>>& streams,
                                std::chrono::steady_clock::time_point now, int* sleep_ms) {
  const auto timeout = std::chrono::milliseconds(options_.timeout_ms);
  for (const auto& stream : streams) {
    if (stream->running_ == nullptr || !stream->started_ || !stream->running_->communicates()) {
      continue;
    }
    const auto idle = now - stream->last_advance_;
    if (idle >= timeout) {
      const Task& task = *stream->running_;
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

bool EngineImpl::collective_in_flight(const std::vector<std::shared_ptr<StreamImpl>>& streams) {
  for (const auto& stream : streams) {
    if (stream->running_ != nullptr && stream->started_ && stream->running_->communicates()) {
      return true;
    }
  }
  return false;
}

bool EngineImpl::memory_tasks_only(const std::vector<std::shared_ptr<StreamImpl>>& streams) {
  bool any = false;
  for (const auto& stream : streams) {
    if (stream->inline_busy_ || stream->running_ == nullptr) continue;
    if (stream->next_ != nullptr || !stream->running_->runs_inline(stream->resources_)) {
      return false;
    }
    any = true;
  }
  return any;
}

bool EngineImpl::small_collective_in_flight(
    const std::vector<std::shared_ptr<StreamImpl>>& streams) {
  for (const auto& stream : streams) {
    if (stream->running_ != nullptr && stream->started_ && stream->running_->communicates() &&
        stream->running_small_) {
      return true;
    }
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

bool EngineImpl::verdict_due(const std::vector<std::shared_ptr<StreamImpl>>& streams) const {
  if (std::chrono::steady_clock::now() - verdict_time_ >=
      std::chrono::milliseconds(PeerVerdicts::kHoldMs)) {
    return true;
  }
  for (const auto& stream : streams) {
    if ((stream->index() & (kMaxLiveStreams - 1)) != (verdict_.stream & (kMaxLiveStreams - 1))) {
      continue;
    }
    // Started that collective (or a later one): its peers' verdict is about this call.
    return stream->resources_.collective_seq > verdict_.sequence;
  }
  return true;  // no such stream here
}

Status EngineImpl::peer_failure_cause(const Status& failure, int stream, uint32_t sequence) {
  // A peer that failed and went (a mismatch it found, a death it saw) told every rank why just
  // before: its verdict names the cause, our error only the peer's end. A moment for it.
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(50);
  while (!verdict_pending_ && std::chrono::steady_clock::now() < until) {
    if (verdicts_.poll(&verdict_)) {
      verdict_pending_ = true;
    } else if (transport_.progress() == 0) {
      sched_yield();
    }
  }
  if (verdict_pending_) {
    verdict_pending_ = false;
    return verdict_.failure;
  }
  // None came: this rank saw the failure first, and tells the others before it closes.
  verdicts_.tell(transport_, failure, stream, sequence);
  return failure;
}

TaskContext EngineImpl::context_for(StreamImpl& stream, uint64_t tag_base, uint32_t sequence) {
  TaskContext context{transport_,         options_.rank,  options_.size, tag_base,
                      &stream.resources_, stream.index(), sequence,      options_.check_order == 1};
  context.fingerprint = options_.fingerprint && options_.check_order != 1;
  return context;
}

void EngineImpl::run() {
  log_set_thread_rank(options_.rank);
  {
    Status posted = verdicts_.post(transport_, options_.rank, options_.size);
    if (posted.is_ok()) {
      posted = beacons_.start(transport_, options_.rank, options_.size, options_.timeout_ms);
    }
    if (!posted.is_ok()) fail_engine(posted);
  }
  std::chrono::milliseconds beacon_due{0};  // until the next beacons (PeerBeacons::tick)
  auto last_yield = std::chrono::steady_clock::now();
  const auto busy_poll = std::chrono::microseconds(options_.busy_poll_us);
  bool polling = false;  // in the bounded poll, since poll_since
  // The in-flight poll's bound adapts: a spell in which the thread gave up polling and slept,
  // only for the peer to come soon after, doubles it (up to kAdaptivePollMax); a spell that
  // outlasts twice that (a peer late by its own work) sets it back to busy_poll_us. Peers of
  // back-to-back small collectives otherwise fall into a cascade: one sleeps (50 us and the
  // timer's slack), the other's poll ends before it returns and it sleeps too, and so on each
  // time: 8-byte all-reduces queued on a stream took 9-14 us each, 0.6 us with the longer poll.
  auto poll_bound = busy_poll;
  bool slept_in_spell = false;
  std::chrono::steady_clock::time_point poll_since;
  std::vector<std::shared_ptr<StreamImpl>> active;
  std::vector<std::shared_ptr<StreamImpl>> retired;
  uint64_t seen_version = std::numeric_limits<uint64_t>::max();
  bool transport_failed = false;
  bool transport_due = false;  // drive the transport on the next turn whatever runs
  auto last_transport_progress = std::chrono::steady_clock::time_point{};
  for (;;) {
    bool advanced = false;
    bool cancel = false;
    bool exit_now = false;
    bool engine_failed = false;
    bool memory_only = false;  // every running task moves its data through mapped memory
    Status cancel_reason;
    {
      std::lock_guard<std::mutex> lock(mu_);
      engine_failed = failed_;
      if (seen_version != streams_version_) {
        active = streams_;
        retired.insert(retired.end(), retired_.begin(), retired_.end());
        retired_.clear();
        seen_version = streams_version_;
      }
      if (cancel_needed_) {
        cancel = true;
        cancel_needed_ = false;
        cancel_reason = error_;
      }
      bool busy = false;
      for (const auto& stream : active) {
        if (stream->inline_busy_) {
          busy = true;  // the submitting thread runs this stream's task (inline_run.cc)
          continue;
        }
        if (stream->running_ == nullptr && !stream->failed_ && stream->handed_off_ != nullptr) {
          stream->running_ = std::move(stream->handed_off_);
          stream->started_ = false;
          stream->resumed_ = true;
          advanced = true;
        }
        if (stream->running_ == nullptr && !stream->failed_ && stream->next_ != nullptr) {
          stream->running_ = std::move(stream->next_);
          stream->started_ = false;
          stream->resumed_ = false;
          advanced = true;
        }
        if (stream->running_ == nullptr && !stream->failed_ && !stream->queue_.empty()) {
          stream->running_ = std::move(stream->queue_.front());
          stream->queue_.pop_front();
          stream->started_ = false;
          stream->resumed_ = false;
          advanced = true;
        }
        if (stream->running_ != nullptr || stream->next_ != nullptr || !stream->queue_.empty()) {
          busy = true;
        }
      }
      if (stopping_ && (!busy || failed_) && !cancel) exit_now = true;
      memory_only = memory_tasks_only(active);
    }
    if (cancel) {
      transport_.cancel_all(cancel_reason);
      for (const auto& stream : active) {
        stream->running_.reset();
        stream->next_.reset();
        stream->started_ = false;
      }
      done_cv_.notify_all();
      continue;
    }
    // Only after any cancel: a stream destroyed once the engine failed (its synchronize returned
    // the error at once) may still hold a running task whose transport operations write into
    // the task and the stream's scratch; cancel_all ends them. Freeing first was a
    // use-after-free (AddressSanitizer, dead_peers and abort_release).
    if (!retired.empty()) {
      for (const auto& stream : retired) release_resources(*stream);
      {
        std::lock_guard<std::mutex> lock(mu_);
        for (const auto& stream : retired) stream->released_ = true;
      }
      retired.clear();
      done_cv_.notify_all();
    }
    if (exit_now) break;

    const bool timing = phase_clock_.on();
    auto mark = timing ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
    // Adds the time since `mark` to `part` and moves the mark; only when the clock is on.
    auto clock_part = [&](PhaseClock::Part part) {
      if (!timing) return;
      const auto now = std::chrono::steady_clock::now();
      phase_clock_.add(
          part, static_cast<uint64_t>(
                    std::chrono::duration_cast<std::chrono::nanoseconds>(now - mark).count()));
      mark = now;
    };

    // Drive the transport, even with nothing running: arm() refuses to sleep while it has events
    // pending, and only progress() drains them. While every running task moves its data through
    // mapped memory (a one-shot collective, back to back), the transport has nothing of theirs,
    // so it is driven every kMemoryPathTransportInterval only (its beacons and verdicts work in
    // milliseconds): each progress call is an epoll_wait, 40% of a queued 8-byte all-reduce's
    // samples (perf).
    {
      const auto now = std::chrono::steady_clock::now();
      if (transport_due || !memory_only ||
          now - last_transport_progress >= kMemoryPathTransportInterval) {
        transport_due = false;
        last_transport_progress = now;
        if (transport_.progress() > 0) advanced = true;
      }
    }
    clock_part(PhaseClock::Part::kTransport);

    for (const auto& stream : active) {
      if (stream->running_ == nullptr) continue;
      Task& task = *stream->running_;
      Status status;
      bool done = false;
      if (!stream->started_) {
        status = start_task(*stream);
        advanced = true;
      }
      if (status.is_ok()) {
        TaskContext context = context_for(*stream, stream->tag_base_, stream->sequence_);
        status = task.progress(context, &done);
      }
      if (timing) {
        if (task.communicates()) {
          clock_part(PhaseClock::Part::kTask);
        } else {
          mark = std::chrono::steady_clock::now();
        }
      }
      if (!status.is_ok()) {
        Status failure =
            status.with_context(fmt::format("{} on stream {}", task.describe(), stream->index()));
        recorder_.finished(task.trace_ticket, false);
        if (task.communicates()) {
          if (task.tell_peers()) {
            verdicts_.tell(transport_, failure, stream->index(), stream->sequence_);
          } else if (failure.code() == ZRT_REMOTE_ERROR) {
            failure = peer_failure_cause(failure, stream->index(), stream->sequence_);
          }
          fail_engine(failure);  // cancels the transport before any task is dropped
        } else {
          {
            std::lock_guard<std::mutex> lock(mu_);
            fail_stream_locked(*stream, failure);
          }
          stream->running_.reset();
          stream->started_ = false;
          done_cv_.notify_all();
        }
        advanced = true;
        continue;
      }
      const uint64_t marker = task.progress_count();
      if (marker != stream->last_marker_) {
        stream->last_marker_ = marker;
        stream->last_advance_ = std::chrono::steady_clock::now();
        advanced = true;
      }
      if (done) {
        finish_task(*stream);
        advanced = true;
      } else if (stream->next_ == nullptr && task.ready_for_next()) {
        Status prepared = prepare_next(*stream);
        if (!prepared.is_ok()) {
          fail_engine(prepared.with_context(fmt::format("stream {}", stream->index())));
          advanced = true;
          continue;
        }
      }
    }

    // After the tasks: a verdict is about a later collective than the one running here, which
    // its peers finished, so that one's last completions (delivered with the verdict) count.
    if (!verdict_pending_ && verdicts_.poll(&verdict_)) {
      verdict_pending_ = true;
      verdict_time_ = std::chrono::steady_clock::now();
    }
    if (verdict_pending_ && verdict_due(active)) {
      verdict_pending_ = false;
      fail_engine(verdict_.failure);
      continue;
    }
    if (!transport_failed) {
      Status health = transport_.health();
      if (!health.is_ok()) {
        transport_failed = true;  // reported once; the engine stays failed
        fail_engine(peer_failure_cause(health, -1, 0));
        continue;
      }
    }
    // A failed engine has cancelled its transport's operations and sends no more beacons.
    if (!engine_failed) beacon_due = beacons_.tick(transport_, std::chrono::steady_clock::now());
    if (advanced) {
      if (polling && slept_in_spell) {
        const auto spell = std::chrono::steady_clock::now() - poll_since;
        poll_bound = spell < 2 * kAdaptivePollMax
                         ? std::min<std::chrono::microseconds>(2 * poll_bound, kAdaptivePollMax)
                         : busy_poll;
      }
      polling = false;
      slept_in_spell = false;
      const auto now = std::chrono::steady_clock::now();
      if (now - last_yield >= kYieldInterval) {
        sched_yield();
        last_yield = now;
      }
      continue;
    }
    // The bounded poll: a collective in flight waits on its peers' next notification, which
    // usually comes within microseconds; a sleep would add a wake-up to each. Yielding every
    // turn gives the core to any other runnable thread (more ranks than cores still run), and
    // past the bound the thread sleeps as before, so an idle or stalled rank costs nothing.
    // Just after a collective ended it polls as long too: small collectives come back to back
    // (a layer's gathers, the step's votes), and the next one's enqueue then needs no wake-up.
    if (busy_poll.count() > 0) {
      const auto now = std::chrono::steady_clock::now();
      const bool in_flight = small_collective_in_flight(active);
      if (in_flight && !polling) {
        polling = true;
        poll_since = now;
      }
      // One poll per quiet spell: after a sleep that brought nothing (a task waiting on memory
      // wakes by timer) the thread sleeps again at once.
      if ((in_flight && now - poll_since < poll_bound) || now - last_collective_end_ < busy_poll) {
        sched_yield();
        if (in_flight) {
          clock_part(PhaseClock::Part::kPoll);
        } else if (timing) {
          mark = std::chrono::steady_clock::now();
        }
        continue;
      }
    }
    if (!small_collective_in_flight(active)) polling = false;
    if (polling) slept_in_spell = true;  // the sleep below ends this spell's poll

    int sleep_ms = 100;  // idle turns also let the transport run its keepalive
    if (!engine_failed)
      sleep_ms = static_cast<int>(std::min<int64_t>(sleep_ms, beacon_due.count()));
    const auto now = std::chrono::steady_clock::now();
    int64_t memory_sleep_us = -1;  // none: no task waits on memory
    for (const auto& stream : active) {
      if (dynamic_cast<const ForeignEventWaitTask*>(stream->running_.get()) != nullptr) {
        sleep_ms = kForeignPollMs;  // nothing to sleep on: poll the foreign event
      }
      if (stream->running_ != nullptr && stream->started_ && stream->running_->polls_memory()) {
        // Peers' stores wake nothing: look again soon, less often the longer the wait.
        const auto waited =
            std::chrono::duration_cast<std::chrono::microseconds>(now - stream->last_advance_);
        const int64_t interval =
            std::clamp<int64_t>(waited.count() / kMemoryWaitSleepDivisor, kMemoryWaitMinSleepUs,
                                int64_t{kMemoryWaitMaxSleepMs} * 1000);
        memory_sleep_us = memory_sleep_us < 0 ? interval : std::min(memory_sleep_us, interval);
      }
    }
    if (check_timeouts(active, std::chrono::steady_clock::now(), &sleep_ms)) continue;
    if (!transport_.arm()) {
      transport_due = true;  // events are pending: the next turn drains them
      continue;
    }
    int64_t sleep_us = int64_t{sleep_ms} * 1000;
    if (memory_sleep_us >= 0) sleep_us = std::min(sleep_us, memory_sleep_us);
    const timespec sleep_for{static_cast<time_t>(sleep_us / 1000000),
                             static_cast<long>(sleep_us % 1000000) * 1000};
    pollfd fds[2] = {{transport_.event_fd(), POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    const bool timed_sleep = timing && collective_in_flight(active);
    if (timed_sleep) mark = std::chrono::steady_clock::now();
    const int ready = ::ppoll(fds, 2, &sleep_for, nullptr);
    if (timed_sleep) clock_part(PhaseClock::Part::kSleep);
    if (ready < 0 && errno != EINTR) {
      fail_engine(Status::system_error("progress thread: poll", errno));
      continue;
    }
    if (ready > 0 && (fds[1].revents & POLLIN) != 0) {
      uint64_t count = 0;
      ssize_t got = ::read(wake_fd_, &count, sizeof(count));
      (void)got;
    }
  }
  verdicts_.close(transport_);
  beacons_.close(transport_);
  for (const auto& stream : active) {
    stream->running_.reset();
    stream->next_.reset();
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
    if (shut_down_) return failed_ ? error_ : Status::ok();
    shut_down_ = true;
    stopping_ = true;
  }
  if (thread_started_) {
    wake();
    thread_.join();
    thread_started_ = false;
  }
  // The thread is gone: this thread may touch the transport now.
  std::vector<std::shared_ptr<StreamImpl>> streams;
  {
    std::lock_guard<std::mutex> lock(mu_);
    streams = streams_;
    streams.insert(streams.end(), retired_.begin(), retired_.end());
    retired_.clear();
    for (const auto& stream : streams_) {
      if (!stream->queue_.empty()) {
        fail_stream_locked(*stream, Status::invalid_usage("the progress engine was shut down"));
      }
    }
  }
  for (const auto& stream : streams) release_resources(*stream);
  free_scratch_pool();
  if (wake_fd_ >= 0) {
    ::close(wake_fd_);
    wake_fd_ = -1;
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
