#include "device/cuda_stream.h"

#include <string>
#include <vector>

#include "lib/core/collective_args.h"
#include "lib/core/dtype.h"
#include "lib/core/log.h"
#include "device/cuda_event.h"
#include "device/cuda_status.h"
#include "device/poll_wait.h"

namespace zrt {
namespace {

// A host function in flight: owns the closure and shares the stream's failure state, so it
// stays valid even if the stream object is gone when CUDA runs it.
struct HostCall {
  std::function<Status()> function;
  std::string name;
  std::shared_ptr<CudaStreamState> state;
};

void CUDART_CB run_host_call(void* data) {
  std::unique_ptr<HostCall> call(static_cast<HostCall*>(data));
  // A failed stream skips the work queued after the failure (zrt.h's sticky errors).
  if (!call->state->get().is_ok()) return;
  Status status;
  try {
    status = call->function();
  } catch (const std::exception& e) {
    status = Status(ZRT_INTERNAL_ERROR, e.what());
  }
  if (!status.is_ok()) call->state->fail(status.with_context(call->name));
}

// Payload bytes one rank sends and receives for a collective, counted the way a ring moves
// them (what NCCL does at these sizes), for zrt_comm_stats.
void traffic(const CollectiveArgs& args, int rank, int size, uint64_t* sent, uint64_t* received) {
  const uint64_t bytes = args.count * dtype_size(args.dtype);
  const uint64_t n = static_cast<uint64_t>(size);
  *sent = 0;
  *received = 0;
  switch (args.kind) {
    case ZRT_COLL_ALL_REDUCE:
      *sent = *received = 2 * (n - 1) * bytes / n;
      break;
    case ZRT_COLL_REDUCE_SCATTER:
    case ZRT_COLL_ALL_GATHER:
      *sent = *received = (n - 1) * bytes;
      break;
    case ZRT_COLL_BROADCAST:
      if (rank == args.root)
        *sent = n > 1 ? bytes : 0;
      else
        *received = bytes;
      break;
    case ZRT_COLL_REDUCE:
      if (rank == args.root)
        *received = n > 1 ? bytes : 0;
      else
        *sent = bytes;
      break;
    case ZRT_COLL_SEND:
      *sent = args.peer == rank ? 0 : bytes;
      break;
    case ZRT_COLL_RECV:
      *received = args.peer == rank ? 0 : bytes;
      break;
    default:
      break;
  }
}

Status check_device_buffer(const void* buffer, size_t bytes, int device, const char* arg) {
  if (bytes == 0) return Status::ok();
  if (buffer == nullptr) return Status::invalid_argument("{} is NULL", arg);
  cudaPointerAttributes attributes{};
  ZRT_RETURN_IF_ERROR(
      cuda_status(cudaPointerGetAttributes(&attributes, buffer), "cudaPointerGetAttributes"));
  if (attributes.type != cudaMemoryTypeDevice && attributes.type != cudaMemoryTypeManaged) {
    return Status::invalid_argument(
        "{} ({}) is not CUDA device memory; host buffers go on ZRT_MEM_HOST streams", arg, buffer);
  }
  if (attributes.type == cudaMemoryTypeDevice && attributes.device != device) {
    return Status::invalid_argument(
        "{} is memory of CUDA device {}, the communicator uses "
        "device {}",
        arg, attributes.device, device);
  }
  return Status::ok();
}

Status check_buffers(const CollectiveArgs& args, int rank, int size, int device) {
  const size_t bytes = args.count * dtype_size(args.dtype);
  const size_t n = static_cast<size_t>(size);
  size_t send_bytes = bytes;
  size_t recv_bytes = bytes;
  switch (args.kind) {
    case ZRT_COLL_REDUCE_SCATTER:
      send_bytes = n * bytes;
      break;
    case ZRT_COLL_ALL_GATHER:
      recv_bytes = n * bytes;
      break;
    case ZRT_COLL_BARRIER:
      send_bytes = recv_bytes = 0;
      break;
    case ZRT_COLL_SEND:
      recv_bytes = 0;
      break;
    case ZRT_COLL_RECV:
      send_bytes = 0;
      break;
    // sendbuf is read on the root only (broadcast), recvbuf written on the root only (reduce).
    case ZRT_COLL_BROADCAST:
      if (rank != args.root) send_bytes = 0;
      break;
    case ZRT_COLL_REDUCE:
      if (rank != args.root) recv_bytes = 0;
      break;
    default:
      break;
  }
  ZRT_RETURN_IF_ERROR(check_device_buffer(args.sendbuf, send_bytes, device, "sendbuf"));
  return check_device_buffer(args.recvbuf, recv_bytes, device, "recvbuf");
}

}  // namespace

Status CudaStream::create(const CudaStreamResources& resources, ProgressEngine& engine, int index,
                          cudaStream_t external, bool wrap_external,
                          std::unique_ptr<CudaStream>* stream) {
  if (resources.nccl == nullptr || resources.barrier_scratch == nullptr) {
    return Status(ZRT_INTERNAL_ERROR, "CudaStream::create: device context incomplete");
  }
  DeviceGuard device_guard;
  ZRT_RETURN_IF_ERROR(device_guard.enter(resources.nccl->device()));
  std::unique_ptr<CudaStream> made(new CudaStream(resources, engine, index));
  if (wrap_external) {
    made->stream_ = external;
    made->owns_stream_ = false;
  } else {
    int least = 0;
    int greatest = 0;
    ZRT_CUDA_RETURN_IF_ERROR(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    ZRT_CUDA_RETURN_IF_ERROR(
        cudaStreamCreateWithPriority(&made->stream_, cudaStreamNonBlocking, greatest));
    made->owns_stream_ = true;
  }
  *stream = std::move(made);
  return Status::ok();
}

CudaStream::~CudaStream() {
  Status status = wait(false, "CUDA stream destroy");
  if (!status.is_ok()) {
    ZRT_LOG_WARN("CUDA stream {} destroyed after failure: {}", index_, status.message());
  }
  DeviceGuard device_guard;
  if (!device_guard.enter(device()).is_ok()) return;
  for (const PendingCounts& pending : pending_counts_) {
    cudaEventDestroy(pending.start);
    cudaEventDestroy(pending.end);
  }
  for (cudaEvent_t event : spare_events_) cudaEventDestroy(event);
  if (owns_stream_) cudaStreamDestroy(stream_);
}

Status CudaStream::enqueue(std::unique_ptr<Task> task) {
  if (task == nullptr) return Status::invalid_argument("task is NULL");
  return Status::invalid_usage(
      "{} enqueued on CUDA stream {}: host-memory tasks run on ZRT_MEM_HOST streams; a CUDA "
      "stream runs collectives as NCCL calls (enqueue_collectives)",
      task->describe(), index_);
}

Status CudaStream::enqueue_host_function(std::function<Status()> function, const char* name) {
  if (!function) return Status::invalid_argument("host function is empty");
  ZRT_RETURN_IF_ERROR(state_->get());
  auto call = std::make_unique<HostCall>();
  call->function = std::move(function);
  call->name = name != nullptr ? name : "host function";
  call->state = state_;
  std::lock_guard<std::mutex> lock(enqueue_mutex_);
  Status status =
      cuda_status(cudaLaunchHostFunc(stream_, run_host_call, call.get()), "cudaLaunchHostFunc");
  if (!status.is_ok()) {
    fail(status);
    return status;
  }
  call.release();  // run_host_call owns it now
  return Status::ok();
}

Status CudaStream::poll(bool check_engine) {
  ZRT_RETURN_IF_ERROR(state_->get());
  Status health = resources_.nccl->health();
  if (!health.is_ok()) {
    fail(health);
    return health;
  }
  if (check_engine) {
    Status host = engine_.error();
    if (!host.is_ok()) {
      // The communicator broke (abort, dead peer): release NCCL kernels waiting on it too.
      resources_.nccl->abort(host);
      fail(host);
      return host;
    }
  }
  cudaError_t result = cudaStreamQuery(stream_);
  if (check_engine) reap_counters();  // not from the destructor: the engine may be gone
  if (result == cudaSuccess) return state_->get();
  if (result == cudaErrorNotReady) return Status(ZRT_IN_PROGRESS, "CUDA stream busy");
  Status status = cuda_status(result, "cudaStreamQuery");
  fail(status);
  return status;
}

Status CudaStream::wait(bool check_engine, const char* what) {
  const std::string label = fmt::format("{} (CUDA stream {})", what, index_);
  Status status =
      poll_until(timeout_ms(), label.c_str(), [&]() -> Status { return poll(check_engine); });
  if (status.code() == ZRT_TIMEOUT) {
    resources_.nccl->abort(status);
    fail(status);
  }
  return status;
}

Status CudaStream::synchronize() {
  return wait(true, "synchronize");
}

Status CudaStream::query() {
  return poll(true);
}

Status CudaStream::wait_event(Event& event) {
  ZRT_RETURN_IF_ERROR(state_->get());
  if (auto* cuda_event = dynamic_cast<CudaEvent*>(&event)) {
    return cuda_event->enqueue_wait(*this);
  }
  Event* host_event = &event;
  return enqueue_host_function([host_event]() { return host_event->synchronize(); },
                               "wait for host event");
}

Status CudaStream::device_copy(const void* src, void* dst, size_t bytes) {
  if (bytes == 0) return Status::ok();
  return cuda_status(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_),
                     "cudaMemcpyAsync (send to own rank)");
}

Status CudaStream::enqueue_collectives(int rank, int size, const CollectiveArgs* args,
                                       size_t count) {
  if (count == 0) return Status::ok();
  if (args == nullptr) return Status::invalid_argument("args is NULL with count {}", count);
  ZRT_RETURN_IF_ERROR(state_->get());
  NcclComm& nccl = *resources_.nccl;
  if (rank != nccl.rank() || size != nccl.size()) {
    return Status(ZRT_INTERNAL_ERROR,
                  fmt::format("CUDA stream {}: rank {} / size {} disagree with its NCCL "
                              "communicator ({} / {})",
                              index_, rank, size, nccl.rank(), nccl.size()));
  }
  DeviceGuard device_guard;
  ZRT_RETURN_IF_ERROR(device_guard.enter(nccl.device()));
  for (size_t i = 0; i < count; ++i) {
    Status status = check_buffers(args[i], rank, size, nccl.device());
    if (!status.is_ok()) {
      return status.with_context(
          fmt::format("{} #{} on CUDA stream {}", coll_kind_name(args[i].kind), i, index_));
    }
  }

  reap_counters();
  std::lock_guard<std::mutex> lock(enqueue_mutex_);
  cudaEvent_t start_event = nullptr;
  ZRT_RETURN_IF_ERROR(record_start_event(&start_event));
  Status status = enqueue_batch(rank, args, count);
  if (!status.is_ok()) {
    give_back_event(start_event);  // recorded, never waited on: reusable
    // Argument mistakes leave the stream usable; anything else broke it.
    if (status.code() != ZRT_INVALID_ARGUMENT) fail(status);
    return status;
  }
  return count_when_done(start_event, rank, size, args, count);
}

Status CudaStream::record_start_event(cudaEvent_t* start_event) {
  ZRT_RETURN_IF_ERROR(take_event(start_event));
  Status recorded = cuda_status(cudaEventRecord(*start_event, stream_), "cudaEventRecord");
  if (!recorded.is_ok()) {
    give_back_event(*start_event);
    fail(recorded);
    return recorded;
  }
  return Status::ok();
}

Status CudaStream::enqueue_batch(int rank, const CollectiveArgs* args, size_t count) {
  NcclComm& nccl = *resources_.nccl;
  // Sends to and receives from the own rank never reach NCCL (a lone self-send would wait for
  // its receive forever): the send is remembered and its receive becomes a device copy, which
  // keeps stream order because both sit on this stream.
  std::vector<CollectiveArgs> batch;
  auto flush = [&]() -> Status {
    if (batch.empty()) return Status::ok();
    Status status = nccl.enqueue(batch.data(), batch.size(), stream_, resources_.barrier_scratch);
    batch.clear();
    return status;
  };
  for (size_t i = 0; i < count; ++i) {
    const CollectiveArgs& a = args[i];
    const bool self_p2p = (a.kind == ZRT_COLL_SEND || a.kind == ZRT_COLL_RECV) && a.peer == rank;
    if (!self_p2p) {
      batch.push_back(a);
      continue;
    }
    ZRT_RETURN_IF_ERROR(flush());
    if (a.kind == ZRT_COLL_SEND) {
      self_sends_.push_back(SelfSend{a.sendbuf, a.count * dtype_size(a.dtype)});
      continue;
    }
    ZRT_RETURN_IF_ERROR(receive_from_self(rank, a));
  }
  return flush();
}

Status CudaStream::receive_from_self(int rank, const CollectiveArgs& recv) {
  const size_t bytes = recv.count * dtype_size(recv.dtype);
  if (self_sends_.empty()) {
    return Status::invalid_usage(
        "recv from own rank {} on CUDA stream {} has no earlier "
        "send to own rank",
        rank, index_);
  }
  const SelfSend send = self_sends_.front();
  self_sends_.pop_front();
  if (send.bytes > bytes) {
    return Status::invalid_usage(
        "send to own rank of {} bytes is longer than its receive "
        "buffer ({} bytes)",
        send.bytes, bytes);
  }
  return device_copy(send.buffer, recv.recvbuf, send.bytes);
}

Status CudaStream::count_when_done(cudaEvent_t start_event, int rank, int size,
                                   const CollectiveArgs* args, size_t count) {
  // Counters count completed operations: timing events around the batch are reaped once the
  // stream has passed them (reap_counters), which also gives the device time of the batch. A
  // host function would count as exactly, but would stall the stream on the host each time.
  PendingCounts pending;
  pending.start = start_event;
  pending.end = nullptr;
  Status status = take_event(&pending.end);
  if (status.is_ok()) {
    status = cuda_status(cudaEventRecord(pending.end, stream_), "cudaEventRecord (counters)");
  }
  if (!status.is_ok()) {
    give_back_event(pending.start);
    give_back_event(pending.end);
    fail(status);
    return status;
  }
  for (size_t i = 0; i < count; ++i) {
    PendingCounts::Totals t{args[i].kind, args[i].purpose == Purpose::kInternal, 0, 0};
    traffic(args[i], rank, size, &t.sent, &t.received);
    pending.totals.push_back(t);
  }
  std::lock_guard<std::mutex> counters_lock(counters_mutex_);
  pending_counts_.push_back(std::move(pending));
  return Status::ok();
}

Status CudaStream::take_event(cudaEvent_t* event) {
  {
    std::lock_guard<std::mutex> lock(counters_mutex_);
    if (!spare_events_.empty()) {
      *event = spare_events_.back();
      spare_events_.pop_back();
      return Status::ok();
    }
  }
  return cuda_status(cudaEventCreate(event), "cudaEventCreate");
}

void CudaStream::give_back_event(cudaEvent_t event) {
  if (event == nullptr) return;
  std::lock_guard<std::mutex> lock(counters_mutex_);
  spare_events_.push_back(event);
}

void CudaStream::reap_counters() {
  std::lock_guard<std::mutex> lock(counters_mutex_);
  while (!pending_counts_.empty()) {
    PendingCounts& front = pending_counts_.front();
    const cudaError_t done = cudaEventQuery(front.end);
    if (done == cudaErrorNotReady) return;
    if (done == cudaSuccess) {
      float ms = 0;
      uint64_t busy_ns = 0;
      if (cudaEventElapsedTime(&ms, front.start, front.end) == cudaSuccess && ms > 0) {
        busy_ns = static_cast<uint64_t>(static_cast<double>(ms) * 1e6);
      }
      const uint64_t share = busy_ns / front.totals.size();
      for (const PendingCounts::Totals& t : front.totals) {
        engine_.counters().add(t.kind, t.internal, t.sent, t.received, share);
      }
    } else {
      (void)cudaGetLastError();  // a failed stream: its work does not count
    }
    spare_events_.push_back(front.start);
    spare_events_.push_back(front.end);
    pending_counts_.pop_front();
  }
}

}  // namespace zrt
