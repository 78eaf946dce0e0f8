// enqueue_collective: argument checks (every message names the argument), the choice of
// algorithm, and the task that runs it.
#include <cstdint>
#include <memory>

#include <fmt/format.h>

#include "collectives/algorithm.h"
#include "collectives/algorithm_plan.h"
#include "collectives/barrier.h"
#include "collectives/broadcast_chain.h"
#include "collectives/coll_task.h"
#include "collectives/collectives.h"
#include "collectives/direct_all_reduce.h"
#include "collectives/local_copy.h"
#include "collectives/one_shot.h"
#include "collectives/one_shot_lane.h"
#include "collectives/order_check.h"
#include "collectives/point_to_point.h"
#include "collectives/recursive_doubling_all_reduce.h"
#include "collectives/reduce_chain.h"
#include "collectives/ring_all_gather.h"
#include "collectives/ring_reduce_scatter.h"
#include "collectives/two_level_all_gather.h"
#include "collectives/two_level_reduce_scatter.h"
#include "collectives/window_all_gather.h"
#include "collectives/window_reduce_scatter.h"
#include "lib/core/dtype.h"
#include "lib/core/log.h"
#include "lib/engine/device.h"
#include "lib/engine/engine.h"
#include "lib/engine/stream_resources.h"

namespace zrt {
namespace {

// The smallest block the ring all-reduce gathers by cma. Below it the window ring's all-gather,
// which goes on from the reduce-scatter's last unit with the inbox still in cache, was faster:
// 2 ranks bound, release, in place, 5 alternated rounds, µs per all-reduce by the ring's
// all-gather / by cma: 1 MiB (512 KiB blocks) 155 / 179; 2 MiB 359 / 336; 4 MiB 697 / 603.
constexpr size_t kCmaGatherMinBlockBytes = size_t{1} << 20;

bool overlaps(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  if (a_bytes == 0 || b_bytes == 0) return false;
  const auto x = reinterpret_cast<uintptr_t>(a);
  const auto y = reinterpret_cast<uintptr_t>(b);
  return x < y + b_bytes && y < x + a_bytes;
}

Status check_layout(const char* name, const void* send, size_t send_bytes, const void* recv,
                    size_t recv_bytes, const void* in_place_send) {
  if (send == in_place_send) return Status::ok();
  if (overlaps(send, send_bytes, recv, recv_bytes)) {
    return Status::invalid_argument(
        "{}: sendbuf and recvbuf overlap but are not the in-place layout (see zrt.h)", name);
  }
  return Status::ok();
}

Status reduce_spec(const CollectiveArgs& args, int size, const char* name, ReduceSpec* spec) {
  spec->dtype = args.dtype;
  spec->element_size = dtype_size(args.dtype);
  spec->scale = 1.0;
  if (args.premul) {
    if (!dtype_is_floating(args.dtype)) {
      return Status::invalid_argument("{}: op (premul_sum) needs a floating dtype, got {}", name,
                                      dtype_name(args.dtype));
    }
    spec->op = ReduceOp::kSum;
    spec->scale = args.premul_scale;
    return Status::ok();
  }
  switch (args.op) {
    case ZRT_SUM:
      spec->op = ReduceOp::kSum;
      break;
    case ZRT_AVG:
      if (!dtype_is_floating(args.dtype)) {
        return Status::invalid_argument(
            "{}: op avg is defined for floating dtypes only, got {} (use sum and divide)", name,
            dtype_name(args.dtype));
      }
      spec->op = ReduceOp::kSum;
      spec->scale = 1.0 / size;
      break;
    case ZRT_MIN:
      spec->op = ReduceOp::kMin;
      break;
    case ZRT_MAX:
      spec->op = ReduceOp::kMax;
      break;
    case ZRT_PROD:
      spec->op = ReduceOp::kProd;
      break;
    default:
      return Status::invalid_argument("{}: op {} is not a zrt_op_t of this communicator", name,
                                      static_cast<int>(args.op));
  }
  return Status::ok();
}

CallDescription describe(const CollectiveArgs& args) {
  CallDescription call;
  call.kind = args.kind;
  call.count = args.count;
  call.dtype = args.dtype;
  call.op = args.premul ? "premul_sum" : op_name(args.op);
  call.root = args.root;
  call.peer = args.peer;
  return call;
}

TraceCall trace_call(const CollectiveArgs& args) {
  TraceCall call;
  call.kind = args.kind;
  if (args.kind == ZRT_COLL_BARRIER) return call;
  call.count = args.count;
  call.dtype = args.dtype;
  const bool reduces = args.kind == ZRT_COLL_ALL_REDUCE || args.kind == ZRT_COLL_REDUCE_SCATTER ||
                       args.kind == ZRT_COLL_REDUCE;
  if (reduces) call.op = args.premul ? 0xff : args.op;
  if (args.kind == ZRT_COLL_BROADCAST || args.kind == ZRT_COLL_REDUCE) call.root = args.root;
  if (args.kind == ZRT_COLL_SEND || args.kind == ZRT_COLL_RECV) call.peer = args.peer;
  call.purpose = static_cast<int>(args.purpose);
  call.purpose_id = args.purpose_id;
  return call;
}

}  // namespace

Status enqueue_collective(Stream& stream, int rank, int size, const CollectiveArgs& args) {
  if (args.kind < 0 || args.kind >= ZRT_COLL_KIND_COUNT) {
    return Status::invalid_argument("collective kind {} is unknown", static_cast<int>(args.kind));
  }
  const char* name = coll_kind_name(args.kind);
  if (size < 1 || rank < 0 || rank >= size) {
    return Status::invalid_argument("{}: rank {} out of range for size {}", name, rank, size);
  }
  const bool is_barrier = args.kind == ZRT_COLL_BARRIER;
  if (!is_barrier) ZRT_RETURN_IF_ERROR(check_dtype(args.dtype, "dtype").with_context(name));
  const size_t esize = is_barrier ? 1 : dtype_size(args.dtype);
  const size_t bytes = args.count * esize;
  const size_t n = static_cast<size_t>(size);
  size_t total_bytes = 0;  // a multiplication's overflow check: two divisions cost more (perf)
  if (!is_barrier && __builtin_mul_overflow(args.count, esize * n, &total_bytes)) {
    return Status::invalid_argument("{}: count {} is too large", name, args.count);
  }
  const bool rooted = args.kind == ZRT_COLL_BROADCAST || args.kind == ZRT_COLL_REDUCE;
  if (rooted && (args.root < 0 || args.root >= size)) {
    return Status::invalid_argument("{}: root {} is out of range for size {}", name, args.root,
                                    size);
  }
  const bool p2p = args.kind == ZRT_COLL_SEND || args.kind == ZRT_COLL_RECV;
  if (p2p && (args.peer < 0 || args.peer >= size)) {
    return Status::invalid_argument("{}: peer {} is out of range for size {}", name, args.peer,
                                    size);
  }
  const bool reduces = args.kind == ZRT_COLL_ALL_REDUCE || args.kind == ZRT_COLL_REDUCE_SCATTER ||
                       args.kind == ZRT_COLL_REDUCE;
  ReduceSpec spec;
  spec.dtype = args.dtype;
  spec.element_size = esize;
  if (reduces) ZRT_RETURN_IF_ERROR(reduce_spec(args, size, name, &spec));
  // The reduce-scatter's output (count elements); for the ring all-reduce, its own block.
  spec.stream_output =
      args.output_read_late ||
      args.count * esize >= kStreamOutputMinBytes * (args.kind == ZRT_COLL_ALL_REDUCE ? n : 1);

  // Which buffers this rank reads and writes, and their sizes.
  size_t send_bytes = 0, recv_bytes = 0;
  bool need_send = false, need_recv = false;
  const void* in_place_send = args.recvbuf;
  switch (args.kind) {
    case ZRT_COLL_ALL_REDUCE:
      send_bytes = recv_bytes = bytes;
      need_send = need_recv = true;
      break;
    case ZRT_COLL_REDUCE_SCATTER:
      send_bytes = bytes * n;
      recv_bytes = bytes;
      need_send = need_recv = true;
      in_place_send = nullptr;  // checked below: recvbuf == sendbuf + rank * count
      break;
    case ZRT_COLL_ALL_GATHER:
      send_bytes = bytes;
      recv_bytes = bytes * n;
      need_send = need_recv = true;
      in_place_send =
          args.recvbuf == nullptr ? nullptr : static_cast<const char*>(args.recvbuf) + rank * bytes;
      break;
    case ZRT_COLL_BROADCAST:
      send_bytes = args.root == rank ? bytes : 0;
      recv_bytes = bytes;
      need_send = args.root == rank;
      need_recv = true;
      break;
    case ZRT_COLL_REDUCE:
      send_bytes = bytes;
      recv_bytes = args.root == rank ? bytes : 0;
      need_send = true;
      need_recv = args.root == rank;
      break;
    case ZRT_COLL_SEND:
      send_bytes = bytes;
      need_send = true;
      break;
    case ZRT_COLL_RECV:
      recv_bytes = bytes;
      need_recv = true;
      break;
    default:
      break;
  }
  if (args.count > 0 && need_send && args.sendbuf == nullptr) {
    return Status::invalid_argument("{}: sendbuf is NULL with count {}", name, args.count);
  }
  if (args.count > 0 && need_recv && args.recvbuf == nullptr) {
    return Status::invalid_argument("{}: recvbuf is NULL with count {}", name, args.count);
  }
  if (need_send && need_recv) {
    if (args.kind == ZRT_COLL_REDUCE_SCATTER) {
      const void* in_place_recv =
          args.sendbuf == nullptr ? nullptr : static_cast<const char*>(args.sendbuf) + rank * bytes;
      if (args.recvbuf != in_place_recv &&
          overlaps(args.sendbuf, send_bytes, args.recvbuf, recv_bytes)) {
        return Status::invalid_argument(
            "{}: sendbuf and recvbuf overlap but recvbuf != sendbuf + rank * recvcount", name);
      }
    } else {
      ZRT_RETURN_IF_ERROR(
          check_layout(name, args.sendbuf, send_bytes, args.recvbuf, recv_bytes, in_place_send));
    }
  }

  if (stream.mem_kind() != ZRT_MEM_HOST) {
    // Device streams run collectives as device calls, not as host Tasks.
    auto* device = dynamic_cast<DeviceStream*>(&stream);
    if (device == nullptr) {
      return Status::error(ZRT_UNSUPPORTED, "{}: stream {} is neither a host nor a device stream",
                           name, stream.index());
    }
    return device->enqueue_collectives(rank, size, &args, 1);
  }

  // On the stack: a one-shot collective may run and complete on this thread (one_shot_lane.h);
  // the others move to the heap for the stream's queue.
  CollTask task(describe(args), p2p ? args.peer : -1, args.kind == ZRT_COLL_SEND);
  if (!p2p) task.set_fingerprint(make_fingerprint(args));
  task.set_trace(trace_call(args));
  if (args.purpose == Purpose::kInternal) task.set_internal();
  auto enqueue_task = [&] { return stream.enqueue(std::make_unique<CollTask>(std::move(task))); };
  const void* send = args.sendbuf;
  void* recv = args.recvbuf;
  if (p2p) {
    if (args.peer == rank) task.set_local();
    if (args.kind == ZRT_COLL_SEND) {
      task.add_phase(std::make_unique<SendPhase>(send, bytes, args.peer));
    } else {
      task.add_phase(std::make_unique<RecvPhase>(recv, bytes, args.peer));
    }
    return enqueue_task();
  }
  if (size == 1) {
    task.set_local();
    switch (args.kind) {
      case ZRT_COLL_ALL_REDUCE:
      case ZRT_COLL_REDUCE_SCATTER:
      case ZRT_COLL_REDUCE:
        task.add_phase(std::make_unique<LocalCopy>(send, recv, args.count, spec));
        break;
      case ZRT_COLL_ALL_GATHER:
      case ZRT_COLL_BROADCAST:
        task.add_phase(std::make_unique<LocalCopy>(send, recv, args.count, spec));
        break;
      default:
        break;  // barrier of one
    }
    return enqueue_task();
  }

  // Ranks on several hosts: the rings run inside each host, then across (two_level_*.h).
  const EngineOptions& options = stream.engine().options();
  const int two_level_hosts = options.two_level_hosts;
  const HostGrid grid{two_level_hosts, two_level_hosts > 1 ? size / two_level_hosts : size};
  const bool two_level = two_level_hosts > 1;
  // Rings write into the neighbour's mapped inbox when the neighbours share a host
  // (EngineOptions::peer_windows), else send tagged messages: with every rank on this host the
  // one ring (`windows`), else the two-level collectives' ring inside each host.
  const bool host_windows = two_level && options.peer_windows;
  const bool windows = !two_level && options.peer_windows;
  const uint64_t table_bytes =
      args.kind == ZRT_COLL_ALL_REDUCE ? uint64_t{bytes} : uint64_t{bytes} * size;
  // One-shot collectives need every rank's arena mapped (one host), a stream that has an arena
  // and the deposit to fit a slot.
  const bool arena = windows && !two_level && stream.index() < kOneShotStreams;
  const bool one_shot =
      arena && OneShotPhase::deposit_bytes(args.kind, args.count, esize, size) <= kOneShotSlotBytes;
  // The cma all-gather needs the arena's headers and the probe's verdict (peer_pids), no slot.
  const bool cma = arena && options.peer_pids.size() == n;
  // A pointer, not an optional: the optional's 300 bytes were zeroed on every call (perf).
  std::unique_ptr<AlgorithmPlan> own_plan;
  if (options.algorithm_plan == nullptr) {
    own_plan = std::make_unique<AlgorithmPlan>(
        options.all_reduce_algorithm.value_or(AllReduceAlgorithm::kAuto),
        options.algorithm_table.get(), size, options.hosts);
  }
  const AlgorithmPlan& plan =
      options.algorithm_plan != nullptr ? *options.algorithm_plan : *own_plan;
  auto choose = [&](TableOp op) { return plan.choose(op, table_bytes, one_shot, cma); };
  auto run_one_shot = [&](const void* input, void* output, OneShotOrder order,
                          const std::vector<int>* peer_pids = nullptr) {
    return run_one_shot_collective(
        stream, task, OneShotPhase(args.kind, input, output, args.count, spec, order, peer_pids));
  };
  // One-shot reduces in the order of the algorithm the table would run in its place, so that
  // choosing it never changes a result's bits (one_shot.h): the direct all-reduce's or the ring's.
  auto replaced_order = [&] {
    return plan.choose(TableOp::kAllReduce, table_bytes, false, cma) == AllReduceAlgorithm::kDirect
               ? OneShotOrder::kRank
               : OneShotOrder::kRing;
  };
  switch (args.kind) {
    case ZRT_COLL_ALL_REDUCE: {
      const AllReduceAlgorithm algorithm = choose(TableOp::kAllReduce);
      if (algorithm == AllReduceAlgorithm::kOneShot) {
        return run_one_shot(send, recv, replaced_order());
      } else if (algorithm == AllReduceAlgorithm::kTwoShot) {
        OneShotPhase phase(args.kind, send, recv, args.count, spec, replaced_order());
        phase.set_two_shot();
        return run_one_shot_collective(stream, task, std::move(phase));
      } else if (algorithm == AllReduceAlgorithm::kDirect) {
        task.add_phase(std::make_unique<DirectAllReduce>(send, recv, args.count, spec));
      } else if (algorithm == AllReduceAlgorithm::kRecursiveDoubling) {
        task.add_phase(std::make_unique<RecursiveDoublingAllReduce>(send, recv, args.count, spec));
      } else if (algorithm == AllReduceAlgorithm::kRing) {
        const BlockLayout layout = BlockLayout::split(args.count, size);
        char* own = static_cast<char*>(recv) + layout.offset(rank) * esize;
        if (two_level) {
          task.add_phase(std::make_unique<TwoLevelReduceScatter>(send, own, layout, spec, grid, 0,
                                                                 host_windows));
          task.add_phase(std::make_unique<TwoLevelAllGather>(own, recv, layout, esize, grid,
                                                             kTwoLevelGatherTags, host_windows));
        } else if (windows) {
          task.add_phase(std::make_unique<WindowReduceScatter>(send, own, layout, spec, 0));
          // The second half is the all-gather the table runs for these blocks: cma where it
          // says so, the blocks are equal and at least kCmaGatherMinBlockBytes (one copy out of
          // each peer's reduced block, where the window ring makes two).
          if (layout.length(0) == layout.length(size - 1) &&
              layout.length(rank) * esize >= kCmaGatherMinBlockBytes &&
              plan.choose(TableOp::kAllGather, bytes, false, cma) == AllReduceAlgorithm::kCma) {
            auto gather =
                std::make_unique<OneShotPhase>(ZRT_COLL_ALL_GATHER, own, recv, layout.length(rank),
                                               spec, OneShotOrder::kRing, &options.peer_pids);
            gather->set_after_announced_phase();
            task.add_phase(std::move(gather));
            // A rank that gathers by the window ring instead would wait here without a word:
            // the reduce-scatter's first message carries the fingerprint, which names this.
            task.set_fingerprint_variant(OrderFingerprint::kGatherByCma);
          } else {
            const uint32_t after =
                WindowPhase::units(layout, size, esize, options.window_slot_bytes);
            task.add_phase(std::make_unique<WindowAllGather>(own, recv, layout, esize, after));
          }
        } else {
          task.add_phase(std::make_unique<RingReduceScatter>(send, own, layout, spec, 0));
          const uint32_t after = RingReduceScatter::units(layout, size, esize);
          task.add_phase(std::make_unique<RingAllGather>(own, recv, layout, esize, after));
        }
      } else {
        return Status::error(ZRT_INTERNAL_ERROR, "{}: no all_reduce algorithm '{}'", name,
                             algorithm_name(algorithm));
      }
      break;
    }
    case ZRT_COLL_REDUCE_SCATTER: {
      const AllReduceAlgorithm algorithm = choose(TableOp::kReduceScatter);
      if (algorithm == AllReduceAlgorithm::kOneShot) {
        return run_one_shot(send, recv, OneShotOrder::kRing);
      }
      if (algorithm != AllReduceAlgorithm::kRing) {
        return Status::error(ZRT_INTERNAL_ERROR, "{}: no reduce_scatter algorithm '{}'", name,
                             algorithm_name(algorithm));
      }
      if (two_level) {
        task.add_phase(std::make_unique<TwoLevelReduceScatter>(
            send, recv, BlockLayout{args.count, 0}, spec, grid, 0, host_windows));
      } else if (windows) {
        task.add_phase(
            std::make_unique<WindowReduceScatter>(send, recv, BlockLayout{args.count, 0}, spec, 0));
      } else {
        task.add_phase(
            std::make_unique<RingReduceScatter>(send, recv, BlockLayout{args.count, 0}, spec, 0));
      }
      break;
    }
    case ZRT_COLL_ALL_GATHER: {
      const AllReduceAlgorithm algorithm = choose(TableOp::kAllGather);
      if (algorithm == AllReduceAlgorithm::kOneShot || algorithm == AllReduceAlgorithm::kCma) {
        return run_one_shot(send, recv, OneShotOrder::kRing,
                            algorithm == AllReduceAlgorithm::kCma ? &options.peer_pids : nullptr);
      }
      if (algorithm != AllReduceAlgorithm::kRing) {
        return Status::error(ZRT_INTERNAL_ERROR, "{}: no all_gather algorithm '{}'", name,
                             algorithm_name(algorithm));
      }
      if (two_level) {
        task.add_phase(std::make_unique<TwoLevelAllGather>(send, recv, BlockLayout{args.count, 0},
                                                           esize, grid, 0, host_windows));
      } else if (windows) {
        task.add_phase(
            std::make_unique<WindowAllGather>(send, recv, BlockLayout{args.count, 0}, esize, 0));
      } else {
        task.add_phase(
            std::make_unique<RingAllGather>(send, recv, BlockLayout{args.count, 0}, esize, 0));
      }
      break;
    }
    case ZRT_COLL_BROADCAST:
      task.add_phase(std::make_unique<BroadcastChain>(send, recv, bytes, args.root));
      break;
    case ZRT_COLL_REDUCE:
      task.add_phase(std::make_unique<ReduceChain>(send, recv, args.count, spec, args.root));
      break;
    case ZRT_COLL_BARRIER:
      task.add_phase(std::make_unique<DisseminationBarrier>());
      break;
    default:
      return Status(ZRT_INTERNAL_ERROR, "unhandled collective kind");
  }
  return enqueue_task();
}

}  // namespace zrt
