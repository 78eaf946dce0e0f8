// The collective and point-to-point entry points: handle checks here, argument checks and the
// algorithm in collectives/ (enqueue_collective).
#include "collectives/collectives.h"
#include "zero/api/api_common.h"

using zrt::CollectiveArgs;
using zrt::Status;

namespace {

// Resolves comm, stream and op into args and enqueues. `has_op` false for ops without a
// reduction. `call` by reference, copied only for a premul op: copied on every call, the struct
// was a store-forwarding stall in an 8-byte all-reduce's profile.
Status enqueue(zrt_comm* comm, zrt_stream* stream, const CollectiveArgs& call, bool has_op) {
  ZRT_RETURN_IF_ERROR(zrt::api::check_comm(comm, "comm"));
  zrt::Stream* target = nullptr;
  ZRT_RETURN_IF_ERROR(zrt::api::resolve_stream(comm, stream, "stream", &target));
  if (has_op && static_cast<int>(call.op) >= ZRT_OP_COUNT) {
    double scalar = 1.0;
    if (!comm->impl->lookup_premul_op(call.op, &scalar)) {
      return Status::invalid_argument("op {} is neither a built-in op nor a live op of comm",
                                      static_cast<int>(call.op));
    }
    CollectiveArgs args = call;
    args.premul = true;
    args.premul_scale = scalar;
    return zrt::enqueue_collective(*target, comm->impl->rank(), comm->impl->size(), args);
  }
  if (has_op && static_cast<int>(call.op) < 0) {
    return Status::invalid_argument("op {} is not a zrt_op_t", static_cast<int>(call.op));
  }
  return zrt::enqueue_collective(*target, comm->impl->rank(), comm->impl->size(), call);
}

CollectiveArgs make_args(zrt_coll_kind_t kind, const void* sendbuf, void* recvbuf, size_t count,
                         zrt_dtype_t dtype) {
  CollectiveArgs args;
  args.kind = kind;
  args.sendbuf = sendbuf;
  args.recvbuf = recvbuf;
  args.count = count;
  args.dtype = dtype;
  return args;
}

}  // namespace

extern "C" {

zrt_status_t zrt_all_reduce(zrt_comm_t comm, const void* sendbuf, void* recvbuf, size_t count,
                            zrt_dtype_t dtype, zrt_op_t op, zrt_stream_t stream) {
  ZRT_API_BODY("zrt_all_reduce", {
    CollectiveArgs args = make_args(ZRT_COLL_ALL_REDUCE, sendbuf, recvbuf, count, dtype);
    args.op = op;
    return enqueue(comm, stream, args, true);
  });
}

zrt_status_t zrt_reduce_scatter(zrt_comm_t comm, const void* sendbuf, void* recvbuf,
                                size_t recvcount, zrt_dtype_t dtype, zrt_op_t op,
                                zrt_stream_t stream) {
  ZRT_API_BODY("zrt_reduce_scatter", {
    CollectiveArgs args = make_args(ZRT_COLL_REDUCE_SCATTER, sendbuf, recvbuf, recvcount, dtype);
    args.op = op;
    return enqueue(comm, stream, args, true);
  });
}

zrt_status_t zrt_all_gather(zrt_comm_t comm, const void* sendbuf, void* recvbuf, size_t sendcount,
                            zrt_dtype_t dtype, zrt_stream_t stream) {
  ZRT_API_BODY("zrt_all_gather", {
    return enqueue(comm, stream, make_args(ZRT_COLL_ALL_GATHER, sendbuf, recvbuf, sendcount, dtype),
                   false);
  });
}

zrt_status_t zrt_broadcast(zrt_comm_t comm, const void* sendbuf, void* recvbuf, size_t count,
                           zrt_dtype_t dtype, int root, zrt_stream_t stream) {
  ZRT_API_BODY("zrt_broadcast", {
    CollectiveArgs args = make_args(ZRT_COLL_BROADCAST, sendbuf, recvbuf, count, dtype);
    args.root = root;
    return enqueue(comm, stream, args, false);
  });
}

zrt_status_t zrt_reduce(zrt_comm_t comm, const void* sendbuf, void* recvbuf, size_t count,
                        zrt_dtype_t dtype, zrt_op_t op, int root, zrt_stream_t stream) {
  ZRT_API_BODY("zrt_reduce", {
    CollectiveArgs args = make_args(ZRT_COLL_REDUCE, sendbuf, recvbuf, count, dtype);
    args.op = op;
    args.root = root;
    return enqueue(comm, stream, args, true);
  });
}

zrt_status_t zrt_barrier(zrt_comm_t comm, zrt_stream_t stream) {
  ZRT_API_BODY("zrt_barrier", {
    return enqueue(comm, stream, make_args(ZRT_COLL_BARRIER, nullptr, nullptr, 0, ZRT_U8), false);
  });
}

zrt_status_t zrt_send(zrt_comm_t comm, const void* sendbuf, size_t count, zrt_dtype_t dtype,
                      int peer, zrt_stream_t stream) {
  ZRT_API_BODY("zrt_send", {
    CollectiveArgs args = make_args(ZRT_COLL_SEND, sendbuf, nullptr, count, dtype);
    args.peer = peer;
    return enqueue(comm, stream, args, false);
  });
}

zrt_status_t zrt_recv(zrt_comm_t comm, void* recvbuf, size_t count, zrt_dtype_t dtype, int peer,
                      zrt_stream_t stream) {
  ZRT_API_BODY("zrt_recv", {
    CollectiveArgs args = make_args(ZRT_COLL_RECV, nullptr, recvbuf, count, dtype);
    args.peer = peer;
    return enqueue(comm, stream, args, false);
  });
}

}  // extern "C"
