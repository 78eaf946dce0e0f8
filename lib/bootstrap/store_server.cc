#include "lib/bootstrap/store_server.h"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <optional>
#include <unordered_map>
#include <vector>

#include "lib/bootstrap/job_identity.h"
#include "lib/bootstrap/socket_util.h"
#include "lib/bootstrap/store_protocol.h"
#include "lib/core/log.h"

namespace zrt {
namespace {

// A hello carries the fixed fields and a token of at most kStoreMaxKeyBytes.
constexpr uint32_t kPreHelloMaxFrameBytes = kStoreMaxKeyBytes + 64;

// How accept failures are logged: the first one, then at most one summary line per interval
// (a flood that exhausts the fds fails thousands of accepts a second).
constexpr auto kAcceptLogInterval = std::chrono::seconds(10);
// After an accept fails for lack of fds, the listener rests this long: the pending connection
// stays in the backlog and would make poll() return at once, a busy loop.
constexpr auto kAcceptBackoff = std::chrono::milliseconds(50);

// host:port of a connected socket's peer, for messages; "?:?" when it cannot be told.
std::string peer_address(int fd) {
  sockaddr_storage peer{};
  socklen_t length = sizeof(peer);
  char host[NI_MAXHOST] = "?";
  char port[NI_MAXSERV] = "?";
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &length) == 0) {
    getnameinfo(reinterpret_cast<sockaddr*>(&peer), length, host, sizeof(host), port, sizeof(port),
                NI_NUMERICHOST | NI_NUMERICSERV);
  }
  return fmt::format("{}:{}", host, port);
}

// A store lifetime's nonce: random, never 0 (0 in a hello means "no store met before").
Status random_nonce(uint64_t* nonce) {
  uint64_t value = 0;
  while (value == 0) {
    const ssize_t got = getrandom(&value, sizeof(value), 0);
    if (got != static_cast<ssize_t>(sizeof(value))) {
      return Status::system_error("store: reading a nonce from getrandom", errno);
    }
  }
  *nonce = value;
  return Status::ok();
}

constexpr const char* kDistinctJobsAdvice =
    "give each job its own MASTER_PORT (or ZRT_STORE_PORT), or a job identity (ZRT_JOB_TOKEN, "
    "the same on every rank of a job; torchrun's, Slurm's and Open MPI's job ids count)";

struct Connection {
  int fd = -1;
  std::vector<uint8_t> input;
  std::vector<uint8_t> output;
  size_t output_sent = 0;
  bool authenticated = false;
  Deadline hello_until;                // an unauthenticated connection is closed at this point
  bool counted = false;                // counts in State::unauthenticated
  bool closing = false;                // close once output has left
  bool dead = false;                   // close now
  std::optional<StoreRequest> parked;  // a get/wait whose keys do not all exist yet
  Deadline parked_until;
};

}  // namespace

// The server loop, in short: poll the listener, a wake pipe (stop) and every connection;
// accept, read whatever arrived, answer each complete frame in order, write what is queued.
// A parked connection (get/wait) is not read further until answered, which keeps each
// client's requests strictly ordered; its deadline bounds poll()'s timeout.
struct StoreServer::State {
  int listen_fd = -1;
  int wake_read = -1;
  int wake_write = -1;
  std::string token;
  uint64_t nonce = 0;  // this store lifetime's, sent in every hello reply
  // Rank claims (hellos of a job without an identity): the world size of the first claim, and
  // each claimed rank's peer address. A second claim of a rank poisons the store: every
  // request after it is refused with `poisoned`, so neither job forms a communicator.
  int claimed_world = 0;
  std::unordered_map<int, std::string> claims;
  std::string poisoned;
  std::atomic<bool> stopping{false};
  std::atomic<int64_t> flush_ms{500};
  std::unordered_map<std::string, std::vector<uint8_t>> data;
  std::vector<std::unique_ptr<Connection>> connections;
  StoreLimits limits;
  size_t unauthenticated = 0;  // connections in `connections` that have not shown the token
  Deadline accept_resume;      // the listener is not polled before this (see kAcceptBackoff)
  Clock::time_point accept_logged_at;
  bool accept_logged = false;
  uint64_t accept_failures = 0;               // since the last log line
  std::atomic<uint64_t> evicted{0};           // unauthenticated connections dropped, in total
  std::atomic<uint64_t> accept_log_lines{0};  // lines log_accept_failure wrote
  std::atomic<uint64_t> refused{0};           // hellos refused (token, nonce, claim)

  ~State() {
    for (auto& connection : connections) close(connection->fd);
    for (int fd : {listen_fd, wake_read, wake_write}) {
      if (fd >= 0) close(fd);
    }
  }

  void run();
  void accept_all();
  void log_accept_failure(int err);
  // The serving side's half of "refused on both sides": at most one line per kAcceptLogInterval.
  void log_refusal(const Connection& connection, const std::string& who, const std::string& why);
  // Refuses a hello from `who` ("the client", "rank 2 of 4"): tells it "store refused <who>:
  // <why>", logs it here, and closes the connection.
  void refuse(Connection& connection, const std::string& who, const std::string& why);
  // Hello checks beyond the token; each refuses and returns false when the hello may not join.
  bool check_nonce(Connection& connection, const StoreHello& hello);
  bool check_claim(Connection& connection, const StoreHello& hello);
  void poison(const std::string& why);
  void handle_hello(Connection& connection, const StoreRequest& request);
  Clock::time_point refusal_logged_at;
  bool refusal_logged = false;
  uint64_t refusals = 0;  // since the last log line
  // Makes room for one more unauthenticated connection by dropping the oldest (a real client
  // sends its hello right after connecting; the oldest silent one is the likeliest flooder).
  void evict_oldest_unauthenticated();
  void expire_hellos(Clock::time_point now);
  void uncount(Connection& connection) {
    if (!connection.counted) return;
    connection.counted = false;
    --unauthenticated;
  }
  void read_from(Connection& connection);
  void write_to(Connection& connection);
  void serve_frames(Connection& connection);
  void handle(Connection& connection, StoreRequest request);
  // Answers a parked get/wait if its keys now exist (or always, with the missing keys listed,
  // when `expired`). Returns whether it answered.
  bool try_answer(Connection& connection, bool expired);
  void reply(Connection& connection, const StoreReply& reply);
  void fail(Connection& connection, StoreReplyCode code, std::string message);
  void wake_parked();
  int poll_timeout_ms() const;
};

void StoreServer::State::reply(Connection& connection, const StoreReply& reply) {
  encode_store_reply(reply, &connection.output);
}

void StoreServer::State::fail(Connection& connection, StoreReplyCode code, std::string message) {
  ZRT_LOG_DEBUG("store: refusing a client: {}", message);
  StoreReply answer;
  answer.code = code;
  answer.message = std::move(message);
  reply(connection, answer);
  connection.closing = true;
  connection.parked.reset();
}

bool StoreServer::State::try_answer(Connection& connection, bool expired) {
  const StoreRequest& request = *connection.parked;
  StoreReply answer;
  for (size_t i = 0; i < request.keys.size(); ++i) {
    if (data.find(request.keys[i]) == data.end())
      answer.missing.push_back(static_cast<uint32_t>(i));
  }
  if (!answer.missing.empty()) {
    if (!expired) return false;
    answer.code = StoreReplyCode::kTimeout;
    answer.message = fmt::format("{} of {} keys missing after {} ms", answer.missing.size(),
                                 request.keys.size(), request.number);
    reply(connection, answer);
    connection.parked.reset();
    return true;
  }
  if (request.op == StoreOp::kGet) {
    size_t total = 0;
    for (const std::string& key : request.keys) total += data[key].size();
    if (total > kStoreMaxValueBytes) {
      fail(connection, StoreReplyCode::kError,
           fmt::format("the {} values asked for total {} bytes, over the reply limit of {} bytes",
                       request.keys.size(), total, kStoreMaxValueBytes));
      return true;
    }
    answer.values.reserve(request.keys.size());
    for (const std::string& key : request.keys) answer.values.push_back(data[key]);
  }
  reply(connection, answer);
  connection.parked.reset();
  return true;
}

void StoreServer::State::wake_parked() {
  for (auto& connection : connections) {
    if (connection->parked && !connection->dead) try_answer(*connection, false);
  }
}

void StoreServer::State::refuse(Connection& connection, const std::string& who,
                                const std::string& why) {
  ++refused;
  log_refusal(connection, who, why);
  fail(connection, StoreReplyCode::kRefused, fmt::format("store refused {}: {}", who, why));
}

bool StoreServer::State::check_nonce(Connection& connection, const StoreHello& hello) {
  if (hello.nonce == 0 || hello.nonce == nonce) return true;
  refuse(connection, store_hello_who(hello),
         fmt::format("it joined another store on this port before (store nonce {:016x}; this "
                     "store's is {:016x}): the rank 0 it met has gone and another store "
                     "serves the port now (another job's rank 0, or a later bootstrap of "
                     "this job); {}",
                     hello.nonce, nonce, kDistinctJobsAdvice));
  return false;
}

bool StoreServer::State::check_claim(Connection& connection, const StoreHello& hello) {
  if (hello.rank < 0) return true;
  const std::string who = store_hello_who(hello);
  if (claimed_world == 0) claimed_world = hello.size;
  if (hello.size != claimed_world) {
    // Another world size cannot be one of this job's ranks: refused, and this job goes on.
    refuse(connection, who,
           fmt::format("this store's job has {} ranks, this rank's has {}: two jobs share this "
                       "store's port; {}",
                       claimed_world, hello.size, kDistinctJobsAdvice));
    return false;
  }
  const std::string peer = peer_address(connection.fd);
  auto [claim, fresh] = claims.try_emplace(hello.rank, peer);
  // A rank that presents this store's nonce has joined it before: it reconnects.
  if (fresh || hello.nonce == nonce) {
    claim->second = peer;
    return true;
  }
  // Which of the two is the real rank cannot be told: neither job may go on.
  const std::string why = fmt::format(
      "rank {} of {} joined the store more than once (from {}, then from {}): two jobs share "
      "this store's port; {}",
      hello.rank, hello.size, claim->second, peer, kDistinctJobsAdvice);
  refuse(connection, who, why);
  poison(why);
  return false;
}

void StoreServer::State::poison(const std::string& why) {
  if (!poisoned.empty()) return;
  poisoned = why;
  for (auto& other : connections) {
    if (other->parked && !other->dead) fail(*other, StoreReplyCode::kRefused, poisoned);
  }
}

void StoreServer::State::handle_hello(Connection& connection, const StoreRequest& request) {
  StoreHello hello;
  if (Status parsed = parse_store_hello(request, &hello); !parsed.is_ok()) {
    fail(connection, StoreReplyCode::kError, parsed.message());
    return;
  }
  if (hello.token != token) {
    // Fingerprints, not tokens: a ZRT_JOB_TOKEN is a secret.
    refuse(connection, "the client",
           fmt::format("it belongs to another job (its job identity {}, this store's {}; the "
                       "identity is ZRT_JOB_TOKEN or the launcher's job id, docs/API.md)",
                       token_fingerprint(hello.token), token_fingerprint(token)));
    return;
  }
  if (!check_nonce(connection, hello)) return;
  if (!poisoned.empty()) {
    refuse(connection, store_hello_who(hello), poisoned);
    return;
  }
  if (!check_claim(connection, hello)) return;
  connection.authenticated = true;
  uncount(connection);
  StoreReply answer;
  answer.number = static_cast<int64_t>(nonce);
  reply(connection, answer);
}

void StoreServer::State::handle(Connection& connection, StoreRequest request) {
  if (!connection.authenticated) {
    if (request.op != StoreOp::kHello) {
      fail(connection, StoreReplyCode::kRefused,
           fmt::format("store refused the client: its first request was '{}', not a hello with "
                       "the job token",
                       store_op_name(request.op)));
      return;
    }
    handle_hello(connection, request);
    return;
  }
  if (!poisoned.empty()) {
    fail(connection, StoreReplyCode::kRefused, poisoned);
    return;
  }
  StoreReply answer;
  switch (request.op) {
    case StoreOp::kHello:
      answer.number = static_cast<int64_t>(nonce);
      break;  // a repeated hello is harmless
    case StoreOp::kSet:
      data[request.keys[0]] = std::move(request.value);
      reply(connection, answer);
      wake_parked();
      return;
    case StoreOp::kAdd: {
      auto [entry, created] = data.try_emplace(request.keys[0], std::vector<uint8_t>(8, 0));
      if (entry->second.size() != 8) {
        fail(connection, StoreReplyCode::kError,
             fmt::format("store add: key '{}' holds a {}-byte value, not an 8-byte counter",
                         request.keys[0], entry->second.size()));
        return;
      }
      uint64_t value = 0;
      std::memcpy(&value, entry->second.data(), 8);
      value += static_cast<uint64_t>(request.number);  // wraps, never traps
      std::memcpy(entry->second.data(), &value, 8);
      answer.number = static_cast<int64_t>(value);
      reply(connection, answer);
      if (created) wake_parked();
      return;
    }
    case StoreOp::kDelete:
      answer.number = data.erase(request.keys[0]) > 0 ? 1 : 0;
      break;
    case StoreOp::kGet:
    case StoreOp::kWait:
      connection.parked_until = deadline_after_ms(request.number);
      connection.parked = std::move(request);
      try_answer(connection, connection.parked->number == 0);
      return;
  }
  reply(connection, answer);
}

void StoreServer::State::serve_frames(Connection& connection) {
  size_t offset = 0;
  while (!connection.parked && !connection.closing && !connection.dead) {
    const size_t available = connection.input.size() - offset;
    if (available < kStoreFrameHeaderBytes) break;
    uint32_t body = 0;
    Status header = parse_store_frame_header(connection.input.data() + offset, available, &body);
    if (!header.is_ok()) {
      fail(connection, StoreReplyCode::kError, header.message() + "; closing the connection");
      break;
    }
    // Until a client has shown the token, only a hello-sized frame is buffered for it.
    if (!connection.authenticated && body > kPreHelloMaxFrameBytes) {
      fail(connection, StoreReplyCode::kRefused,
           fmt::format("store refused the client: a first message of {} bytes is not a hello "
                       "(at most {} bytes)",
                       body, kPreHelloMaxFrameBytes));
      break;
    }
    if (available < kStoreFrameHeaderBytes + body) break;
    StoreRequest request;
    Status parsed = parse_store_request(connection.input.data() + offset + kStoreFrameHeaderBytes,
                                        body, &request);
    offset += kStoreFrameHeaderBytes + body;
    if (!parsed.is_ok()) {
      fail(connection, StoreReplyCode::kError, parsed.message() + "; closing the connection");
      break;
    }
    handle(connection, std::move(request));
  }
  connection.input.erase(connection.input.begin(),
                         connection.input.begin() + static_cast<std::ptrdiff_t>(offset));
}

void StoreServer::State::read_from(Connection& connection) {
  uint8_t chunk[65536];
  while (true) {
    const ssize_t n = recv(connection.fd, chunk, sizeof(chunk), MSG_DONTWAIT);
    if (n > 0) {
      connection.input.insert(connection.input.end(), chunk, chunk + n);
      // Stop reading once a whole maximal frame is buffered; the rest waits in the kernel.
      if (connection.input.size() > kStoreMaxFrameBytes + kStoreFrameHeaderBytes) break;
      continue;
    }
    if (n == 0) {
      connection.dead = true;  // the client left; a parked request dies with it
    } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      connection.dead = true;
    }
    break;
  }
}

void StoreServer::State::write_to(Connection& connection) {
  while (connection.output_sent < connection.output.size()) {
    const ssize_t n =
        send(connection.fd, connection.output.data() + connection.output_sent,
             connection.output.size() - connection.output_sent, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n > 0) {
      connection.output_sent += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
    connection.dead = true;
    return;
  }
  connection.output.clear();
  connection.output_sent = 0;
  if (connection.closing) connection.dead = true;
}

void StoreServer::State::log_refusal(const Connection& connection, const std::string& who,
                                     const std::string& why) {
  ++refusals;
  const auto now = Clock::now();
  if (refusal_logged && now - refusal_logged_at < kAcceptLogInterval) return;
  ZRT_LOG_WARN(
      "store: refused {} from {}{}: {}", who == "the client" ? "a client" : who,
      peer_address(connection.fd),
      refusals == 1 ? std::string() : fmt::format(" ({} refusals since the last report)", refusals),
      why);
  refusal_logged = true;
  refusal_logged_at = now;
  refusals = 0;
}

void StoreServer::State::log_accept_failure(int err) {
  ++accept_failures;
  const auto now = Clock::now();
  if (accept_logged && now - accept_logged_at < kAcceptLogInterval) return;
  ZRT_LOG_WARN(
      "store: accept failed {}: {} ({} connections open, {} without a hello; repeats "
      "are counted, logged at most every {} s)",
      accept_failures == 1 ? std::string("once")
                           : fmt::format("{} times since the last report", accept_failures),
      std::strerror(err), connections.size(), unauthenticated, kAcceptLogInterval.count());
  ++accept_log_lines;
  accept_logged = true;
  accept_logged_at = now;
  accept_failures = 0;
}

void StoreServer::State::evict_oldest_unauthenticated() {
  Connection* oldest = nullptr;
  for (auto& connection : connections) {
    if (connection->authenticated || connection->dead) continue;
    if (oldest == nullptr || connection->hello_until < oldest->hello_until) {
      oldest = connection.get();
    }
  }
  if (oldest == nullptr) return;
  oldest->dead = true;  // closed silently: a flooder gets no reply to amplify
  uncount(*oldest);
  ++evicted;
}

void StoreServer::State::expire_hellos(Clock::time_point now) {
  for (auto& connection : connections) {
    if (connection->authenticated || connection->dead || now < connection->hello_until) continue;
    connection->dead = true;
    uncount(*connection);
    ++evicted;
  }
}

void StoreServer::State::accept_all() {
  while (true) {
    const int fd = accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      const int err = errno;
      if (err == EAGAIN || err == EWOULDBLOCK || err == EINTR) return;
      log_accept_failure(err);
      if (err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM) {
        // Free an fd for the next try; until then, leave the backlog alone for a moment.
        evict_oldest_unauthenticated();
        accept_resume = Clock::now() + kAcceptBackoff;
      }
      return;
    }
    if (unauthenticated >= limits.max_unauthenticated) evict_oldest_unauthenticated();
    auto connection = std::make_unique<Connection>();
    connection->fd = fd;
    connection->hello_until = deadline_after_ms(limits.hello_timeout_ms);
    connection->counted = true;
    ++unauthenticated;
    connections.push_back(std::move(connection));
  }
}

int StoreServer::State::poll_timeout_ms() const {
  int timeout = -1;
  if (Clock::now() < accept_resume) timeout = remaining_ms(accept_resume) + 1;
  for (const auto& connection : connections) {
    if (!connection->parked && connection->authenticated) continue;
    const int left =
        remaining_ms(connection->parked ? connection->parked_until : connection->hello_until);
    // +1 so that the wake-up lands after the deadline, not a millisecond before it.
    timeout = timeout < 0 ? left + 1 : std::min(timeout, left + 1);
  }
  return timeout;
}

void StoreServer::State::run() {
  std::vector<pollfd> entries;
  while (!stopping.load()) {
    entries.clear();
    // A negative fd is skipped by poll(): the listener rests after fds ran out.
    entries.push_back({Clock::now() < accept_resume ? -1 : listen_fd, POLLIN, 0});
    entries.push_back({wake_read, POLLIN, 0});
    for (const auto& connection : connections) {
      short events = 0;
      // A parked connection is still polled for input so that a vanished client is noticed.
      if (connection->input.size() <= kStoreMaxFrameBytes + kStoreFrameHeaderBytes) {
        events |= POLLIN;
      }
      if (connection->output.size() > connection->output_sent) events |= POLLOUT;
      entries.push_back({connection->fd, events, 0});
    }
    const int ready = poll(entries.data(), entries.size(), poll_timeout_ms());
    if (ready < 0 && errno != EINTR) {
      ZRT_LOG_ERROR("store: poll failed: {}", std::strerror(errno));
      break;
    }
    if (entries[1].revents != 0) {
      char drain[64];
      while (read(wake_read, drain, sizeof(drain)) > 0) {
      }
    }
    if (stopping.load()) break;
    const size_t polled = entries.size() - 2;
    for (size_t i = 0; i < polled; ++i) {
      Connection& connection = *connections[i];
      const short revents = entries[i + 2].revents;
      if (revents & (POLLIN | POLLHUP | POLLERR)) read_from(connection);
      if (!connection.dead) serve_frames(connection);
      if (connection.parked && !connection.dead) {
        try_answer(connection, Clock::now() >= connection.parked_until);
      }
      if (!connection.dead && connection.output.size() > connection.output_sent) {
        write_to(connection);
      }
    }
    if (unauthenticated > 0) expire_hellos(Clock::now());
    if (entries[0].revents & POLLIN) accept_all();
    std::erase_if(connections, [this](const std::unique_ptr<Connection>& connection) {
      if (!connection->dead) return false;
      uncount(*connection);
      close(connection->fd);
      return true;
    });
  }
  // Shutting down: give queued replies a bounded chance to leave, then close everything.
  const Deadline flush_until = deadline_after_ms(flush_ms.load());
  while (Clock::now() < flush_until) {
    entries.clear();
    std::vector<Connection*> writers;
    for (const auto& connection : connections) {
      if (!connection->dead && connection->output.size() > connection->output_sent) {
        entries.push_back({connection->fd, POLLOUT, 0});
        writers.push_back(connection.get());
      }
    }
    if (writers.empty()) break;
    if (poll(entries.data(), entries.size(), remaining_ms(flush_until)) <= 0) break;
    for (size_t i = 0; i < writers.size(); ++i) {
      if (entries[i].revents != 0) write_to(*writers[i]);
    }
  }
}

Status StoreServer::start(const std::string& host, int port, const std::string& token,
                          std::unique_ptr<StoreServer>* server, const StoreLimits& limits) {
  if (port < 0 || port > 65535) {
    return Status::invalid_argument("store port {} is not in 0..65535", port);
  }
  if (limits.max_unauthenticated < 1 || limits.hello_timeout_ms < 1) {
    return Status::invalid_argument(
        "store limits: max_unauthenticated ({}) and hello_timeout_ms ({}) must be >= 1",
        limits.max_unauthenticated, limits.hello_timeout_ms);
  }
  auto state = std::make_unique<State>();
  state->token = token;
  ZRT_RETURN_IF_ERROR(random_nonce(&state->nonce));
  state->limits = limits;
  int bound_port = 0;
  ZRT_RETURN_IF_ERROR(listen_tcp(host, port, &state->listen_fd, &bound_port));
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_NONBLOCK | O_CLOEXEC) != 0) {
    return Status::system_error("store: creating the wake pipe", errno);
  }
  state->wake_read = pipe_fds[0];
  state->wake_write = pipe_fds[1];
  std::unique_ptr<StoreServer> created(new StoreServer());
  created->port_ = bound_port;
  created->nonce_ = state->nonce;
  created->state_ = std::move(state);
  State* raw = created->state_.get();
  created->thread_ = std::thread([raw] { raw->run(); });
  ZRT_LOG_DEBUG("store: serving on {}:{}", host.empty() ? "*" : host, bound_port);
  *server = std::move(created);
  return Status::ok();
}

StoreServer::Counters StoreServer::counters() const {
  Counters counters;
  if (state_) {
    counters.evicted = state_->evicted.load();
    counters.accept_log_lines = state_->accept_log_lines.load();
    counters.refused = state_->refused.load();
  }
  return counters;
}

void StoreServer::stop(int64_t flush_ms) {
  if (!thread_.joinable()) return;
  state_->flush_ms.store(flush_ms);
  state_->stopping.store(true);
  const char byte = 1;
  if (write(state_->wake_write, &byte, 1) < 0) {
    // The pipe is non-blocking and only full if a wake-up is already pending: nothing to do.
  }
  thread_.join();
  state_.reset();
}

StoreServer::~StoreServer() {
  stop();
}

}  // namespace zrt
