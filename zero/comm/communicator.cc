#include "zero/comm/communicator.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "collectives/algorithm.h"
#include "collectives/algorithm_plan.h"
#include "collectives/internal.h"
#include "collectives/peer_memory.h"
#include "collectives/two_level_grid.h"
#include "zero/comm/host_cpus.h"
#include "lib/core/log.h"
#include "transports/ucx/ucx_transport.h"

namespace zrt {
namespace {

// `spans_hosts`: the job's ranks are on more than one host (TransportOptions::spans_hosts).
TransportOptions transport_options(const CommOptions& options, bool spans_hosts) {
  TransportOptions result;
  result.spans_hosts = spans_hosts;
  result.timeout_ms = options.timeout_ms;
  result.name = options.name.c_str();  // the transport copies it
  result.error_mode = options.settings.text(SettingId::kUcxErrMode).c_str();
  result.launcher = &options.settings.launcher();
  return result;
}

// FNV-1a of the host name: equal on ranks of one host, so a split can count its local ranks.
uint64_t host_hash() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return 0;
  uint64_t hash = 1469598103934665603ull;
  for (const char* p = name; *p != '\0'; ++p) {
    hash = (hash ^ static_cast<unsigned char>(*p)) * 1099511628211ull;
  }
  return hash;
}

// What every rank tells the others about its host when the world spans hosts: the hash that
// groups ranks, and the name (cut to fit) that messages use.
struct HostRecord {
  uint64_t hash;
  char name[56];
};

// What every rank contributes to a split. Fixed size, so one all-gather carries it.
struct SplitRecord {
  int32_t color;
  int32_t key;
  uint64_t host;
  uint32_t address_length;
  uint32_t reserved;
};

// How many hosts the ranks are on: the distinct hashes (host_ids_ is empty when the world is on
// one host).
int count_hosts(std::vector<uint64_t> host_ids) {
  std::sort(host_ids.begin(), host_ids.end());
  const auto last = std::unique(host_ids.begin(), host_ids.end());
  return std::max(1, static_cast<int>(last - host_ids.begin()));
}

}  // namespace

int Communicator::two_level_hosts() const {
  if (host_ids_.empty()) return 0;
  const int64_t mode = options_.settings.integer(SettingId::kHierarchy);  // auto|flat|two-level
  if (mode == 1) return 0;
  HostGrid grid;
  std::string why_not;
  if (!make_host_grid(host_ids_, &grid, &why_not)) {
    if (rank_ == 0) {
      ZRT_LOG_INFO("{}: ZRT_HIERARCHY={}: flat collectives, since {}", options_.name,
                   options_.settings.text(SettingId::kHierarchy), why_not);
    }
    return 0;
  }
  if (grid.local == 1) {
    if (rank_ == 0) {
      ZRT_LOG_INFO("{}: one rank on each of {} hosts: flat collectives (already one hop a host)",
                   options_.name, grid.hosts);
    }
    return 0;
  }
  if (rank_ == 0) {
    ZRT_LOG_INFO("{}: {} hosts of {} ranks: two-level reduce-scatter, all-gather and all-reduce",
                 options_.name, grid.hosts, grid.local);
  }
  return grid.hosts;
}

Status Communicator::start_engine() {
  user_memory_ = std::make_unique<UserMemory>(*transport_);
  EngineOptions engine_options;
  engine_options.rank = rank_;
  engine_options.size = size_;
  engine_options.timeout_ms = options_.timeout_ms;
  const Settings& settings = options_.settings;
  engine_options.check_order = settings.flag(SettingId::kCheck) ? 1 : 0;
  engine_options.window_slots = static_cast<int>(settings.integer(SettingId::kWindowSlots));
  engine_options.busy_poll_us = settings.integer(SettingId::kPollUs);
  engine_options.window_slot_bytes =
      static_cast<size_t>(settings.integer(SettingId::kWindowSlotKib)) << 10;
  engine_options.all_reduce_algorithm = all_reduce_algorithm(settings.text(SettingId::kAlgo));
  if (const std::string& path = settings.text(SettingId::kAlgoTable); !path.empty()) {
    auto table = std::make_shared<AlgorithmTable>();
    ZRT_RETURN_IF_ERROR(AlgorithmTable::load(path, table.get()));
    engine_options.algorithm_table = std::move(table);
  }
  engine_options.hosts = count_hosts(host_ids_);
  // Open MPI's oversubscription rule: the host's ranks against the CPUs they may run on. A CPU
  // quota (cgroup cpu.max) is not seen; there waits yield late, after busy_poll_us.
  engine_options.core_per_rank = host_processes_ <= host_cpus_;
  ZRT_RETURN_IF_ERROR(add_algorithm_plan(&engine_options));
  ZRT_LOG_DEBUG("algorithm plan of {} ranks on {} host(s):\n{}", size_, engine_options.hosts,
                engine_options.algorithm_plan->describe());
  engine_options.trace_depth = static_cast<int>(settings.integer(SettingId::kTraceDepth));
  engine_options.trace_dir = settings.text(SettingId::kTraceDir);
  // Every rank decides alike: local_size_ counts the ranks whose host name hashes like ours.
  // Windows when the ring neighbours share a host: every rank on this one, or the two-level
  // collectives' ring inside each host.
  engine_options.two_level_hosts = two_level_hosts();
  engine_options.peer_windows =
      options_.windows && size_ > 1 && (local_size_ == size_ || engine_options.two_level_hosts > 1);
  engine_options.host_names = host_names_;
  if (engine_options.peer_windows && local_size_ == size_) engine_options.peer_pids = peer_pids_;
  ZRT_RETURN_IF_ERROR(create_progress_engine(*transport_, engine_options, &engine_));
  return engine_->create_stream(ZRT_MEM_HOST, &default_stream_);
}

Status Communicator::create(Bootstrap& bootstrap, const CommOptions& options,
                            std::unique_ptr<Communicator>* communicator) {
  if (communicator == nullptr) return Status::invalid_argument("communicator is NULL");
  std::unique_ptr<Communicator> comm(new Communicator());
  comm->rank_ = bootstrap.rank();
  comm->size_ = bootstrap.size();
  comm->local_rank_ = bootstrap.local_rank();
  comm->local_size_ = bootstrap.local_size();
  comm->host_processes_ = comm->local_size_;
  comm->options_ = options;
  if (comm->local_size_ < comm->size_) {
    // The world spans hosts: learn which ranks share one, for the two-level collectives.
    // The names go along, for messages that name a peer's host (EngineOptions::host_names).
    HostRecord mine{};
    mine.hash = host_hash();
    (void)gethostname(mine.name, sizeof(mine.name) - 1);
    std::vector<HostRecord> records(static_cast<size_t>(comm->size_));
    ZRT_RETURN_IF_ERROR(bootstrap.allgather(&mine, records.data(), sizeof(mine))
                            .with_context("exchanging host names for the host grid"));
    for (const HostRecord& record : records) {
      comm->host_ids_.push_back(record.hash);
      comm->host_names_.emplace_back(record.name, strnlen(record.name, sizeof(record.name)));
    }
  }
  ZRT_RETURN_IF_ERROR(gather_host_cpus(bootstrap, comm->host_ids_, &comm->host_cpus_));
  if (comm->local_size_ == comm->size_ && comm->size_ > 1 && comm->options_.windows) {
    const PeerGather gather = [&bootstrap](const void* input, void* output, size_t bytes) {
      return bootstrap.allgather(input, output, bytes);
    };
    ZRT_RETURN_IF_ERROR(
        probe_peer_memory(comm->rank_, comm->size_, gather, options.name, &comm->peer_pids_));
  }
  ZRT_RETURN_IF_ERROR(create_ucx_transport(
      bootstrap, transport_options(comm->options_, comm->local_size_ < comm->size_),
      &comm->transport_));
  ZRT_RETURN_IF_ERROR(comm->start_engine());
  ZRT_LOG_INFO("{}: communicator rank {}/{} (local {}/{}, on {} CPUs) up, timeout {} ms",
               options.name, comm->rank_, comm->size_, comm->local_rank_, comm->local_size_,
               comm->host_cpus_, options.timeout_ms);
  *communicator = std::move(comm);
  return Status::ok();
}

// What the exchanges of a split gathered, by old rank.
struct Communicator::SplitExchange {
  SplitRecord mine{};
  std::vector<SplitRecord> records;
  uint32_t longest = 0;            // the longest worker address
  std::vector<uint8_t> addresses;  // every rank's, padded to `longest`

  // The old ranks of `color`, ordered by (key, old rank).
  std::vector<int> members(int color) const {
    std::vector<int> result;
    for (int old = 0; old < static_cast<int>(records.size()); ++old) {
      if (records[old].color == color) result.push_back(old);
    }
    std::stable_sort(result.begin(), result.end(),
                     [&](int a, int b) { return records[a].key < records[b].key; });
    return result;
  }
  std::vector<uint8_t> address(int old) const {
    const uint8_t* begin = addresses.data() + static_cast<size_t>(longest) * old;
    return std::vector<uint8_t>(begin, begin + records[old].address_length);
  }
};

Status Communicator::exchange_split_records(int color, int key,
                                            const std::vector<uint8_t>& address,
                                            SplitExchange* exchange) {
  SplitRecord& mine = exchange->mine;
  mine.color = color;
  mine.key = key;
  mine.host = host_hash();
  mine.address_length = static_cast<uint32_t>(address.size());
  exchange->records.resize(size_);
  ZRT_RETURN_IF_ERROR(gather_internal(&mine, exchange->records.data(), sizeof(SplitRecord),
                                      "split: exchanging colors"));
  uint32_t longest = 0;
  for (const SplitRecord& record : exchange->records) {
    longest = std::max(longest, record.address_length);
  }
  exchange->longest = longest;
  std::vector<uint8_t> padded(longest, 0);
  std::copy(address.begin(), address.end(), padded.begin());
  exchange->addresses.resize(static_cast<size_t>(longest) * size_);
  if (longest > 0) {
    ZRT_RETURN_IF_ERROR(gather_internal(padded.data(), exchange->addresses.data(), longest,
                                        "split: exchanging worker addresses"));
  }
  return Status::ok();
}

void Communicator::place_split_child(const SplitExchange& exchange,
                                     const std::vector<int>& members, Communicator* child) const {
  const std::vector<SplitRecord>& records = exchange.records;
  child->size_ = static_cast<int>(members.size());
  child->local_size_ = 0;
  child->host_processes_ = host_processes_;
  child->host_cpus_ = host_cpus_;
  for (size_t i = 0; i < members.size(); ++i) {
    if (members[i] == rank_) child->rank_ = static_cast<int>(i);
  }
  for (size_t i = 0; i < members.size(); ++i) {
    if (records[members[i]].host != exchange.mine.host) continue;
    if (static_cast<int>(i) == child->rank_) child->local_rank_ = child->local_size_;
    ++child->local_size_;
  }
  if (child->local_size_ == child->size_ && peer_pids_.size() == static_cast<size_t>(size_)) {
    for (int old : members) child->peer_pids_.push_back(peer_pids_[old]);  // every pair passed
  }
  if (child->local_size_ < child->size_) {
    for (int old : members) {
      child->host_ids_.push_back(records[old].host);
      // A parent that spans hosts knows their names; one that does not cannot have a child
      // that does.
      if (host_names_.size() == static_cast<size_t>(size_)) {
        child->host_names_.push_back(host_names_[old]);
      }
    }
  }
}

// Split. Each rank that takes part makes its new UCX worker first, so that its address can
// travel in the same exchange as its color and key. Two all-gathers on the parent's default
// stream (in stream order with the caller's other collectives, as zrt.h promises): fixed-size
// records {color, key, host, address length}, then the addresses padded to the longest. Every
// rank then computes the same groups: members of its color ordered by (key, old rank), local
// ranks counted among members on the same host. Wiring the new transport is local (UCX connects
// on first use), so no third exchange is needed. NOCOLOR ranks take part in both exchanges with
// an empty address and get no communicator.
Status Communicator::split(int color, int key, const CommOptions& options,
                           std::unique_ptr<Communicator>* communicator) {
  if (communicator == nullptr) return Status::invalid_argument("newcomm is NULL");
  if (color < ZRT_SPLIT_NOCOLOR) {
    return Status::invalid_argument("color {} is negative (only ZRT_SPLIT_NOCOLOR = -1 is allowed)",
                                    color);
  }
  std::unique_ptr<UcxWorker> worker;
  if (color != ZRT_SPLIT_NOCOLOR) {
    // The child's hosts are known only after the exchange, which needs this worker: a parent
    // that spans hosts passes that on (a child on one host then takes eager messages to 256 KiB
    // on its shared memory).
    ZRT_RETURN_IF_ERROR(
        UcxWorker::create(transport_options(options, local_size_ < size_), &worker));
  }
  const std::vector<uint8_t> no_address;
  SplitExchange exchange;
  ZRT_RETURN_IF_ERROR(exchange_split_records(
      color, key, worker != nullptr ? worker->address() : no_address, &exchange));
  if (color == ZRT_SPLIT_NOCOLOR) {
    communicator->reset();
    return Status::ok();
  }

  const std::vector<int> members = exchange.members(color);
  std::unique_ptr<Communicator> child(new Communicator());
  child->options_ = options;
  place_split_child(exchange, members, child.get());
  std::vector<std::vector<uint8_t>> member_addresses;
  for (int old : members) member_addresses.push_back(exchange.address(old));
  ZRT_RETURN_IF_ERROR(wire_ucx_transport(
      std::move(worker), child->rank_, child->size_, member_addresses,
      transport_options(child->options_, local_size_ < size_), &child->transport_));
  ZRT_RETURN_IF_ERROR(child->start_engine());
  ZRT_LOG_INFO("{}: split color {} key {}: rank {}/{} -> {}/{}", options_.name, color, key, rank_,
               size_, child->rank_, child->size_);
  *communicator = std::move(child);
  return Status::ok();
}

Status Communicator::run_internal(const CollectiveArgs& args, const std::string& what) {
  return run_internal_collective(*default_stream_, rank_, size_, args, what);
}

Status Communicator::gather_internal(const void* input, void* output, size_t bytes,
                                     const std::string& what) {
  CollectiveArgs args;
  args.kind = ZRT_COLL_ALL_GATHER;
  args.sendbuf = input;
  args.recvbuf = output;
  args.count = bytes;
  args.dtype = ZRT_U8;
  return run_internal(args, what);
}

// Teardown in step with the peers: finish our own work, meet everyone in a barrier (so no rank
// closes connections a peer still needs), stop the progress thread, then let the transport say
// farewell and close. After a failure only the local steps run; each is bounded by the timeout.
Status Communicator::destroy() {
  if (engine_ == nullptr) {
    user_memory_.reset();
    transport_.reset();
    return Status::ok();
  }
  Status first;
  auto keep_first = [&first](const Status& status) {
    if (first.is_ok() && !status.is_ok()) first = status;
  };
  if (default_stream_ != nullptr) keep_first(default_stream_->synchronize());
  if (first.is_ok() && engine_->error().is_ok() && size_ > 1) {
    CollectiveArgs barrier;
    barrier.kind = ZRT_COLL_BARRIER;
    keep_first(run_internal_collective(*default_stream_, rank_, size_, barrier,
                                       "destroy: closing barrier"));
  }
  keep_first(engine_->shutdown());
  default_stream_ = nullptr;
  engine_.reset();
  user_memory_.reset();
  transport_.reset();
  return first;
}

Communicator::~Communicator() {
  Status status = destroy();
  if (!status.is_ok()) ZRT_LOG_WARN("{}: destroy: {}", options_.name, status.message());
}

Status Communicator::create_premul_op(double scalar, zrt_op_t* op) {
  if (op == nullptr) return Status::invalid_argument("op is NULL");
  if (!std::isfinite(scalar)) {
    return Status::invalid_argument("scalar {} is not a finite number", scalar);
  }
  std::lock_guard<std::mutex> lock(ops_mutex_);
  size_t index = 0;
  while (index < premul_live_.size() && premul_live_[index]) ++index;
  if (index == premul_live_.size()) {
    premul_scalars_.push_back(scalar);
    premul_live_.push_back(true);
  } else {
    premul_scalars_[index] = scalar;
    premul_live_[index] = true;
  }
  *op = static_cast<zrt_op_t>(ZRT_OP_COUNT + static_cast<int>(index));
  return Status::ok();
}

Status Communicator::destroy_op(zrt_op_t op) {
  const int value = static_cast<int>(op);
  if (value >= 0 && value < ZRT_OP_COUNT) {
    return Status::invalid_argument("op {} is a built-in operation and cannot be destroyed", value);
  }
  std::lock_guard<std::mutex> lock(ops_mutex_);
  const int index = value - ZRT_OP_COUNT;
  if (value < 0 || index >= static_cast<int>(premul_live_.size()) || !premul_live_[index]) {
    return Status::invalid_argument("op {} is not a live operation of this communicator", value);
  }
  premul_live_[index] = false;
  return Status::ok();
}

bool Communicator::lookup_premul_op(zrt_op_t op, double* scalar) const {
  const int index = static_cast<int>(op) - ZRT_OP_COUNT;
  std::lock_guard<std::mutex> lock(ops_mutex_);
  if (index < 0 || index >= static_cast<int>(premul_live_.size()) || !premul_live_[index]) {
    return false;
  }
  if (scalar != nullptr) *scalar = premul_scalars_[index];
  return true;
}

}  // namespace zrt
