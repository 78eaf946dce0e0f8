#include "tools/zrt-run/node_rendezvous.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "lib/bootstrap/store_address.h"

namespace zrt {
namespace {

using Clock = std::chrono::steady_clock;

// How often a rendezvous wait looks up from the store for a refusal, a failure or a signal.
constexpr int64_t kSliceMs = 200;
// The watcher's wait per request; it loops, so this only bounds one request.
constexpr int64_t kWatchSliceMs = 600000;

const std::string kJob = "zrt-run/job";
const std::string kRefused = "zrt-run/refused";
const std::string kGo = "zrt-run/go";
const std::string kFailed = "zrt-run/failed";
const std::string kFailures = "zrt-run/failures";

std::string claim_key(int node) {
  return fmt::format("zrt-run/claim/{}", node);
}
std::string node_key(int node) {
  return fmt::format("zrt-run/node/{}", node);
}
std::string over_key(int node) {
  return fmt::format("zrt-run/over/{}", node);
}

bool interrupted(const sigset_t& interrupting) {
  sigset_t pending;
  if (sigpending(&pending) != 0) return false;
  for (int signal_number = 1; signal_number < NSIG; ++signal_number) {
    if (sigismember(&interrupting, signal_number) == 1 &&
        sigismember(&pending, signal_number) == 1) {
      return true;
    }
  }
  return false;
}

std::string text_of(const std::vector<uint8_t>& bytes) {
  return std::string(bytes.begin(), bytes.end());
}

// The value of `key` if it exists now.
bool peek(StoreClient& client, const std::string& key, std::string* value) {
  std::vector<std::vector<uint8_t>> values;
  if (!client.get({key}, 0, &values).is_ok()) return false;
  *value = text_of(values[0]);
  return true;
}

std::string list_nodes(const std::vector<int>& nodes) {
  std::string text = nodes.size() == 1 ? "node " : "nodes ";
  for (size_t i = 0; i < nodes.size(); ++i) text += (i ? ", " : "") + std::to_string(nodes[i]);
  return text;
}

Status set_text(StoreClient& client, const std::string& key, const std::string& text) {
  return client.set(key, text.data(), text.size());
}

}  // namespace

Status NodeRendezvous::form(const NodeOptions& options, const sigset_t& interrupting,
                            std::unique_ptr<NodeRendezvous>* rendezvous) {
  std::unique_ptr<NodeRendezvous> created(new NodeRendezvous());
  created->options_ = options;
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0) std::strcpy(host, "?");
  created->host_ = host;
  int fds[2];
  if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) {
    return Status::system_error("the node watcher's pipe", errno);
  }
  created->event_read_ = fds[0];
  created->event_write_ = fds[1];
  ZRT_RETURN_IF_ERROR(created->serve_or_join(interrupting));
  const std::string address = options.node_rank == 0 ? "127.0.0.1" : options.master_addr;
  ZRT_RETURN_IF_ERROR(StoreClient::connect(address, options.store_port, options.token,
                                           options.join_timeout_ms, &created->watcher_));
  created->watch_thread_ = std::thread([raw = created.get()] { raw->watch(); });
  *rendezvous = std::move(created);
  return Status::ok();
}

NodeRendezvous::~NodeRendezvous() {
  if (watch_thread_.joinable()) {
    stopping_ = true;
    watcher_->interrupt();
    watch_thread_.join();
  }
  if (server_) server_->stop();
  for (int fd : {event_read_, event_write_}) {
    if (fd >= 0) close(fd);
  }
}

Status NodeRendezvous::serve_or_join(const sigset_t& interrupting) {
  const NodeOptions& o = options_;
  const std::string store = fmt::format("{}:{}", o.master_addr, o.store_port);
  if (o.node_rank == 0) {
    // Every interface: the other nodes come over the network, whatever --master-addr resolves
    // to here (Debian resolves a host's own name to 127.0.1.1).
    Status served = StoreServer::start("", o.store_port, o.token, &server_);
    if (!served.is_ok()) {
      // Perhaps another job's node 0: claim node 0 there, so that job fails its claim check
      // instead of running with nodes of this one.
      std::unique_ptr<StoreClient> other;
      int64_t claims = 0;
      if (StoreClient::connect("127.0.0.1", o.store_port, o.token, 1000, &other).is_ok()) {
        (void)other->add(claim_key(0), 1, &claims);
      }
      return served.with_context(fmt::format(
          "node 0 cannot serve the job's store on every interface, port {}{} (choose another "
          "--master-port, or --port)",
          o.store_port, claims > 1 ? ", which another zrt-run job's store holds" : ""));
    }
    ZRT_RETURN_IF_ERROR(
        StoreClient::connect("127.0.0.1", o.store_port, o.token, o.join_timeout_ms, &client_));
    ZRT_RETURN_IF_ERROR(set_text(*client_, kJob, format_job_shape(o.shape)));
    int64_t claims = 0;
    ZRT_RETURN_IF_ERROR(client_->add(claim_key(0), 1, &claims));
    ZRT_RETURN_IF_ERROR(set_text(*client_, node_key(0), host_));
    return wait_for_nodes(interrupting);
  }
  Status connected =
      StoreClient::connect(o.master_addr, o.store_port, o.token, o.join_timeout_ms, &client_);
  if (!connected.is_ok()) {
    std::string hint =
        "this node's job identity: " + (o.token_source.empty() ? "none" : o.token_source);
    if (connected.code() == ZRT_TIMEOUT) {
      std::string here;
      for (const std::string& address : resolve_addresses(o.master_addr)) {
        here += (here.empty() ? "" : ", ") + address;
      }
      hint = fmt::format(
          "--master-addr '{}' resolves to {} here; node 0's zrt-run serves the store on every "
          "interface at port {} (--master-port + 1, or --port): is it running, with the same "
          "--master-port, and is that port open between the hosts?",
          o.master_addr, here.empty() ? "nothing" : here, o.store_port);
    }
    return Status::error(connected.code(), "node {} ({}) cannot join node 0's store at {}: {} ({})",
                         o.node_rank, host_, store, connected.message(), hint);
  }
  std::vector<std::vector<uint8_t>> values;
  ZRT_RETURN_IF_ERROR(client_->get({kJob}, o.join_timeout_ms, &values)
                          .with_context("reading the job's shape from node 0's store"));
  JobShape served;
  if (!parse_job_shape(text_of(values[0]), &served)) {
    return refuse(fmt::format("the store at {} holds '{}', not a zrt-run job's shape", store,
                              text_of(values[0])));
  }
  const std::string mismatch = job_shape_mismatch(served, o.shape);
  if (!mismatch.empty()) return refuse(mismatch);
  if (o.node_rank >= served.nnodes) {
    return refuse(
        fmt::format("--node-rank {} is not below --nnodes {}", o.node_rank, served.nnodes));
  }
  int64_t claims = 0;
  ZRT_RETURN_IF_ERROR(client_->add(claim_key(o.node_rank), 1, &claims));
  if (claims != 1) {
    return refuse(fmt::format(
        "node {} has joined already (two zrt-runs with --node-rank {}, or another job on port {}: "
        "give each job its own --master-port, or --rdzv-id)",
        o.node_rank, o.node_rank, o.store_port));
  }
  ZRT_RETURN_IF_ERROR(set_text(*client_, node_key(o.node_rank), host_));
  return wait_for_go(interrupting);
}

Status NodeRendezvous::refuse(const std::string& why) {
  const std::string text =
      fmt::format("node {} ({}) was refused: {}", options_.node_rank, host_, why);
  std::string ignored;
  // Before the start the job cannot form as asked, so node 0 fails too; after it, only this
  // node's zrt-run does (it never started a rank).
  if (!peek(*client_, kGo, &ignored)) (void)set_text(*client_, kRefused, text);
  return Status::invalid_usage("{}", text);
}

Status NodeRendezvous::wait_for_nodes(const sigset_t& interrupting) {
  const NodeOptions& o = options_;
  std::vector<std::string> keys;
  std::vector<int> nodes;
  for (int node = 1; node < o.shape.nnodes; ++node) {
    keys.push_back(node_key(node));
    nodes.push_back(node);
  }
  const auto deadline = Clock::now() + std::chrono::milliseconds(o.join_timeout_ms);
  std::string refused;
  while (true) {
    std::vector<uint32_t> missing;
    Status waited = client_->wait(keys, kSliceMs, &missing);
    if (waited.is_ok()) break;
    if (waited.code() != ZRT_TIMEOUT) return waited;
    if (peek(*client_, kRefused, &refused)) {
      (void)set_text(*client_, kFailed, refused);
      return Status::invalid_usage("{}", refused);
    }
    if (interrupted(interrupting)) {
      return Status::error(ZRT_INVALID_USAGE, "interrupted while waiting for the other nodes");
    }
    if (Clock::now() >= deadline) {
      std::vector<int> late;
      for (uint32_t index : missing) late.push_back(nodes[index]);
      const std::string text = fmt::format(
          "{} of {} did not join within --join-timeout {} s (node 0 serves the store on every "
          "interface, port {}: start zrt-run there with --node-rank, the same --nnodes, "
          "--master-addr reaching this host and --master-port)",
          list_nodes(late), o.shape.nnodes, o.join_timeout_ms / 1000.0, o.store_port);
      (void)set_text(*client_, kFailed, text);
      return Status::error(ZRT_TIMEOUT, "{}", text);
    }
  }
  std::vector<std::string> claim_keys;
  for (int node = 0; node < o.shape.nnodes; ++node) claim_keys.push_back(claim_key(node));
  std::vector<std::vector<uint8_t>> values;
  ZRT_RETURN_IF_ERROR(client_->get(claim_keys, 0, &values));
  std::vector<int> twice;
  for (size_t node = 0; node < values.size(); ++node) {
    int64_t count = 0;
    if (values[node].size() == sizeof(count)) std::memcpy(&count, values[node].data(), 8);
    if (count != 1) twice.push_back(static_cast<int>(node));
  }
  if (!twice.empty()) {
    const std::string text = fmt::format(
        "{} joined more than once: another job uses port {} (give each job its own "
        "--master-port, or --rdzv-id), or two nodes were started with one --node-rank",
        list_nodes(twice), o.store_port);
    (void)set_text(*client_, kFailed, text);
    return Status::invalid_usage("{}", text);
  }
  return set_text(*client_, kGo, "");
}

Status NodeRendezvous::wait_for_go(const sigset_t& interrupting) {
  // Node 0 may itself wait a whole join timeout for a late node.
  const auto deadline = Clock::now() + std::chrono::milliseconds(2 * options_.join_timeout_ms);
  std::string failed;
  while (true) {
    Status waited = client_->wait({kGo}, kSliceMs);
    if (waited.is_ok()) return Status::ok();
    if (waited.code() != ZRT_TIMEOUT) return waited.with_context("waiting for node 0's start");
    if (peek(*client_, kFailed, &failed)) {
      return Status::invalid_usage("node 0 did not start the job: {}", failed);
    }
    if (interrupted(interrupting)) {
      return Status::error(ZRT_INVALID_USAGE, "interrupted while waiting for node 0's start");
    }
    if (Clock::now() >= deadline) {
      return Status::error(ZRT_TIMEOUT, "node 0 did not start the job within {} s",
                           2 * options_.join_timeout_ms / 1000.0);
    }
  }
}

void NodeRendezvous::watch() {
  std::string event;
  while (!stopping_) {
    Status waited = watcher_->wait({kFailed}, kWatchSliceMs);
    if (stopping_) return;
    if (waited.code() == ZRT_TIMEOUT) continue;
    if (waited.is_ok() && peek(*watcher_, kFailed, &event)) break;
    event = fmt::format(
        "lost the job's store at {}:{} (node 0's zrt-run ended, or the network "
        "between the nodes failed): {}",
        options_.master_addr, options_.store_port, waited.message());
    break;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    event_ = event;
  }
  const char byte = 1;
  if (write(event_write_, &byte, 1) < 0) {
    // The pipe is ours and empty; nothing to do if it fails.
  }
}

std::string NodeRendezvous::take_event() {
  char byte = 0;
  while (read(event_read_, &byte, 1) > 0) {
  }
  std::lock_guard<std::mutex> lock(mutex_);
  return event_;
}

void NodeRendezvous::report_failure(const std::string& text) {
  int64_t failures = 0;
  if (client_->add(kFailures, 1, &failures).is_ok() && failures == 1) {
    (void)set_text(*client_, kFailed, text);
  }
}

Status NodeRendezvous::finish(int64_t wait_ms, std::string* failed_elsewhere) {
  if (watch_thread_.joinable()) {
    stopping_ = true;
    watcher_->interrupt();
    watch_thread_.join();
  }
  Status said = set_text(*client_, over_key(options_.node_rank), "");
  if (options_.node_rank != 0) {
    if (!peek(*client_, kFailed, failed_elsewhere)) failed_elsewhere->clear();
    return said;
  }
  std::vector<std::string> keys;
  std::vector<int> nodes;
  for (int node = 1; node < options_.shape.nnodes; ++node) {
    keys.push_back(over_key(node));
    nodes.push_back(node);
  }
  std::vector<uint32_t> missing;
  Status waited = keys.empty() ? Status::ok() : client_->wait(keys, wait_ms, &missing);
  if (!peek(*client_, kFailed, failed_elsewhere)) failed_elsewhere->clear();
  server_->stop();
  if (waited.code() == ZRT_TIMEOUT) {
    std::vector<int> late;
    for (uint32_t index : missing) late.push_back(nodes[index]);
    return Status::error(ZRT_TIMEOUT,
                         "{} did not end within {} s of node 0's ranks; node 0 stops serving "
                         "the job's store",
                         list_nodes(late), wait_ms / 1000.0);
  }
  return waited;
}

}  // namespace zrt
