// The store bootstrap: ranks meet in the TCP key-value store served by rank 0 (or by zrt-run).
//
// Each collective call is one "round" of a counter every rank advances in step. In round r,
// rank k writes its record under <prefix>/<kind>/r/k, then waits server-side until all records
// of round r exist and fetches them (in batches that respect the reply limit). The wait reply
// lists the keys still missing at the deadline, which is how a timeout names the ranks that
// never arrived. Once round r is complete, every rank has finished reading round r-1, so each
// rank deletes its own round r-1 record: the store holds at most two rounds per bootstrap.
//
// <prefix> separates successive bootstraps over one long-lived store (zrt-run serves one for
// the whole job): each rank counts its own bootstraps in the store, and since bootstraps are
// collective, the n-th one of every rank is the same one.
//
// Without a job identity, each rank claims its number in its hello, and the store refuses a
// second claim of one number or another world size (store_server.h); a rank that loses the
// connection comes back with the store's nonce (store_client.h), so another store on the port is
// never joined by mistake. docs/ARCHITECTURE.md#bootstrap says which mixes that prevents.
//
// Shutdown: rank 0's server must outlive every other rank's last call. So each other rank
// writes a goodbye key as its final request, and rank 0's destructor waits (bounded) for all
// of them before it stops serving.
#include <algorithm>
#include <cstring>
#include <set>
#include <vector>

#include "lib/bootstrap/bootstrap.h"
#include "lib/bootstrap/launcher_watch.h"
#include "lib/bootstrap/local_ranks.h"
#include "lib/bootstrap/store_address.h"
#include "lib/bootstrap/store_client.h"
#include "lib/bootstrap/store_server.h"
#include "lib/core/log.h"

namespace zrt {
namespace {

// How long rank 0 waits at most for the other ranks' goodbyes before it stops serving.
constexpr int64_t kMaxGoodbyeWaitMs = 10000;

// "rank 2" or "ranks 2, 5"; at most 16 ranks, then "... (40 in all)".
std::string list_ranks(const std::vector<int>& ranks) {
  std::string text = ranks.size() == 1 ? "rank " : "ranks ";
  const size_t shown = std::min<size_t>(ranks.size(), 16);
  for (size_t i = 0; i < shown; ++i) {
    if (i > 0) text += ", ";
    text += std::to_string(ranks[i]);
  }
  if (shown < ranks.size()) text += fmt::format(", ... ({} in all)", ranks.size());
  return text;
}

// WORLD_SIZE=1: nothing to meet, no store.
class SingleRankBootstrap final : public Bootstrap {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  int local_rank() const override { return 0; }
  int local_size() const override { return 1; }
  Status allgather(const void* input, void* output, size_t bytes) override {
    if (bytes > 0 && (input == nullptr || output == nullptr)) {
      return Status::invalid_argument("bootstrap allgather: null buffer for {} bytes", bytes);
    }
    if (bytes > 0 && input != output) std::memmove(output, input, bytes);
    return Status::ok();
  }
  Status barrier() override { return Status::ok(); }
};

class StoreBootstrap final : public Bootstrap {
 public:
  StoreBootstrap(const EnvRanks& ranks, int64_t timeout_ms, std::unique_ptr<StoreServer> server,
                 std::unique_ptr<StoreClient> client)
      : ranks_(ranks),
        timeout_ms_(timeout_ms),
        server_(std::move(server)),
        client_(std::move(client)) {}

  ~StoreBootstrap() override { say_goodbye(); }

  int rank() const override { return ranks_.rank; }
  int size() const override { return ranks_.size; }
  int local_rank() const override { return ranks_.local_rank; }
  int local_size() const override { return ranks_.local_size; }

  Status init() {
    int64_t instance = 0;
    ZRT_RETURN_IF_ERROR(
        client_->add(fmt::format("zrt/bootstrap/instances/{}", ranks_.rank), 1, &instance));
    prefix_ = fmt::format("zrt/bootstrap/{}/", instance);
    if (ranks_.local_rank < 0 || ranks_.local_size < 0) {
      int local_rank = 0;
      int local_size = 0;
      ZRT_RETURN_IF_ERROR(derive_local_ranks(*this, &local_rank, &local_size));
      ranks_.local_rank = local_rank;
      ranks_.local_size = local_size;
    }
    return Status::ok();
  }

  Status allgather(const void* input, void* output, size_t bytes) override {
    if (bytes > 0 && (input == nullptr || output == nullptr)) {
      return Status::invalid_argument("bootstrap allgather: null buffer for {} bytes", bytes);
    }
    if (bytes > kStoreMaxValueBytes) {
      return Status::invalid_argument(
          "bootstrap allgather: {} bytes per rank exceeds the store's limit of {} bytes", bytes,
          kStoreMaxValueBytes);
    }
    return exchange("allgather", input, bytes, output);
  }

  Status barrier() override { return exchange("barrier", nullptr, 0, nullptr); }

 private:
  Status exchange(const char* kind, const void* input, size_t bytes, void* output);
  void say_goodbye();

  std::string key(const char* kind, int64_t round, int rank) const {
    return fmt::format("{}{}/{}/{}", prefix_, kind, round, rank);
  }

  EnvRanks ranks_;
  int64_t timeout_ms_;
  std::unique_ptr<StoreServer> server_;  // rank 0 only, unless the launcher serves the store
  std::unique_ptr<StoreClient> client_;
  std::string prefix_;
  int64_t round_ = 0;
  std::string previous_key_;  // this rank's record of the previous round, deleted next round
  // Ranks an exchange already timed out on: rank 0 does not wait for their goodbye, so a
  // stalled rank costs the survivors one timeout, not two.
  std::set<int> unresponsive_;
};

Status StoreBootstrap::exchange(const char* kind, const void* input, size_t bytes, void* output) {
  const int64_t round = ++round_;
  const std::string where =
      fmt::format("bootstrap {} round {} (rank {} of {})", kind, round, ranks_.rank, ranks_.size);
  const std::string mine = key(kind, round, ranks_.rank);
  ZRT_RETURN_IF_ERROR(client_->set(mine, input, bytes).with_context(where));

  std::vector<std::string> keys;
  keys.reserve(static_cast<size_t>(ranks_.size));
  for (int rank = 0; rank < ranks_.size; ++rank) keys.push_back(key(kind, round, rank));
  std::vector<uint32_t> missing;
  Status waited = client_->wait(keys, timeout_ms_, &missing);
  if (waited.code() == ZRT_TIMEOUT && !missing.empty()) {
    std::vector<int> late(missing.begin(), missing.end());
    unresponsive_.insert(late.begin(), late.end());
    return Status::error(ZRT_TIMEOUT,
                         "timed out after {} ms waiting for {} of {} at bootstrap {} round {}",
                         timeout_ms_, list_ranks(late), ranks_.size, kind, round);
  }
  ZRT_RETURN_IF_ERROR(waited.with_context(where));

  if (output != nullptr && bytes > 0) {
    // Fetch in batches whose values fit in one reply.
    const size_t batch = std::max<size_t>(1, kStoreMaxValueBytes / bytes);
    auto* out = static_cast<uint8_t*>(output);
    for (size_t first = 0; first < keys.size(); first += batch) {
      const size_t last = std::min(keys.size(), first + batch);
      std::vector<std::string> some(keys.begin() + static_cast<std::ptrdiff_t>(first),
                                    keys.begin() + static_cast<std::ptrdiff_t>(last));
      std::vector<std::vector<uint8_t>> values;
      ZRT_RETURN_IF_ERROR(client_->get(some, 0, &values).with_context(where));
      for (size_t i = 0; i < values.size(); ++i) {
        if (values[i].size() != bytes) {
          return Status::invalid_usage(
              "{}: rank {} contributed {} bytes, this rank {} (all ranks must agree)", where,
              first + i, values[i].size(), bytes);
        }
        std::memcpy(out + (first + i) * bytes, values[i].data(), bytes);
      }
    }
  }
  if (!previous_key_.empty())
    ZRT_RETURN_IF_ERROR(client_->remove(previous_key_).with_context(where));
  previous_key_ = mine;
  return Status::ok();
}

void StoreBootstrap::say_goodbye() {
  if (ranks_.store_external || prefix_.empty()) {
    server_.reset();
    return;
  }
  if (ranks_.rank != 0) {
    Status status = client_->set(fmt::format("{}goodbye/{}", prefix_, ranks_.rank), nullptr, 0);
    if (!status.is_ok())
      ZRT_LOG_DEBUG("bootstrap: goodbye to the store failed: {}", status.message());
    return;
  }
  if (!server_) return;
  std::vector<std::string> keys;
  std::vector<int> waited_for;
  for (int rank = 1; rank < ranks_.size; ++rank) {
    if (unresponsive_.count(rank) != 0) continue;
    keys.push_back(fmt::format("{}goodbye/{}", prefix_, rank));
    waited_for.push_back(rank);
  }
  std::vector<uint32_t> missing;
  Status status = keys.empty()
                      ? Status::ok()
                      : client_->wait(keys, std::min(timeout_ms_, kMaxGoodbyeWaitMs), &missing);
  if (!status.is_ok()) {
    std::vector<int> late;
    for (uint32_t index : missing) late.push_back(waited_for[index]);
    ZRT_LOG_WARN(
        "bootstrap: rank 0 stops serving the store{}: {}",
        late.empty() ? std::string() : fmt::format(" before {} said goodbye", list_ranks(late)),
        status.message());
  }
  client_.reset();
  server_->stop();
}

// Who else may hold the store's port, and what to set, for the messages of a port that cannot
// be served or reached. torch.distributed's default init and torchrun's agent both serve a
// TCPStore on MASTER_PORT, which is the usual collision.
std::string port_hint(const EnvRanks& ranks) {
  const std::string origin =
      ranks.store_port_origin.empty() ? "MASTER_PORT" : ranks.store_port_origin;
  if (origin == "ZRT_STORE_PORT") {
    return fmt::format(
        "port {} is ZRT_STORE_PORT; it is held by another program or another zrt job: set "
        "ZRT_STORE_PORT to a free port",
        ranks.store_port);
  }
  if (origin == "MASTER_PORT") {
    return fmt::format(
        "port {} is MASTER_PORT, which is also where the framework's store lives "
        "(torch.distributed's init_process_group, torchrun's agent): it may hold it; give zrt "
        "its own port with ZRT_STORE_PORT (zrt-run does), or create the communicator over "
        "torch's group (zrt.Comm.from_torch, zrt_comm_init_oob)",
        ranks.store_port);
  }
  return fmt::format(
      "port {} is zrt's, derived as {} under torchrun (torch holds MASTER_PORT itself); it is "
      "held by another program: set ZRT_STORE_PORT to a free port, the same on every rank",
      ranks.store_port, origin);
}

// Without a job identity two jobs on one port could share a store. Each rank number may be
// claimed once there, by ranks of one world size. (A store zrt-run serves has its job's random
// token; its ranks bootstrap several times, so they claim nothing.)
StoreJoin claim_of(const EnvRanks& ranks) {
  StoreJoin join;
  if (ranks.job_token.empty() && !ranks.store_external) {
    join.rank = ranks.rank;
    join.size = ranks.size;
  }
  return join;
}

// A rank 0 without a job identity that finds its port taken may have met another job's store:
// claiming rank 0 there poisons that store when its job has our size (its own rank 0 holds the
// claim), so neither job forms a communicator out of the other's ranks. Best effort, bounded by
// one second.
void warn_the_other_job(const EnvRanks& ranks) {
  std::unique_ptr<StoreClient> other;
  Status claimed =
      StoreClient::connect(ranks.store_host, ranks.store_port, "", 1000, &other, claim_of(ranks));
  if (claimed.code() == ZRT_REMOTE_ERROR &&
      claimed.message().find("more than once") != std::string::npos) {
    ZRT_LOG_WARN("bootstrap: another job's store holds {}:{}; told its ranks that two jobs met",
                 ranks.store_host, ranks.store_port);
  }
}

Status with_hint(const Status& status, const std::string& hint) {
  if (status.is_ok()) return status;
  return Status::error(status.code(), "{} ({})", status.message(), hint);
}

}  // namespace

Status create_store_bootstrap(const EnvRanks& ranks, int64_t timeout_ms,
                              std::unique_ptr<Bootstrap>* bootstrap) {
  if (bootstrap == nullptr)
    return Status::invalid_argument("create_store_bootstrap: bootstrap is null");
  ZRT_RETURN_IF_ERROR(check_rank_layout("store bootstrap", ranks.rank, ranks.size, ranks.local_rank,
                                        ranks.local_size));
  if (timeout_ms <= 0) {
    return Status::invalid_argument("store bootstrap: timeout {} ms must be > 0", timeout_ms);
  }
  ZRT_RETURN_IF_ERROR(watch_launcher(ranks.launcher_fd, ranks.rank));
  if (ranks.size == 1) {
    *bootstrap = std::make_unique<SingleRankBootstrap>();
    return Status::ok();
  }
  if (ranks.store_port < 1 || ranks.store_port > 65535) {
    return Status::invalid_argument(
        "store bootstrap: store port {} is not in 1..65535 (set MASTER_PORT or ZRT_STORE_PORT)",
        ranks.store_port);
  }
  const bool one_host = ranks.local_size == ranks.size;  // -1 = not known: may span hosts
  std::unique_ptr<StoreServer> server;
  if (ranks.rank == 0 && !ranks.store_external) {
    const ListenChoice listen =
        choose_listen_host(ranks.store_host, resolve_addresses(ranks.store_host), one_host);
    Status served = StoreServer::start(listen.host, ranks.store_port, ranks.job_token, &server);
    if (!served.is_ok() && !listen.host.empty()) {
      // MASTER_ADDR may name this host in a way it cannot bind (a NAT or DNS alias): any address.
      Status any = StoreServer::start("", ranks.store_port, ranks.job_token, &server);
      if (any.is_ok()) served = any;
    }
    if (!served.is_ok()) {
      if (ranks.job_token.empty()) warn_the_other_job(ranks);
      return with_hint(served.with_context(
                           fmt::format("rank 0 cannot serve the bootstrap store on {}:{}",
                                       listen.host.empty() ? "*" : listen.host, ranks.store_port)),
                       port_hint(ranks));
    }
    ZRT_LOG_INFO("bootstrap: rank 0 serves the store on {}:{} ({})",
                 listen.host.empty() ? "*" : listen.host, server->port(), listen.reason);
  }
  std::unique_ptr<StoreClient> client;
  Status connected = StoreClient::connect(ranks.store_host, ranks.store_port, ranks.job_token,
                                          timeout_ms, &client, claim_of(ranks))
                         .with_context(fmt::format("rank {} of {}", ranks.rank, ranks.size));
  if (!connected.is_ok() && ranks.rank != 0) {
    std::string hint = port_hint(ranks);
    if (connected.code() == ZRT_TIMEOUT) {
      hint = unreachable_store_hint(ranks.store_host, ranks.store_port,
                                    resolve_addresses(ranks.store_host), one_host) +
             "; " + hint;
    } else if (connected.code() == ZRT_REMOTE_ERROR) {
      hint = "this rank's job identity: " +
             (ranks.job_source.empty() ? std::string("none") : ranks.job_source);
    }
    return with_hint(connected, hint);
  }
  ZRT_RETURN_IF_ERROR(connected);
  auto created =
      std::make_unique<StoreBootstrap>(ranks, timeout_ms, std::move(server), std::move(client));
  ZRT_RETURN_IF_ERROR(created->init());
  ZRT_LOG_DEBUG("bootstrap: rank {} of {} (local {} of {}) joined the store at {}:{}",
                created->rank(), created->size(), created->local_rank(), created->local_size(),
                ranks.store_host, ranks.store_port);
  *bootstrap = std::move(created);
  return Status::ok();
}

}  // namespace zrt
