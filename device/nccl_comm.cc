#include "device/nccl_comm.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstring>
#include <vector>

#include "lib/core/dtype.h"
#include "lib/core/log.h"
#include "device/cuda_status.h"
#include "device/poll_wait.h"

namespace zrt {

bool nccl_datatype(zrt_dtype_t dtype, ncclDataType_t* out) {
  switch (dtype) {
    case ZRT_F32:
      *out = ncclFloat32;
      return true;
    case ZRT_F64:
      *out = ncclFloat64;
      return true;
    case ZRT_F16:
      *out = ncclFloat16;
      return true;
    case ZRT_BF16:
      *out = ncclBfloat16;
      return true;
    case ZRT_I8:
      *out = ncclInt8;
      return true;
    case ZRT_U8:
      *out = ncclUint8;
      return true;
    case ZRT_I32:
      *out = ncclInt32;
      return true;
    case ZRT_I64:
      *out = ncclInt64;
      return true;
    default:
      return false;
  }
}

namespace {

Status nccl_op(zrt_op_t op, zrt_dtype_t dtype, ncclRedOp_t* out) {
  switch (op) {
    case ZRT_SUM:
      *out = ncclSum;
      return Status::ok();
    case ZRT_MIN:
      *out = ncclMin;
      return Status::ok();
    case ZRT_MAX:
      *out = ncclMax;
      return Status::ok();
    case ZRT_PROD:
      *out = ncclProd;
      return Status::ok();
    case ZRT_AVG:
      if (!dtype_is_floating(dtype)) {
        return Status::invalid_argument("op avg needs a floating dtype, got {}", dtype_name(dtype));
      }
      *out = ncclAvg;
      return Status::ok();
    default:
      return Status::invalid_argument(
          "op {} is not a built-in reduction (premul ops arrive as "
          "CollectiveArgs::premul)",
          static_cast<int>(op));
  }
}

// The scalar of a pre-multiplied sum, in the collective's own dtype as NCCL requires.
union PremulScalar {
  float f32;
  double f64;
  __half f16;
  __nv_bfloat16 bf16;
};

Status make_premul_scalar(zrt_dtype_t dtype, double value, PremulScalar* scalar) {
  std::memset(static_cast<void*>(scalar), 0, sizeof(*scalar));
  switch (dtype) {
    case ZRT_F32:
      scalar->f32 = static_cast<float>(value);
      return Status::ok();
    case ZRT_F64:
      scalar->f64 = value;
      return Status::ok();
    case ZRT_F16:
      scalar->f16 = __float2half_rn(static_cast<float>(value));
      return Status::ok();
    case ZRT_BF16:
      scalar->bf16 = __float2bfloat16_rn(static_cast<float>(value));
      return Status::ok();
    default:
      return Status::invalid_argument("premul sum needs a floating dtype, got {}",
                                      dtype_name(dtype));
  }
}

const char* kind_call(zrt_coll_kind_t kind) {
  switch (kind) {
    case ZRT_COLL_ALL_REDUCE:
      return "ncclAllReduce";
    case ZRT_COLL_REDUCE_SCATTER:
      return "ncclReduceScatter";
    case ZRT_COLL_ALL_GATHER:
      return "ncclAllGather";
    case ZRT_COLL_BROADCAST:
      return "ncclBroadcast";
    case ZRT_COLL_REDUCE:
      return "ncclReduce";
    case ZRT_COLL_BARRIER:
      return "ncclAllReduce(barrier)";
    case ZRT_COLL_SEND:
      return "ncclSend";
    case ZRT_COLL_RECV:
      return "ncclRecv";
    default:
      return "nccl?";
  }
}

}  // namespace

Status NcclComm::init(const NcclUniqueIdBytes& id, const NcclCommOptions& options,
                      std::unique_ptr<NcclComm>* comm) {
  if (options.size < 1 || options.rank < 0 || options.rank >= options.size) {
    return Status::invalid_argument("NcclComm::init: rank {} / size {} out of range", options.rank,
                                    options.size);
  }
  DeviceGuard device_guard;
  ZRT_RETURN_IF_ERROR(device_guard.enter(options.device));
  ncclUniqueId unique;
  std::memcpy(unique.internal, id.data(), kNcclUniqueIdBytes);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  config.commName = options.name.c_str();
  ncclComm_t raw = nullptr;
  ncclResult_t result = ncclCommInitRankConfig(&raw, options.size, unique, options.rank, &config);
  const std::string what =
      fmt::format("ncclCommInitRankConfig(rank {} of {}, device {}, comm '{}')", options.rank,
                  options.size, options.device, options.name);
  if (result != ncclSuccess && result != ncclInProgress) {
    if (raw != nullptr) ncclCommAbort(raw);
    return nccl_status(result, what.c_str());
  }
  // From here the comm handle exists; NcclComm owns it so that every exit path releases it.
  std::unique_ptr<NcclComm> made(new NcclComm(raw, options));
  Status status;
  {
    std::lock_guard<std::mutex> lock(made->call_mutex_);
    status = made->settle(result, what.c_str());
  }
  if (!status.is_ok()) {
    made->abort(status);  // takes call_mutex_ itself
    return status;
  }
  ZRT_LOG_INFO("{}: NCCL communicator ready", what);
  *comm = std::move(made);
  return Status::ok();
}

NcclComm::~NcclComm() {
  Status status = destroy();
  if (!status.is_ok()) ZRT_LOG_WARN("NcclComm '{}': {}", options_.name, status.message());
}

Status NcclComm::failure() const {
  std::lock_guard<std::mutex> lock(state_mutex_);
  return failure_;
}

// Called with call_mutex_ held.
Status NcclComm::settle(ncclResult_t result, const char* what) {
  if (result != ncclSuccess && result != ncclInProgress) {
    Status status = nccl_status(result, what);
    {
      std::lock_guard<std::mutex> lock(state_mutex_);
      if (failure_.is_ok()) failure_ = status;
    }
    failed_ = true;
    return status;
  }
  if (result == ncclSuccess) return Status::ok();
  Status status = poll_until(options_.timeout_ms, what, [&]() -> Status {
    if (failed_) return failure();
    ncclResult_t state = ncclSuccess;
    ncclResult_t query = ncclCommGetAsyncError(comm_, &state);
    if (query != ncclSuccess) return nccl_status(query, "ncclCommGetAsyncError");
    if (state == ncclInProgress) return Status(ZRT_IN_PROGRESS, "");
    return nccl_status(state, what);
  });
  if (!status.is_ok()) {
    std::lock_guard<std::mutex> lock(state_mutex_);
    if (failure_.is_ok()) failure_ = status;
    failed_ = true;
  }
  return status;
}

Status NcclComm::health() {
  if (failed_) return failure();
  std::lock_guard<std::mutex> lock(call_mutex_);
  if (failed_ || destroyed_) return failure();
  ncclResult_t state = ncclSuccess;
  ncclResult_t query = ncclCommGetAsyncError(comm_, &state);
  Status status = query != ncclSuccess
                      ? nccl_status(query, "ncclCommGetAsyncError")
                      : (state == ncclInProgress ? Status::ok()
                                                 : nccl_status(state, "NCCL asynchronous error"));
  if (!status.is_ok()) {
    status = status.with_context(
        fmt::format("NCCL communicator '{}' rank {}", options_.name, options_.rank));
    std::lock_guard<std::mutex> state_lock(state_mutex_);
    if (failure_.is_ok()) failure_ = status;
    failed_ = true;
  }
  return status;
}

void NcclComm::abort(const Status& reason) {
  {
    std::lock_guard<std::mutex> lock(state_mutex_);
    if (failure_.is_ok()) {
      failure_ = reason.is_ok() ? Status(ZRT_REMOTE_ERROR, "communicator aborted") : reason;
    }
  }
  // Set before taking call_mutex_: a thread settling a call sees it and lets go of the mutex.
  failed_ = true;
  std::lock_guard<std::mutex> lock(call_mutex_);
  if (destroyed_) return;
  destroyed_ = true;
  ncclResult_t result = ncclCommAbort(comm_);
  if (result != ncclSuccess && result != ncclInProgress) {
    ZRT_LOG_WARN("ncclCommAbort ('{}'): {}", options_.name, ncclGetErrorString(result));
  }
  comm_ = nullptr;
}

Status NcclComm::destroy() {
  if (failed_) {
    abort(failure());
    return Status::ok();
  }
  std::unique_lock<std::mutex> lock(call_mutex_);
  if (destroyed_) return Status::ok();
  DeviceGuard device_guard;
  Status status = device_guard.enter(options_.device);
  if (status.is_ok()) status = settle(ncclCommFinalize(comm_), "ncclCommFinalize");
  if (!status.is_ok()) {
    lock.unlock();
    abort(status);
    return status;
  }
  destroyed_ = true;
  status = nccl_status(ncclCommDestroy(comm_), "ncclCommDestroy");
  comm_ = nullptr;
  return status;
}

Status NcclComm::split(int color, int key, int64_t timeout_ms, std::unique_ptr<NcclComm>* comm) {
  if (color < ZRT_SPLIT_NOCOLOR) return Status::invalid_argument("color {} < -1", color);
  if (failed_) return failure();
  std::lock_guard<std::mutex> lock(call_mutex_);
  if (destroyed_) return Status::invalid_usage("split of a destroyed NCCL communicator");
  DeviceGuard device_guard;
  ZRT_RETURN_IF_ERROR(device_guard.enter(options_.device));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  config.commName = options_.name.c_str();
  ncclComm_t raw = nullptr;
  const int nccl_color = color == ZRT_SPLIT_NOCOLOR ? NCCL_SPLIT_NOCOLOR : color;
  ncclResult_t result = ncclCommSplit(comm_, nccl_color, key, &raw, &config);
  const std::string what = fmt::format("ncclCommSplit(color {}, key {}) of '{}' rank {}", color,
                                       key, options_.name, options_.rank);
  // The split is driven by the parent; settle on the parent first, then on the child.
  ZRT_RETURN_IF_ERROR(settle(result, what.c_str()));
  if (raw == nullptr) return Status::ok();  // NOCOLOR
  int child_rank = 0;
  int child_size = 0;
  NcclCommOptions child_options = options_;
  child_options.timeout_ms = timeout_ms;
  std::unique_ptr<NcclComm> child(new NcclComm(raw, child_options));
  {
    std::lock_guard<std::mutex> child_lock(child->call_mutex_);
    ZRT_RETURN_IF_ERROR(child->settle(ncclInProgress, what.c_str()));
    ZRT_RETURN_IF_ERROR(nccl_status(ncclCommUserRank(raw, &child_rank), "ncclCommUserRank"));
    ZRT_RETURN_IF_ERROR(nccl_status(ncclCommCount(raw, &child_size), "ncclCommCount"));
  }
  child->options_.rank = child_rank;
  child->options_.size = child_size;
  *comm = std::move(child);
  return Status::ok();
}

Status NcclComm::enqueue_one(const CollectiveArgs& args, cudaStream_t stream, void* barrier_scratch,
                             std::vector<ncclRedOp_t>* created_ops) {
  ncclDataType_t type = ncclFloat32;
  if (!nccl_datatype(args.dtype, &type)) {
    return Status::invalid_argument("dtype {} has no NCCL equivalent",
                                    static_cast<int>(args.dtype));
  }
  const char* what = kind_call(args.kind);
  ncclRedOp_t op = ncclSum;
  const bool reduces = args.kind == ZRT_COLL_ALL_REDUCE || args.kind == ZRT_COLL_REDUCE ||
                       args.kind == ZRT_COLL_REDUCE_SCATTER;
  if (reduces && !args.premul) ZRT_RETURN_IF_ERROR(nccl_op(args.op, args.dtype, &op));
  if (reduces && args.premul) {
    PremulScalar scalar;
    ZRT_RETURN_IF_ERROR(make_premul_scalar(args.dtype, args.premul_scale, &scalar));
    // Each collective gets its own op, destroyed once its group has been launched: no table
    // of ops to keep in step with zrt's. Inside a group NCCL only records the call, so the op
    // must outlive ncclGroupEnd, not just this call.
    ZRT_RETURN_IF_ERROR(
        nccl_status(ncclRedOpCreatePreMulSum(&op, &scalar, type, ncclScalarHostImmediate, comm_),
                    "ncclRedOpCreatePreMulSum"));
    created_ops->push_back(op);
  }
  ncclResult_t result = ncclSuccess;
  switch (args.kind) {
    case ZRT_COLL_ALL_REDUCE:
      result = ncclAllReduce(args.sendbuf, args.recvbuf, args.count, type, op, comm_, stream);
      break;
    case ZRT_COLL_REDUCE_SCATTER:
      result = ncclReduceScatter(args.sendbuf, args.recvbuf, args.count, type, op, comm_, stream);
      break;
    case ZRT_COLL_ALL_GATHER:
      result = ncclAllGather(args.sendbuf, args.recvbuf, args.count, type, comm_, stream);
      break;
    case ZRT_COLL_BROADCAST:
      result =
          ncclBroadcast(args.sendbuf, args.recvbuf, args.count, type, args.root, comm_, stream);
      break;
    case ZRT_COLL_REDUCE:
      result =
          ncclReduce(args.sendbuf, args.recvbuf, args.count, type, op, args.root, comm_, stream);
      break;
    case ZRT_COLL_BARRIER:
      result =
          ncclAllReduce(barrier_scratch, barrier_scratch, 1, ncclInt32, ncclSum, comm_, stream);
      break;
    case ZRT_COLL_SEND:
      result = ncclSend(args.sendbuf, args.count, type, args.peer, comm_, stream);
      break;
    case ZRT_COLL_RECV:
      result = ncclRecv(args.recvbuf, args.count, type, args.peer, comm_, stream);
      break;
    default:
      result = ncclInvalidArgument;
      break;
  }
  if (result == ncclSuccess || result == ncclInProgress) return Status::ok();
  return nccl_status(result, what);
}

Status NcclComm::enqueue(const CollectiveArgs* args, size_t count, cudaStream_t stream,
                         void* barrier_scratch) {
  if (failed_) return failure();
  std::lock_guard<std::mutex> lock(call_mutex_);
  if (destroyed_) return Status::invalid_usage("NCCL communicator '{}' destroyed", options_.name);
  DeviceGuard device_guard;
  ZRT_RETURN_IF_ERROR(device_guard.enter(options_.device));
  // Inside a group NCCL only records the calls; ncclGroupEnd launches them together and, in
  // non-blocking mode, may return ncclInProgress, which settle() waits out.
  ZRT_RETURN_IF_ERROR(settle(ncclGroupStart(), "ncclGroupStart"));
  Status status;
  std::vector<ncclRedOp_t> created_ops;
  for (size_t i = 0; i < count && status.is_ok(); ++i) {
    status = enqueue_one(args[i], stream, barrier_scratch, &created_ops);
    if (!status.is_ok()) {
      status = status.with_context(fmt::format("collective {} of {} in the batch", i, count));
    }
  }
  // Always end the group: an unbalanced ncclGroupStart would poison every later call.
  Status ended = settle(ncclGroupEnd(), "ncclGroupEnd");
  for (ncclRedOp_t op : created_ops) {
    Status destroyed = nccl_status(ncclRedOpDestroy(op, comm_), "ncclRedOpDestroy");
    if (ended.is_ok()) ended = destroyed;
  }
  if (!status.is_ok()) return status;
  return ended;
}

}  // namespace zrt
