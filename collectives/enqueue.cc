// enqueue_collective: argument checks (every message names the argument), the choice of
// algorithm, and the task that runs it.
#include <array>
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
#include "engine/device.h"
#include "engine/engine.h"
#include "engine/stream_resources.h"

namespace zrt {
namespace {

// The smallest block the ring all-reduce gathers by cma. Below it the window ring's all-gather,
// which goes on from the reduce-scatter's last unit with the inbox still in cache, was faster:
// 2 ranks bound, release, in place, 5 alternated rounds, µs per all-reduce by the ring's
// all-gather / by cma: 1 MiB (512 KiB blocks) 155 / 179; 2 MiB 359 / 336; 4 MiB 697 / 603
// (measured: docs/ARCHITECTURE.md#the-cma-all-gather, "In the ring all-reduce").
constexpr size_t kCmaGatherMinBlockBytes = size_t{1} << 20;

// How much of a buffer a rank uses.
enum class Extent : uint8_t {
  kNone,
  kCount,         // count elements
  kCountPerRank,  // count elements per rank
  kCountAtRoot,   // count elements on the root, none elsewhere
};

// The one layout in which a kind's sendbuf and recvbuf may overlap (zrt.h's in-place forms).
enum class InPlace : uint8_t {
  kSameBuffer,  // sendbuf == recvbuf
  kSendInRecv,  // sendbuf == recvbuf + rank * count (all-gather)
  kRecvInSend,  // recvbuf == sendbuf + rank * count (reduce-scatter)
  kNoPair,      // no rank uses both buffers
};

// What a collective kind requires of its arguments. check_call and check_buffers check them in
// the order of the fields, which decides the message a call with several faults gets.
struct KindRule {
  zrt_coll_kind_t kind;
  bool typed;        // moves count elements of dtype (the barrier moves none)
  bool rooted;       // root names a rank
  bool p2p;          // peer names a rank
  bool reduces;      // op is an op of dtype
  Extent send;       // what this rank reads of sendbuf
  Extent recv;       // what it writes of recvbuf
  InPlace in_place;  // where the two may overlap
};

constexpr std::array<KindRule, ZRT_COLL_KIND_COUNT> kind_rules() {
  using enum Extent;
  using enum InPlace;
  // clang-format off
  return {{
  // kind                  typed  root   peer   op     sendbuf        recvbuf        in place
  {ZRT_COLL_ALL_REDUCE,     true,  false, false, true,  kCount,        kCount,        kSameBuffer},
  {ZRT_COLL_REDUCE_SCATTER, true,  false, false, true,  kCountPerRank, kCount,        kRecvInSend},
  {ZRT_COLL_ALL_GATHER,     true,  false, false, false, kCount,        kCountPerRank, kSendInRecv},
  {ZRT_COLL_BROADCAST,      true,  true,  false, false, kCountAtRoot,  kCount,        kSameBuffer},
  {ZRT_COLL_REDUCE,         true,  true,  false, true,  kCount,        kCountAtRoot,  kSameBuffer},
  {ZRT_COLL_BARRIER,        false, false, false, false, kNone,         kNone,         kNoPair},
  {ZRT_COLL_SEND,           true,  false, true,  false, kCount,        kNone,         kNoPair},
  {ZRT_COLL_RECV,           true,  false, true,  false, kNone,         kCount,        kNoPair},
  }};
  // clang-format on
}

constexpr std::array<KindRule, ZRT_COLL_KIND_COUNT> kKindRules = kind_rules();

constexpr bool rules_in_kind_order() {
  for (size_t i = 0; i < kKindRules.size(); ++i) {
    if (static_cast<size_t>(kKindRules[i].kind) != i) return false;
  }
  return true;
}
static_assert(rules_in_kind_order(), "kKindRules is indexed by zrt_coll_kind_t");

// A call that passed check_call: its kind's rule, and what the routing needs of it.
struct CheckedCall {
  const KindRule* rule = nullptr;
  const char* name = "";
  size_t element_size = 1;
  size_t bytes = 0;  // count elements
  ReduceSpec spec;
};

bool overlaps(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  if (a_bytes == 0 || b_bytes == 0) return false;
  const auto x = reinterpret_cast<uintptr_t>(a);
  const auto y = reinterpret_cast<uintptr_t>(b);
  return x < y + b_bytes && y < x + a_bytes;
}

size_t extent_bytes(Extent extent, size_t bytes, size_t ranks, bool at_root) {
  switch (extent) {
    case Extent::kCount:
      return bytes;
    case Extent::kCountPerRank:
      return bytes * ranks;
    case Extent::kCountAtRoot:
      return at_root ? bytes : 0;
    case Extent::kNone:
      break;
  }
  return 0;
}

bool uses(Extent extent, bool at_root) {
  return extent == Extent::kCount || extent == Extent::kCountPerRank ||
         (extent == Extent::kCountAtRoot && at_root);
}

// sendbuf and recvbuf, both used by this rank, overlap only in the kind's in-place layout.
// `block_bytes`: count elements, the block an all-gather's or reduce-scatter's layout offsets by.
Status check_layout(InPlace in_place, const char* name, int rank, const CollectiveArgs& args,
                    size_t send_bytes, size_t recv_bytes, size_t block_bytes) {
  const void* in_place_send = args.recvbuf;
  switch (in_place) {
    case InPlace::kRecvInSend: {
      const void* in_place_recv =
          args.sendbuf == nullptr ? nullptr
                                  : static_cast<const char*>(args.sendbuf) + rank * block_bytes;
      if (args.recvbuf != in_place_recv &&
          overlaps(args.sendbuf, send_bytes, args.recvbuf, recv_bytes)) {
        return Status::invalid_argument(
            "{}: sendbuf and recvbuf overlap but recvbuf != sendbuf + rank * recvcount", name);
      }
      return Status::ok();
    }
    case InPlace::kSendInRecv:
      in_place_send = args.recvbuf == nullptr
                          ? nullptr
                          : static_cast<const char*>(args.recvbuf) + rank * block_bytes;
      break;
    case InPlace::kSameBuffer:
      break;
    case InPlace::kNoPair:
      return Status::ok();
  }
  if (args.sendbuf == in_place_send) return Status::ok();
  if (overlaps(args.sendbuf, send_bytes, args.recvbuf, recv_bytes)) {
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

// The kind, the rank, then what the kind's rule requires of count, dtype, root, peer and op.
Status check_call(int rank, int size, const CollectiveArgs& args, CheckedCall* call) {
  if (args.kind < 0 || args.kind >= ZRT_COLL_KIND_COUNT) {
    return Status::invalid_argument("collective kind {} is unknown", static_cast<int>(args.kind));
  }
  const KindRule& rule = kKindRules[args.kind];
  const char* name = coll_kind_name(args.kind);
  if (size < 1 || rank < 0 || rank >= size) {
    return Status::invalid_argument("{}: rank {} out of range for size {}", name, rank, size);
  }
  if (rule.typed) ZRT_RETURN_IF_ERROR(check_dtype(args.dtype, "dtype").with_context(name));
  const size_t esize = rule.typed ? dtype_size(args.dtype) : 1;
  const size_t n = static_cast<size_t>(size);
  size_t total_bytes = 0;  // a multiplication's overflow check: two divisions cost more (perf)
  if (rule.typed && __builtin_mul_overflow(args.count, esize * n, &total_bytes)) {
    return Status::invalid_argument("{}: count {} is too large", name, args.count);
  }
  if (rule.rooted && (args.root < 0 || args.root >= size)) {
    return Status::invalid_argument("{}: root {} is out of range for size {}", name, args.root,
                                    size);
  }
  if (rule.p2p && (args.peer < 0 || args.peer >= size)) {
    return Status::invalid_argument("{}: peer {} is out of range for size {}", name, args.peer,
                                    size);
  }
  call->rule = &rule;
  call->name = name;
  call->element_size = esize;
  call->bytes = args.count * esize;
  ReduceSpec& spec = call->spec;
  spec.dtype = args.dtype;
  spec.element_size = esize;
  if (rule.reduces) ZRT_RETURN_IF_ERROR(reduce_spec(args, size, name, &spec));
  // The reduce-scatter's output (count elements); for the ring all-reduce, its own block.
  spec.stream_output =
      args.output_read_late ||
      args.count * esize >= kStreamOutputMinBytes * (args.kind == ZRT_COLL_ALL_REDUCE ? n : 1);
  return Status::ok();
}

// The buffers this rank reads and writes, by the kind's rule: present, and apart unless in place.
Status check_buffers(int rank, int size, const CollectiveArgs& args, const CheckedCall& call) {
  const KindRule& rule = *call.rule;
  const bool at_root = args.root == rank;
  const bool need_send = uses(rule.send, at_root);
  const bool need_recv = uses(rule.recv, at_root);
  if (args.count > 0 && need_send && args.sendbuf == nullptr) {
    return Status::invalid_argument("{}: sendbuf is NULL with count {}", call.name, args.count);
  }
  if (args.count > 0 && need_recv && args.recvbuf == nullptr) {
    return Status::invalid_argument("{}: recvbuf is NULL with count {}", call.name, args.count);
  }
  if (!need_send || !need_recv) return Status::ok();
  const size_t n = static_cast<size_t>(size);
  return check_layout(rule.in_place, call.name, rank, args,
                      extent_bytes(rule.send, call.bytes, n, at_root),
                      extent_bytes(rule.recv, call.bytes, n, at_root), call.bytes);
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

TraceCall trace_call(const CollectiveArgs& args, const KindRule& rule) {
  TraceCall call;
  call.kind = args.kind;
  if (args.kind == ZRT_COLL_BARRIER) return call;
  call.count = args.count;
  call.dtype = args.dtype;
  if (rule.reduces) call.op = args.premul ? 0xff : args.op;
  if (rule.rooted) call.root = args.root;
  if (rule.p2p) call.peer = args.peer;
  call.purpose = static_cast<int>(args.purpose);
  call.purpose_id = args.purpose_id;
  return call;
}

Status enqueue_on_device(Stream& stream, int rank, int size, const CollectiveArgs& args,
                         const char* name) {
  // Device streams run collectives as device calls, not as host Tasks.
  auto* device = dynamic_cast<DeviceStream*>(&stream);
  if (device == nullptr) {
    return Status::error(ZRT_UNSUPPORTED, "{}: stream {} is neither a host nor a device stream",
                         name, stream.index());
  }
  return device->enqueue_collectives(rank, size, &args, 1);
}

Status enqueue_task(Stream& stream, CollTask& task) {
  return stream.enqueue(std::make_unique<CollTask>(std::move(task)));
}

Status enqueue_point_to_point(Stream& stream, CollTask& task, int rank, const CollectiveArgs& args,
                              size_t bytes) {
  if (args.peer == rank) task.set_local();
  if (args.kind == ZRT_COLL_SEND) {
    task.add_phase(std::make_unique<SendPhase>(args.sendbuf, bytes, args.peer));
  } else {
    task.add_phase(std::make_unique<RecvPhase>(args.recvbuf, bytes, args.peer));
  }
  return enqueue_task(stream, task);
}

Status enqueue_single_rank(Stream& stream, CollTask& task, const CollectiveArgs& args,
                           const ReduceSpec& spec) {
  task.set_local();
  switch (args.kind) {
    case ZRT_COLL_ALL_REDUCE:
    case ZRT_COLL_REDUCE_SCATTER:
    case ZRT_COLL_REDUCE:
    case ZRT_COLL_ALL_GATHER:
    case ZRT_COLL_BROADCAST:
      task.add_phase(std::make_unique<LocalCopy>(args.sendbuf, args.recvbuf, args.count, spec));
      break;
    default:
      break;  // barrier of one
  }
  return enqueue_task(stream, task);
}

// A collective of several ranks: the algorithm the table chooses for it, as the task's phases
// (or as a one-shot collective, one_shot_lane.h), and the task on the stream.
class AlgorithmRoute {
 public:
  AlgorithmRoute(Stream& stream, CollTask& task, int rank, int size, const CollectiveArgs& args,
                 const CheckedCall& call);
  Status enqueue();

 private:
  Status all_reduce();
  void add_ring_all_reduce();
  void add_window_ring_all_gather(char* own, const BlockLayout& layout);
  Status reduce_scatter();
  Status all_gather();
  AllReduceAlgorithm choose(TableOp op) const {
    return plan_->choose(op, table_bytes_, one_shot_, cma_);
  }
  Status run_one_shot(OneShotOrder order, const std::vector<int>* peer_pids = nullptr) {
    return run_one_shot_collective(stream_, task_,
                                   OneShotPhase(args_.kind, send_, recv_, args_.count, call_.spec,
                                                order, peer_pids));
  }
  // One-shot reduces in the order of the algorithm the table would run in its place, so that
  // choosing it never changes a result's bits (one_shot.h): the direct all-reduce's or the
  // ring's.
  OneShotOrder replaced_order() const {
    return plan_->choose(TableOp::kAllReduce, table_bytes_, false, cma_) ==
                   AllReduceAlgorithm::kDirect
               ? OneShotOrder::kRank
               : OneShotOrder::kRing;
  }

  Stream& stream_;
  CollTask& task_;
  const int rank_;
  const int size_;
  const CollectiveArgs& args_;
  const CheckedCall& call_;
  const void* send_;
  void* recv_;
  const EngineOptions& options_;
  HostGrid grid_;
  bool two_level_ = false;
  bool host_windows_ = false;
  bool windows_ = false;
  uint64_t table_bytes_ = 0;
  bool one_shot_ = false;
  bool cma_ = false;
  // A pointer, not an optional: the optional's 300 bytes were zeroed on every call (perf).
  std::unique_ptr<AlgorithmPlan> own_plan_;
  const AlgorithmPlan* plan_ = nullptr;
};

AlgorithmRoute::AlgorithmRoute(Stream& stream, CollTask& task, int rank, int size,
                               const CollectiveArgs& args, const CheckedCall& call)
    : stream_(stream),
      task_(task),
      rank_(rank),
      size_(size),
      args_(args),
      call_(call),
      send_(args.sendbuf),
      recv_(args.recvbuf),
      options_(stream.engine().options()) {
  // Ranks on several hosts: the rings run inside each host, then across (two_level_*.h).
  const int two_level_hosts = options_.two_level_hosts;
  grid_ = HostGrid{two_level_hosts, two_level_hosts > 1 ? size / two_level_hosts : size};
  two_level_ = two_level_hosts > 1;
  // Rings write into the neighbour's mapped inbox when the neighbours share a host
  // (EngineOptions::peer_windows), else send tagged messages: with every rank on this host the
  // one ring (`windows`), else the two-level collectives' ring inside each host.
  host_windows_ = two_level_ && options_.peer_windows;
  windows_ = !two_level_ && options_.peer_windows;
  table_bytes_ =
      args.kind == ZRT_COLL_ALL_REDUCE ? uint64_t{call.bytes} : uint64_t{call.bytes} * size;
  // One-shot collectives need every rank's arena mapped (one host), a stream that has an arena
  // and the deposit to fit a slot.
  const bool arena = windows_ && !two_level_ && stream.index() < kOneShotStreams;
  one_shot_ = arena && OneShotPhase::deposit_bytes(args.kind, args.count, call.element_size,
                                                   size) <= kOneShotSlotBytes;
  // The cma all-gather needs the arena's headers and the probe's verdict (peer_pids), no slot.
  cma_ = arena && options_.peer_pids.size() == static_cast<size_t>(size);
  if (options_.algorithm_plan == nullptr) {
    own_plan_ = std::make_unique<AlgorithmPlan>(
        options_.all_reduce_algorithm.value_or(AllReduceAlgorithm::kAuto),
        options_.algorithm_table.get(), size, options_.hosts);
  }
  plan_ = options_.algorithm_plan != nullptr ? options_.algorithm_plan.get() : own_plan_.get();
}

Status AlgorithmRoute::enqueue() {
  switch (args_.kind) {
    case ZRT_COLL_ALL_REDUCE:
      return all_reduce();
    case ZRT_COLL_REDUCE_SCATTER:
      return reduce_scatter();
    case ZRT_COLL_ALL_GATHER:
      return all_gather();
    case ZRT_COLL_BROADCAST:
      task_.add_phase(std::make_unique<BroadcastChain>(send_, recv_, call_.bytes, args_.root));
      break;
    case ZRT_COLL_REDUCE:
      task_.add_phase(
          std::make_unique<ReduceChain>(send_, recv_, args_.count, call_.spec, args_.root));
      break;
    case ZRT_COLL_BARRIER:
      task_.add_phase(std::make_unique<DisseminationBarrier>());
      break;
    default:
      return Status(ZRT_INTERNAL_ERROR, "unhandled collective kind");
  }
  return enqueue_task(stream_, task_);
}

Status AlgorithmRoute::all_reduce() {
  const AllReduceAlgorithm algorithm = choose(TableOp::kAllReduce);
  if (algorithm == AllReduceAlgorithm::kOneShot) {
    return run_one_shot(replaced_order());
  } else if (algorithm == AllReduceAlgorithm::kTwoShot) {
    OneShotPhase phase(args_.kind, send_, recv_, args_.count, call_.spec, replaced_order());
    phase.set_two_shot();
    return run_one_shot_collective(stream_, task_, std::move(phase));
  } else if (algorithm == AllReduceAlgorithm::kDirect) {
    task_.add_phase(std::make_unique<DirectAllReduce>(send_, recv_, args_.count, call_.spec));
  } else if (algorithm == AllReduceAlgorithm::kRecursiveDoubling) {
    task_.add_phase(
        std::make_unique<RecursiveDoublingAllReduce>(send_, recv_, args_.count, call_.spec));
  } else if (algorithm == AllReduceAlgorithm::kRing) {
    add_ring_all_reduce();
  } else {
    return Status::error(ZRT_INTERNAL_ERROR, "{}: no all_reduce algorithm '{}'", call_.name,
                         algorithm_name(algorithm));
  }
  return enqueue_task(stream_, task_);
}

void AlgorithmRoute::add_ring_all_reduce() {
  const size_t esize = call_.element_size;
  const BlockLayout layout = BlockLayout::split(args_.count, size_);
  char* own = static_cast<char*>(recv_) + layout.offset(rank_) * esize;
  if (two_level_) {
    task_.add_phase(std::make_unique<TwoLevelReduceScatter>(send_, own, layout, call_.spec, grid_,
                                                            0, host_windows_));
    task_.add_phase(std::make_unique<TwoLevelAllGather>(own, recv_, layout, esize, grid_,
                                                        kTwoLevelGatherTags, host_windows_));
  } else if (windows_) {
    task_.add_phase(std::make_unique<WindowReduceScatter>(send_, own, layout, call_.spec, 0));
    add_window_ring_all_gather(own, layout);
  } else {
    task_.add_phase(std::make_unique<RingReduceScatter>(send_, own, layout, call_.spec, 0));
    const uint32_t after = RingReduceScatter::units(layout, size_, esize);
    task_.add_phase(std::make_unique<RingAllGather>(own, recv_, layout, esize, after));
  }
}

// The window ring all-reduce's second half: the all-gather the table runs for these blocks, cma
// where it says so, the blocks are equal and at least kCmaGatherMinBlockBytes (one copy out of
// each peer's reduced block, where the window ring makes two).
void AlgorithmRoute::add_window_ring_all_gather(char* own, const BlockLayout& layout) {
  const size_t esize = call_.element_size;
  if (layout.length(0) == layout.length(size_ - 1) &&
      layout.length(rank_) * esize >= kCmaGatherMinBlockBytes &&
      plan_->choose(TableOp::kAllGather, call_.bytes, false, cma_) == AllReduceAlgorithm::kCma) {
    auto gather =
        std::make_unique<OneShotPhase>(ZRT_COLL_ALL_GATHER, own, recv_, layout.length(rank_),
                                       call_.spec, OneShotOrder::kRing, &options_.peer_pids);
    gather->set_after_announced_phase();
    task_.add_phase(std::move(gather));
    // A rank that gathers by the window ring instead would wait here without a word: the
    // reduce-scatter's first message carries the fingerprint, which names this.
    task_.set_fingerprint_variant(OrderFingerprint::kGatherByCma);
  } else {
    const uint32_t after = WindowPhase::units(layout, size_, esize, options_.window_slot_bytes);
    task_.add_phase(std::make_unique<WindowAllGather>(own, recv_, layout, esize, after));
  }
}

Status AlgorithmRoute::reduce_scatter() {
  const AllReduceAlgorithm algorithm = choose(TableOp::kReduceScatter);
  if (algorithm == AllReduceAlgorithm::kOneShot) return run_one_shot(OneShotOrder::kRing);
  if (algorithm != AllReduceAlgorithm::kRing) {
    return Status::error(ZRT_INTERNAL_ERROR, "{}: no reduce_scatter algorithm '{}'", call_.name,
                         algorithm_name(algorithm));
  }
  const BlockLayout whole{args_.count, 0};
  if (two_level_) {
    task_.add_phase(std::make_unique<TwoLevelReduceScatter>(send_, recv_, whole, call_.spec,
                                                            grid_, 0, host_windows_));
  } else if (windows_) {
    task_.add_phase(std::make_unique<WindowReduceScatter>(send_, recv_, whole, call_.spec, 0));
  } else {
    task_.add_phase(std::make_unique<RingReduceScatter>(send_, recv_, whole, call_.spec, 0));
  }
  return enqueue_task(stream_, task_);
}

Status AlgorithmRoute::all_gather() {
  const AllReduceAlgorithm algorithm = choose(TableOp::kAllGather);
  if (algorithm == AllReduceAlgorithm::kOneShot || algorithm == AllReduceAlgorithm::kCma) {
    return run_one_shot(OneShotOrder::kRing,
                        algorithm == AllReduceAlgorithm::kCma ? &options_.peer_pids : nullptr);
  }
  if (algorithm != AllReduceAlgorithm::kRing) {
    return Status::error(ZRT_INTERNAL_ERROR, "{}: no all_gather algorithm '{}'", call_.name,
                         algorithm_name(algorithm));
  }
  const size_t esize = call_.element_size;
  const BlockLayout whole{args_.count, 0};
  if (two_level_) {
    task_.add_phase(std::make_unique<TwoLevelAllGather>(send_, recv_, whole, esize, grid_, 0,
                                                        host_windows_));
  } else if (windows_) {
    task_.add_phase(std::make_unique<WindowAllGather>(send_, recv_, whole, esize, 0));
  } else {
    task_.add_phase(std::make_unique<RingAllGather>(send_, recv_, whole, esize, 0));
  }
  return enqueue_task(stream_, task_);
}

}  // namespace

Status enqueue_collective(Stream& stream, int rank, int size, const CollectiveArgs& args) {
  CheckedCall call;
  ZRT_RETURN_IF_ERROR(check_call(rank, size, args, &call));
  ZRT_RETURN_IF_ERROR(check_buffers(rank, size, args, call));
  if (stream.mem_kind() != ZRT_MEM_HOST) {
    return enqueue_on_device(stream, rank, size, args, call.name);
  }

  // On the stack: a one-shot collective may run and complete on this thread (one_shot_lane.h);
  // the others move to the heap for the stream's queue.
  const bool p2p = call.rule->p2p;
  CollTask task(describe(args), p2p ? args.peer : -1, args.kind == ZRT_COLL_SEND);
  if (!p2p) task.set_fingerprint(make_fingerprint(args));
  task.set_trace(trace_call(args, *call.rule));
  if (args.purpose == Purpose::kInternal) task.set_internal();
  if (p2p) return enqueue_point_to_point(stream, task, rank, args, call.bytes);
  if (size == 1) return enqueue_single_rank(stream, task, args, call.spec);
  return AlgorithmRoute(stream, task, rank, size, args, call).enqueue();
}

}  // namespace zrt
