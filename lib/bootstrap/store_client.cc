#include "lib/bootstrap/store_client.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "lib/core/log.h"

namespace zrt {

Status StoreClient::connect(const std::string& host, int port, const std::string& token,
                            int64_t timeout_ms, std::unique_ptr<StoreClient>* client,
                            const StoreJoin& join) {
  if (port <= 0 || port > 65535) {
    return Status::invalid_argument("store port {} is not in 1..65535", port);
  }
  if (timeout_ms <= 0)
    return Status::invalid_argument("store timeout {} ms must be > 0", timeout_ms);
  if (token.size() > kStoreMaxKeyBytes) {
    return Status::invalid_argument("job token of {} bytes exceeds {} bytes", token.size(),
                                    kStoreMaxKeyBytes);
  }
  if (join.rank >= join.size && join.rank >= 0) {
    return Status::invalid_argument("store claim: rank {} is not below the world size {}",
                                    join.rank, join.size);
  }
  const Deadline deadline = deadline_after_ms(timeout_ms);
  // A store under a flood of silent connections sheds the oldest unauthenticated ones, which may
  // be ours if the hello was not read yet: a connection dropped before any reply is tried again
  // until the timeout; a reply (a refusal included) is final. (A shed hello was never read, so
  // its claim was not counted either.)
  for (int64_t backoff_ms = 20;; backoff_ms = std::min<int64_t>(backoff_ms * 2, 500)) {
    std::unique_ptr<StoreClient> created(new StoreClient());
    created->timeout_ms_ = timeout_ms;
    created->host_ = host;
    created->port_ = port;
    created->token_ = token;
    created->join_ = join;
    created->address_ = fmt::format("{}:{}", host, port);
    int fd = -1;
    Status connected = connect_tcp(host, port, deadline, &fd);
    if (!connected.is_ok()) {
      return connected.with_context(fmt::format("connecting to the store at {} (timeout {} ms)",
                                                created->address_, timeout_ms));
    }
    created->fd_ = fd;
    const Status greeted = created->hello(deadline_after_ms(timeout_ms));
    if (greeted.is_ok()) {
      *client = std::move(created);
      return Status::ok();
    }
    if (created->answered_ || Clock::now() + std::chrono::milliseconds(backoff_ms) >= deadline) {
      return greeted;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(backoff_ms));
  }
}

void StoreClient::interrupt() {
  interrupted_ = true;
  const int fd = fd_.load();
  if (fd >= 0) shutdown(fd, SHUT_RDWR);  // the fd stays open: the other thread still uses it
}

StoreClient::~StoreClient() {
  if (fd_ >= 0) close(fd_);
  for (int fd : lost_fds_) close(fd);
}

Status StoreClient::hello(Deadline deadline) {
  StoreHello fields;
  fields.token = token_;
  fields.nonce = join_.nonce;
  fields.rank = join_.rank;
  fields.size = join_.size;
  std::vector<uint8_t> frame;
  encode_store_request(store_hello_request(fields), &frame);
  const std::string what = fmt::format("store hello ({})", address_);
  StoreReply parsed;
  Status status = exchange(frame, deadline, what, &parsed);
  if (!status.is_ok()) {
    broken_ = status.with_context(what);
    return broken_;
  }
  StoreReply reply;
  ZRT_RETURN_IF_ERROR(outcome(what, std::move(parsed), &reply));
  join_.nonce = static_cast<uint64_t>(reply.number);
  return Status::ok();
}

Status StoreClient::exchange(const std::vector<uint8_t>& frame, Deadline deadline,
                             const std::string& what, StoreReply* reply) {
  Status status = send_all(fd_, frame.data(), frame.size(), deadline, what + " request");
  uint8_t header[kStoreFrameHeaderBytes];
  uint32_t body_bytes = 0;
  std::vector<uint8_t> body;
  if (status.is_ok()) status = recv_all(fd_, header, sizeof(header), deadline, what + " reply");
  if (status.is_ok()) status = parse_store_frame_header(header, sizeof(header), &body_bytes);
  if (status.is_ok()) {
    body.resize(body_bytes);
    status = recv_all(fd_, body.data(), body.size(), deadline, what + " reply");
  }
  if (status.is_ok()) status = parse_store_reply(body.data(), body.size(), reply);
  if (status.is_ok()) answered_ = true;
  return status;
}

Status StoreClient::outcome(const std::string& what, StoreReply parsed, StoreReply* reply) {
  switch (parsed.code) {
    case StoreReplyCode::kOk:
    case StoreReplyCode::kTimeout:
      *reply = std::move(parsed);
      return Status::ok();
    case StoreReplyCode::kRefused:
    case StoreReplyCode::kError:
      // The server closes the connection after either; later calls must not try again.
      broken_ = Status(ZRT_REMOTE_ERROR, fmt::format("{}: {}", what, parsed.message));
      return broken_;
  }
  return Status::error(ZRT_INTERNAL_ERROR, "{}: unhandled reply code", what);
}

Status StoreClient::reconnect(Deadline deadline, const Status& lost) {
  const Deadline until = std::min(deadline, deadline_after_ms(kStoreReconnectMs));
  int fd = -1;
  Status connected = connect_tcp(host_, port_, until, &fd);
  if (!connected.is_ok()) {
    // Nobody took the port within kStoreReconnectMs: the store (rank 0) has gone.
    return Status(lost.code(),
                  fmt::format("{}; nothing served {} again within {} ms ({})", lost.message(),
                              address_, kStoreReconnectMs, connected.message()));
  }
  lost_fds_.push_back(fd_.exchange(fd));
  if (interrupted_) shutdown(fd, SHUT_RDWR);
  broken_ = Status::ok();
  Status greeted = hello(until);
  if (!greeted.is_ok()) {
    return Status(greeted.code(),
                  fmt::format("{}; reconnecting: {}", lost.message(), greeted.message()));
  }
  ZRT_LOG_DEBUG("store: reconnected to {} after: {}", address_, lost.message());
  return Status::ok();
}

Status StoreClient::call(const StoreRequest& request, int64_t extra_wait_ms, StoreReply* reply) {
  if (!broken_.is_ok()) return broken_;
  const char* op = store_op_name(request.op);
  const std::string what = fmt::format("store {} ({})", op, address_);
  std::vector<uint8_t> frame;
  encode_store_request(request, &frame);
  if (frame.size() > kStoreFrameHeaderBytes + kStoreMaxFrameBytes) {
    return Status::invalid_argument("{}: request of {} bytes exceeds the limit of {} bytes", what,
                                    frame.size(), kStoreMaxFrameBytes);
  }
  // The exchange gets the client's timeout on top of whatever the server was asked to wait.
  const Deadline deadline = deadline_after_ms(add_wait_ms(timeout_ms_, extra_wait_ms));
  StoreReply parsed;
  Status status = exchange(frame, deadline, what, &parsed);
  // A lost connection (the store closed or reset it) is tried once more on a new one, for the
  // requests that may be sent twice; add may have counted before the loss.
  const bool repeatable = request.op != StoreOp::kAdd && request.op != StoreOp::kHello;
  if (status.code() == ZRT_REMOTE_ERROR && repeatable && !interrupted_) {
    Status again = reconnect(deadline, status);
    if (!again.is_ok()) {
      broken_ = again.with_context(what);
      return broken_;
    }
    status = exchange(frame, deadline, what, &parsed);
  }
  if (!status.is_ok()) {
    // The fd stays open until the destructor (interrupt() may use it from another thread).
    broken_ = status.with_context(what);
    return broken_;
  }
  return outcome(what, std::move(parsed), reply);
}

Status StoreClient::set(const std::string& key, const void* data, size_t bytes) {
  if (bytes > kStoreMaxValueBytes) {
    return Status::invalid_argument(
        "store set '{}': value of {} bytes exceeds the limit of {} bytes", key, bytes,
        kStoreMaxValueBytes);
  }
  StoreRequest request;
  request.op = StoreOp::kSet;
  request.keys = {key};
  const auto* begin = static_cast<const uint8_t*>(data);
  request.value.assign(begin, begin + bytes);
  StoreReply reply;
  return call(request, 0, &reply);
}

Status StoreClient::get(const std::vector<std::string>& keys, int64_t wait_ms,
                        std::vector<std::vector<uint8_t>>* values, std::vector<uint32_t>* missing) {
  StoreRequest request;
  request.op = StoreOp::kGet;
  request.keys = keys;
  request.number = wait_ms;
  StoreReply reply;
  ZRT_RETURN_IF_ERROR(call(request, wait_ms, &reply));
  if (reply.code == StoreReplyCode::kTimeout) {
    if (missing != nullptr) *missing = reply.missing;
    return Status::error(ZRT_TIMEOUT, "store get ({}): {}", address_, reply.message);
  }
  if (reply.values.size() != keys.size()) {
    return Status::error(ZRT_REMOTE_ERROR, "store get ({}): {} values for {} keys", address_,
                         reply.values.size(), keys.size());
  }
  *values = std::move(reply.values);
  return Status::ok();
}

Status StoreClient::wait(const std::vector<std::string>& keys, int64_t wait_ms,
                         std::vector<uint32_t>* missing) {
  StoreRequest request;
  request.op = StoreOp::kWait;
  request.keys = keys;
  request.number = wait_ms;
  StoreReply reply;
  ZRT_RETURN_IF_ERROR(call(request, wait_ms, &reply));
  if (reply.code == StoreReplyCode::kTimeout) {
    if (missing != nullptr) *missing = reply.missing;
    return Status::error(ZRT_TIMEOUT, "store wait ({}): {}", address_, reply.message);
  }
  return Status::ok();
}

Status StoreClient::add(const std::string& key, int64_t delta, int64_t* value) {
  StoreRequest request;
  request.op = StoreOp::kAdd;
  request.keys = {key};
  request.number = delta;
  StoreReply reply;
  ZRT_RETURN_IF_ERROR(call(request, 0, &reply));
  *value = reply.number;
  return Status::ok();
}

Status StoreClient::remove(const std::string& key, bool* existed) {
  StoreRequest request;
  request.op = StoreOp::kDelete;
  request.keys = {key};
  StoreReply reply;
  ZRT_RETURN_IF_ERROR(call(request, 0, &reply));
  if (existed != nullptr) *existed = reply.number != 0;
  return Status::ok();
}

}  // namespace zrt
