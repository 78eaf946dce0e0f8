#include "transports/ucx/ucx_transport.h"

#include <poll.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "lib/bootstrap/bootstrap.h"
#include "lib/core/log.h"
#include "lib/core/settings.h"
#include "transports/ucx/ucx_memory.h"

namespace zrt {
namespace {

using Clock = std::chrono::steady_clock;

// The source rank lives above the caller's kTagBits, so a receive with a full mask matches only
// the named peer (and UCX keeps equal tags from one peer in posting order).
// The highest source value is reserved for the farewell exchange (see close_endpoints), so
// communicators hold at most kMaxRanks - 1 ranks.
inline constexpr int kMaxRanks = (1 << (64 - kTagBits)) - 1;
inline constexpr uint64_t kFarewellSource = uint64_t{kMaxRanks};

uint64_t ucx_tag(int source, uint64_t tag) {
  return (static_cast<uint64_t>(source) << kTagBits) | (tag & kTagMask);
}

class UcxTransport;

// How dead peers are detected: ZRT_UCX_ERR_MODE=hybrid (default) | peer | none.
// UCX 1.13 on one host picks tcp only for endpoints in error mode PEER (shared memory and cma do
// not qualify), and sysv/posix + cma (single copy) for mode NONE: 0.2-1.3 GB/s against
// 2.2-3.9 GB/s here (bench_p2p; measured: docs/MEASURED.md#collective-bandwidth-on-one-host).
// "hybrid" gets both: data moves on mode-NONE endpoints, and a second, idle mode-PEER endpoint
// per peer (tcp, with keepalive) watches the peer's liveness; its error callback fails
// everything outstanding with that peer. "peer" sends data on the PEER
// endpoints (slow, no second endpoint); "none" has no watcher, so a dead peer surfaces through
// an error on a data endpoint (cma notices a gone process) or the engine's no-progress timeout.
enum class ErrorMode { kHybrid, kPeer, kNone };

// The options' mode, else ZRT_UCX_ERR_MODE through the settings registry.
Status read_error_mode(const TransportOptions& options, ErrorMode* mode) {
  SettingValue value;
  if (options.error_mode != nullptr) {
    ZRT_RETURN_IF_ERROR(
        parse_setting(setting_spec(SettingId::kUcxErrMode), options.error_mode, &value));
  } else {
    ZRT_RETURN_IF_ERROR(load_setting(SettingId::kUcxErrMode, &value));
  }
  if (value.text == "peer") {
    *mode = ErrorMode::kPeer;
  } else if (value.text == "none") {
    *mode = ErrorMode::kNone;
  } else {
    *mode = ErrorMode::kHybrid;
  }
  return Status::ok();
}

// What an endpoint error means for the peer, in the words a user needs. UCX reports a peer whose
// process is gone as "Endpoint timeout" (tcp saw the connection close, or keepalive got no
// answer) or "Connection reset" (cma found no such process): both are a dead rank here.
const char* peer_failure_words(ucs_status_t status) {
  switch (status) {
    case UCS_ERR_ENDPOINT_TIMEOUT:
      return "died or closed its connection (its process exited or was killed; or it stopped "
             "answering keepalives)";
    case UCS_ERR_CONNECTION_RESET:
      return "died (its process is gone)";
    case UCS_ERR_UNREACHABLE:
      return "is unreachable (its host or network is down)";
    default:
      return "failed";
  }
}

const char* error_mode_name(ErrorMode mode) {
  switch (mode) {
    case ErrorMode::kHybrid:
      return "hybrid";
    case ErrorMode::kPeer:
      return "peer";
    case ErrorMode::kNone:
      return "none";
  }
  return "?";
}

// One posted operation; owned by the transport from post until its callback (or destruction).
struct UcxOp {
  UcxTransport* transport = nullptr;
  TransportCompletion* completion = nullptr;  // null once detached by cancel_all
  int peer = 0;
  bool is_recv = false;
  size_t bytes = 0;
  uint64_t tag = 0;
  std::array<ucp_dt_iov_t, 2> parts{};  // a message with a header: UCX reads them until the end
  void* request = nullptr;
  bool has_reason = false;  // completes with `reason` instead of UCX's status (cancellation)
  Status reason;
  bool posting = false;   // inside ucp_tag_recv_nbx: the poster deletes the op
  bool finished = false;  // the callback ran while posting
  bool orphaned = false;  // the transport is being destroyed: its destructor deletes the op
  // Links of the transport's outstanding list (while posted) or of its free list (after).
  UcxOp* prev = nullptr;
  UcxOp* next = nullptr;
  bool listed = false;  // on the outstanding list
};

// The operations UCX still holds, as an intrusive list: posting and completing a message
// allocates nothing (records come from a free list that grows only to the most ever in flight).
class OpList {
 public:
  bool empty() const { return head_ == nullptr; }
  bool contains(const UcxOp* op) const { return op->listed; }
  void insert(UcxOp* op) {
    op->prev = nullptr;
    op->next = head_;
    if (head_ != nullptr) head_->prev = op;
    head_ = op;
    op->listed = true;
  }
  void erase(UcxOp* op) {
    if (!op->listed) return;
    if (op->prev != nullptr) op->prev->next = op->next;
    if (op->next != nullptr) op->next->prev = op->prev;
    if (head_ == op) head_ = op->next;
    op->prev = op->next = nullptr;
    op->listed = false;
  }
  // A copy, for loops whose callbacks may erase entries.
  std::vector<UcxOp*> snapshot() const {
    std::vector<UcxOp*> ops;
    for (UcxOp* op = head_; op != nullptr; op = op->next) ops.push_back(op);
    return ops;
  }

 private:
  UcxOp* head_ = nullptr;
};

struct PeerSlot {
  UcxTransport* transport = nullptr;
  int peer = 0;
};

class UcxTransport final : public Transport {
 public:
  UcxTransport(std::unique_ptr<UcxWorker> worker, int rank, int size,
               const TransportOptions& options)
      : worker_(std::move(worker)),
        memory_(std::make_unique<UcxMemory>(worker_->context())),
        rank_(rank),
        size_(size),
        timeout_ms_(options.timeout_ms),
        name_(options.name != nullptr ? options.name : "zrt"),
        endpoints_(size, nullptr),
        slots_(size),
        failures_(size),
        last_heard_(size, Clock::now()) {}

  ~UcxTransport() override;

  Status wire(const std::vector<std::vector<uint8_t>>& addresses, ErrorMode error_mode);
  Status create_endpoint(const ucp_address_t* address, int peer, bool peer_errors,
                         ucp_ep_h* endpoint);

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Status send(int peer, uint64_t tag, const void* buffer, size_t bytes,
              TransportCompletion* completion) override;
  Status recv(int peer, uint64_t tag, void* buffer, size_t bytes,
              TransportCompletion* completion) override;
  Status send_with_header(int peer, uint64_t tag, const void* header, size_t header_bytes,
                          const void* buffer, size_t bytes,
                          TransportCompletion* completion) override;
  Status recv_with_header(int peer, uint64_t tag, void* header, size_t header_bytes, void* buffer,
                          size_t bytes, TransportCompletion* completion) override;
  unsigned progress() override;
  bool arm() override;
  int event_fd() const override { return event_fd_; }
  Clock::time_point last_heard(int peer) const override {
    return peer >= 0 && peer < size_ ? last_heard_[peer] : Clock::time_point{};
  }
  Status health() const override { return failures_.first; }
  void cancel_all(const Status& reason) override;
  void cancel_recv(TransportCompletion* completion, const Status& reason) override;
  Status alloc_registered(size_t bytes, void** buffer) override {
    return memory_->alloc(bytes, buffer);
  }
  void free_registered(void* buffer) override { memory_->free(buffer); }
  Status pack_registered_key(const void* buffer, std::vector<uint8_t>* key) override {
    return memory_->pack_key(buffer, key);
  }
  Status map_peer_registered(int peer, const std::vector<uint8_t>& key, uint64_t remote_address,
                             void** local) override {
    // Only the memory is looked at (not the endpoint's state, which the progress thread
    // writes): the cma all-gather maps from the thread that runs it inline. A dead peer's memory
    // is refused by map_peer itself.
    if (peer < 0 || peer >= size_) {
      return Status::invalid_argument("map_peer_registered: peer {} is out of range [0, {})", peer,
                                      size_);
    }
    return memory_->map_peer(key, remote_address, local)
        .with_context(fmt::format("mapping rank {}'s memory", peer));
  }
  void unmap_peer_registered(void* local) override { memory_->unmap_peer(local); }
  bool find_registered(const void* address, size_t bytes, RegisteredRange* range) override {
    return memory_->find(address, bytes, range);
  }
  std::string describe() const override { return description_; }

  void on_peer_error(int peer, ucs_status_t status);
  void complete(UcxOp* op, ucs_status_t status, size_t received);

 private:
  Status check_post(const char* what, int peer, uint64_t tag, const void* buffer, size_t bytes,
                    TransportCompletion* completion) const;
  UcxOp* begin_op(int peer, uint64_t tag, size_t bytes, bool is_recv,
                  TransportCompletion* completion);
  Status post_send(int peer, uint64_t tag, const void* header, size_t header_bytes,
                   const void* buffer, size_t bytes, TransportCompletion* completion);
  Status post_recv(int peer, uint64_t tag, void* header, size_t header_bytes, void* buffer,
                   size_t bytes, TransportCompletion* completion);
  void fail_failed_peers_receives();
  bool has_attached_ops() const;  // an outstanding operation still has a completion to write
  bool farewell();
  void close_endpoints();
  std::string capture_description();

  // What the transport knows of failed peers.
  struct PeerFailures {
    explicit PeerFailures(int size) : of_peer(size) {}
    std::vector<Status> of_peer;  // non-ok once the peer's endpoint reported an error
    Status first;                 // the transport's health: ok until a peer fails
    // A peer failed whose operations are not failed yet: progress() does it once the UCX call
    // that reported the failure has returned.
    bool unhandled = false;
  };
  // Where the transport is in its life.
  struct Lifecycle {
    bool wired = false;      // every endpoint exists (a failed wire-up must not say farewell)
    bool cancelled = false;  // cancel_all ran: the owner gave up on this communicator
    bool closing = false;    // farewell/close under way
  };

  std::unique_ptr<UcxWorker> worker_;
  std::unique_ptr<UcxMemory> memory_;
  int rank_;
  int size_;
  int64_t timeout_ms_;
  std::string name_;
  int event_fd_ = -1;
  std::vector<ucp_ep_h> endpoints_;
  std::vector<PeerSlot> slots_;
  PeerFailures failures_;
  std::vector<Clock::time_point> last_heard_;  // per peer: its last message's arrival
  Lifecycle lifecycle_;
  ErrorMode error_mode_ = ErrorMode::kHybrid;
  std::vector<ucp_ep_h> watchers_;  // hybrid mode: idle error-mode-PEER endpoints
  UcxOp* acquire_op();
  void release_op(UcxOp* op);
  OpList outstanding_;
  UcxOp* free_ops_ = nullptr;  // singly linked through UcxOp::next
  unsigned completed_ = 0;
  std::string description_;
};

void send_callback(void* request, ucs_status_t status, void* user_data) {
  (void)request;
  auto* op = static_cast<UcxOp*>(user_data);
  op->transport->complete(op, status, 0);
}

void recv_callback(void* request, ucs_status_t status, const ucp_tag_recv_info_t* info,
                   void* user_data) {
  (void)request;
  auto* op = static_cast<UcxOp*>(user_data);
  op->request = request;  // may run inside ucp_tag_recv_nbx, before the poster saw the request
  op->transport->complete(op, status, info != nullptr ? info->length : 0);
}

void endpoint_error_callback(void* arg, ucp_ep_h ep, ucs_status_t status) {
  (void)ep;
  auto* slot = static_cast<PeerSlot*>(arg);
  slot->transport->on_peer_error(slot->peer, status);
}

Status UcxTransport::create_endpoint(const ucp_address_t* address, int peer, bool peer_errors,
                                     ucp_ep_h* endpoint) {
  ucp_ep_params_t params{};
  params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
  params.address = address;
  params.err_mode = peer_errors ? UCP_ERR_HANDLING_MODE_PEER : UCP_ERR_HANDLING_MODE_NONE;
  // Every endpoint gets the callback, mode NONE too: UCX 1.13 treats a transport error on an
  // endpoint without one as fatal (ucp_ep_set_failed answers UNSUPPORTED, and cma's
  // process_vm_readv ESRCH against a dead peer then aborts this process); with it, the error
  // fails that peer's operations like a watcher's report would.
  params.field_mask |= UCP_EP_PARAM_FIELD_ERR_HANDLER;
  params.err_handler.cb = endpoint_error_callback;
  params.err_handler.arg = &slots_[peer];
  ucs_status_t status = ucp_ep_create(worker_->worker(), &params, endpoint);
  if (status != UCS_OK) {
    *endpoint = nullptr;
    return ucx_status(ZRT_SYSTEM_ERROR, fmt::format("ucp_ep_create to rank {}", peer), status);
  }
  return Status::ok();
}

Status UcxTransport::wire(const std::vector<std::vector<uint8_t>>& addresses,
                          ErrorMode error_mode) {
  error_mode_ = error_mode;
  watchers_.assign(size_, nullptr);
  ucs_status_t status = ucp_worker_get_efd(worker_->worker(), &event_fd_);
  if (status != UCS_OK) return ucx_status(ZRT_SYSTEM_ERROR, "ucp_worker_get_efd", status);
  for (int peer = 0; peer < size_; ++peer) {
    slots_[peer] = PeerSlot{this, peer};
    const auto* address = reinterpret_cast<const ucp_address_t*>(addresses[peer].data());
    const bool data_peer_mode = error_mode_ == ErrorMode::kPeer;
    ZRT_RETURN_IF_ERROR(create_endpoint(address, peer, data_peer_mode, &endpoints_[peer]));
    if (error_mode_ == ErrorMode::kHybrid && peer != rank_) {
      ZRT_RETURN_IF_ERROR(create_endpoint(address, peer, true, &watchers_[peer]));
    }
  }
  lifecycle_.wired = true;
  description_ = capture_description();
  ZRT_LOG_INFO("{}: ucx transport rank {}/{}: {}", name_, rank_, size_, description_);
  return Status::ok();
}

// UCX prints an endpoint's configuration (one line per lane: transport/device and what the lane
// carries, and per operation the sizes at which its protocols change); the lanes and the tagged
// send's protocols name what UCX chose for this communicator.
std::string UcxTransport::capture_description() {
  const int peer = size_ > 1 ? (rank_ + 1) % size_ : rank_;
  char* text = nullptr;
  size_t length = 0;
  FILE* stream = open_memstream(&text, &length);
  if (stream == nullptr) return "ucx (endpoint description unavailable)";
  ucp_ep_print_info(endpoints_[peer], stream);
  std::fclose(stream);
  std::string lanes;
  std::string tag_send;
  std::string all(text, length);
  std::free(text);
  size_t begin = 0;
  while (begin < all.size()) {
    size_t end = all.find('\n', begin);
    if (end == std::string::npos) end = all.size();
    std::string line = all.substr(begin, end - begin);
    begin = end + 1;
    const size_t lane = line.find("lane[");
    const size_t protocols = line.find(" tag_send: ");
    if (protocols != std::string::npos) {
      tag_send = line.substr(protocols + 1);
      continue;
    }
    if (lane == std::string::npos) continue;
    if (!lanes.empty()) lanes += "; ";
    lanes += line.substr(lane);
  }
  unsigned major = 0, minor = 0, release = 0;
  ucp_get_version(&major, &minor, &release);
  return fmt::format("ucx {}.{}.{}, error mode {}, endpoint to rank {}: {}{}{}", major, minor,
                     release, error_mode_name(error_mode_), peer,
                     lanes.empty() ? std::string("(no lanes reported)") : lanes,
                     tag_send.empty() ? "" : "; ", tag_send);
}

Status UcxTransport::check_post(const char* what, int peer, uint64_t tag, const void* buffer,
                                size_t bytes, TransportCompletion* completion) const {
  if (peer < 0 || peer >= size_) {
    return Status::invalid_argument("{}: peer {} is out of range [0, {})", what, peer, size_);
  }
  if (tag > kTagMask) {
    return Status::invalid_argument("{}: tag {:#x} has bits above kTagBits ({})", what, tag,
                                    kTagBits);
  }
  if (buffer == nullptr && bytes > 0) {
    return Status::invalid_argument("{}: buffer is NULL with {} bytes", what, bytes);
  }
  if (completion == nullptr) return Status::invalid_argument("{}: completion is NULL", what);
  return Status::ok();
}

// Resets the completion and, unless the peer is known dead (then the completion carries that
// failure and the result is null), makes the record that UCX's callback will complete.
UcxOp* UcxTransport::begin_op(int peer, uint64_t tag, size_t bytes, bool is_recv,
                              TransportCompletion* completion) {
  *completion = TransportCompletion{};
  if (!failures_.of_peer[peer].is_ok()) {
    completion->status = failures_.of_peer[peer];
    completion->done = true;
    return nullptr;
  }
  UcxOp* op = acquire_op();
  op->transport = this;
  op->completion = completion;
  op->peer = peer;
  op->is_recv = is_recv;
  op->bytes = bytes;
  op->tag = tag;
  return op;
}

Status UcxTransport::send(int peer, uint64_t tag, const void* buffer, size_t bytes,
                          TransportCompletion* completion) {
  ZRT_RETURN_IF_ERROR(check_post("send", peer, tag, buffer, bytes, completion));
  return post_send(peer, tag, nullptr, 0, buffer, bytes, completion);
}

Status UcxTransport::send_with_header(int peer, uint64_t tag, const void* header,
                                      size_t header_bytes, const void* buffer, size_t bytes,
                                      TransportCompletion* completion) {
  ZRT_RETURN_IF_ERROR(check_post("send", peer, tag, buffer, bytes, completion));
  if (header == nullptr || header_bytes == 0) {
    return Status::invalid_argument("send_with_header: no header (pointer {}, {} bytes)", header,
                                    header_bytes);
  }
  return post_send(peer, tag, header, header_bytes, buffer, bytes, completion);
}

Status UcxTransport::recv(int peer, uint64_t tag, void* buffer, size_t bytes,
                          TransportCompletion* completion) {
  ZRT_RETURN_IF_ERROR(check_post("recv", peer, tag, buffer, bytes, completion));
  return post_recv(peer, tag, nullptr, 0, buffer, bytes, completion);
}

Status UcxTransport::recv_with_header(int peer, uint64_t tag, void* header, size_t header_bytes,
                                      void* buffer, size_t bytes, TransportCompletion* completion) {
  ZRT_RETURN_IF_ERROR(check_post("recv", peer, tag, buffer, bytes, completion));
  if (header == nullptr || header_bytes == 0) {
    return Status::invalid_argument("recv_with_header: no header (pointer {}, {} bytes)", header,
                                    header_bytes);
  }
  return post_recv(peer, tag, header, header_bytes, buffer, bytes, completion);
}

// The buffer and count UCX is given: the data itself, or with a header UCX's iov datatype over
// the op's two parts (one when the data is empty).
const void* describe_parts(UcxOp* op, const void* header, size_t header_bytes, const void* buffer,
                           size_t bytes, ucp_request_param_t* param, size_t* count) {
  if (header_bytes == 0) {
    *count = bytes;
    return buffer;
  }
  op->parts[0] = ucp_dt_iov_t{const_cast<void*>(header), header_bytes};
  op->parts[1] = ucp_dt_iov_t{const_cast<void*>(buffer), bytes};
  param->op_attr_mask |= UCP_OP_ATTR_FIELD_DATATYPE;
  param->datatype = ucp_dt_make_iov();
  *count = bytes > 0 ? 2 : 1;
  return op->parts.data();
}

Status UcxTransport::post_send(int peer, uint64_t tag, const void* header, size_t header_bytes,
                               const void* buffer, size_t bytes, TransportCompletion* completion) {
  UcxOp* op = begin_op(peer, tag, header_bytes + bytes, /*is_recv=*/false, completion);
  if (op == nullptr) return Status::ok();
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  param.cb.send = send_callback;
  param.user_data = op;
  size_t count = 0;
  const void* data = describe_parts(op, header, header_bytes, buffer, bytes, &param, &count);
  ucs_status_ptr_t request =
      ucp_tag_send_nbx(endpoints_[peer], data, count, ucx_tag(rank_, tag), &param);
  if (UCS_PTR_IS_PTR(request)) {
    op->request = request;
    outstanding_.insert(op);
    return Status::ok();
  }
  complete(op, UCS_PTR_STATUS(request), 0);
  return Status::ok();
}

Status UcxTransport::post_recv(int peer, uint64_t tag, void* header, size_t header_bytes,
                               void* buffer, size_t bytes, TransportCompletion* completion) {
  UcxOp* op = begin_op(peer, tag, header_bytes + bytes, /*is_recv=*/true, completion);
  if (op == nullptr) return Status::ok();
  // No immediate completion: UCX 1.13 reports length 0 in recv_info when a receive matches an
  // already-arrived eager message, so always take the callback, which carries the true length.
  ucp_request_param_t param{};
  param.op_attr_mask =
      UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
  param.cb.recv = recv_callback;
  param.user_data = op;
  size_t count = 0;
  void* data =
      const_cast<void*>(describe_parts(op, header, header_bytes, buffer, bytes, &param, &count));
  op->posting = true;
  ucs_status_ptr_t request =
      ucp_tag_recv_nbx(worker_->worker(), data, count, ucx_tag(peer, tag), ~uint64_t{0}, &param);
  op->posting = false;
  if (op->finished) {  // the callback already ran
    release_op(op);
    return Status::ok();
  }
  if (UCS_PTR_IS_PTR(request)) {
    op->request = request;
    outstanding_.insert(op);
    return Status::ok();
  }
  complete(op, UCS_PTR_STATUS(request), 0);
  return Status::ok();
}

void UcxTransport::complete(UcxOp* op, ucs_status_t status, size_t received) {
  if (op->request != nullptr) {
    outstanding_.erase(op);
    ucp_request_free(op->request);
    op->request = nullptr;
  }
  ++completed_;
  TransportCompletion* completion = op->completion;
  if (completion != nullptr) {
    const char* what = op->is_recv ? "recv from" : "send to";
    if (op->has_reason) {
      completion->status = op->reason;
    } else if (status == UCS_OK) {
      completion->status = Status::ok();
      completion->bytes = op->is_recv ? received : op->bytes;
      if (op->is_recv) last_heard_[op->peer] = Clock::now();
    } else if (status == UCS_ERR_MESSAGE_TRUNCATED) {
      completion->status = Status::error(
          ZRT_INVALID_USAGE,
          "{}: recv from rank {} (tag {:#x}): the message is longer than the {}-byte receive "
          "buffer",
          name_, op->peer, op->tag, op->bytes);
    } else if (!failures_.of_peer[op->peer].is_ok()) {
      completion->status = failures_.of_peer[op->peer];
    } else {
      completion->status =
          Status::error(ZRT_REMOTE_ERROR, "{}: {} rank {} ({} bytes) failed: {}", name_, what,
                        op->peer, op->bytes, ucs_status_string(status));
    }
    completion->done = true;
  }
  if (op->posting) {
    op->finished = true;
    return;
  }
  if (op->orphaned) return;  // ~UcxTransport owns it now (UCX may call back while it tears down)
  release_op(op);
}

UcxOp* UcxTransport::acquire_op() {
  if (free_ops_ == nullptr) return new UcxOp{};
  UcxOp* op = free_ops_;
  free_ops_ = op->next;
  *op = UcxOp{};
  return op;
}

void UcxTransport::release_op(UcxOp* op) {
  outstanding_.erase(op);
  op->completion = nullptr;
  op->next = free_ops_;
  free_ops_ = op;
}

void UcxTransport::on_peer_error(int peer, ucs_status_t status) {
  if (!failures_.of_peer[peer].is_ok()) return;
  failures_.of_peer[peer] =
      Status::error(ZRT_REMOTE_ERROR, "{}: rank {} {} (ucx: {})", name_, peer,
                    peer_failure_words(status), ucs_status_string(status));
  // During teardown a peer that already holds every farewell closes its side; that is no news.
  if (lifecycle_.closing) {
    ZRT_LOG_DEBUG("{} (during teardown)", failures_.of_peer[peer].message());
  } else {
    ZRT_LOG_WARN("{}", failures_.of_peer[peer].message());
  }
  if (failures_.first.is_ok()) failures_.first = failures_.of_peer[peer];
  // Receives are posted on the worker, not on the endpoint, so UCX will not fail them (nor, in
  // hybrid mode, the sends on the data endpoint); do it after the progress call that delivered
  // this callback returns.
  failures_.unhandled = true;
}

void UcxTransport::fail_failed_peers_receives() {
  failures_.unhandled = false;
  std::vector<UcxOp*> doomed;
  for (UcxOp* op : outstanding_.snapshot()) {
    if (!failures_.of_peer[op->peer].is_ok()) doomed.push_back(op);
  }
  for (UcxOp* op : doomed) {
    // An earlier cancel of this loop may have completed (and recycled) this one.
    if (!outstanding_.contains(op)) continue;
    op->has_reason = true;
    op->reason = failures_.of_peer[op->peer];
    if (op->is_recv) {
      ucp_request_cancel(worker_->worker(), op->request);  // runs the callback before returning
    } else if (op->completion != nullptr && error_mode_ != ErrorMode::kPeer) {
      // A send on a mode-NONE endpoint is never failed by UCX: fail it here and leave the
      // request to end (or to go with the worker).
      op->completion->status = op->reason;
      op->completion->done = true;
      op->completion = nullptr;
      ++completed_;
    }
  }
}

unsigned UcxTransport::progress() {
  completed_ = 0;
  ucp_worker_progress(worker_->worker());
  if (failures_.unhandled) fail_failed_peers_receives();
  return completed_;
}

bool UcxTransport::arm() {
  ucs_status_t status = ucp_worker_arm(worker_->worker());
  if (status == UCS_ERR_BUSY) return false;
  if (status != UCS_OK) {
    // Arming failed for another reason: report "work to do" so the caller keeps polling rather
    // than sleeping on an fd that may never fire.
    ZRT_LOG_WARN("{}: ucp_worker_arm: {}", name_, ucs_status_string(status));
    return false;
  }
  return true;
}

bool UcxTransport::has_attached_ops() const {
  for (const UcxOp* op : outstanding_.snapshot()) {
    if (op->completion != nullptr) return true;
  }
  return false;
}

void UcxTransport::cancel_all(const Status& reason) {
  lifecycle_.cancelled = true;
  const std::vector<UcxOp*> ops = outstanding_.snapshot();
  for (UcxOp* op : ops) {
    op->has_reason = true;
    op->reason = reason;
  }
  for (UcxOp* op : ops) {
    // A cancel can run callbacks that complete (and delete) other operations of the snapshot:
    // only touch the ones still outstanding.
    if (!outstanding_.contains(op)) continue;
    if (op->is_recv) ucp_request_cancel(worker_->worker(), op->request);
  }
  // Sends cannot always be cancelled (UCX may be inside a protocol with the peer): give them a
  // bounded moment to end, then detach them so that every completion is written on return.
  // Operations detached by an earlier cancel have no completion left to write: waiting for them
  // again (the destructor's cancel after the engine's) cost every survivor of a link going down
  // another second in zrt_comm_destroy, for sends to a host that cannot answer.
  const auto deadline =
      Clock::now() + std::chrono::milliseconds(std::min<int64_t>(timeout_ms_, 1000));
  while (has_attached_ops() && Clock::now() < deadline) {
    if (ucp_worker_progress(worker_->worker()) == 0) {
      // Nothing moved: don't burn the core another rank may need.
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }
  for (UcxOp* op : outstanding_.snapshot()) {
    if (op->completion == nullptr) continue;
    op->completion->status = reason;
    op->completion->done = true;
    op->completion = nullptr;
  }
}

// Orderly teardown. A closed endpoint looks like a dead peer to the other side (tcp sees the
// socket close, shared memory sees the process go), and a peer whose progress thread still runs
// would fail its last collective on that "error". So before closing, every rank sends a 0-byte
// farewell to every peer and waits for theirs: once a rank holds all farewells, every peer is
// already tearing down its transport (its engine stopped) and nobody can mistake the close for
// a failure. Skipped when unhealthy; bounded by the timeout. Returns whether it completed.
bool UcxTransport::farewell() {
  lifecycle_.closing = true;
  if (size_ == 1 || !lifecycle_.wired || !failures_.first.is_ok() || lifecycle_.cancelled) {
    return false;
  }
  std::vector<TransportCompletion> sends(size_), recvs(size_);
  std::vector<void*> requests;
  auto post = [&](bool is_recv, int peer) {
    UcxOp* op = acquire_op();
    op->transport = this;
    op->completion = is_recv ? &recvs[peer] : &sends[peer];
    op->peer = peer;
    op->is_recv = is_recv;
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    if (is_recv) {
      param.op_attr_mask |= UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
      param.cb.recv = recv_callback;
    } else {
      param.cb.send = send_callback;
    }
    param.user_data = op;
    // Low bits: the sender's rank (the source bits hold the reserved marker).
    op->posting = true;
    ucs_status_ptr_t request =
        is_recv ? ucp_tag_recv_nbx(worker_->worker(), nullptr, 0,
                                   (kFarewellSource << kTagBits) | static_cast<uint64_t>(peer),
                                   ~uint64_t{0}, &param)
                : ucp_tag_send_nbx(endpoints_[peer], nullptr, 0,
                                   (kFarewellSource << kTagBits) | static_cast<uint64_t>(rank_),
                                   &param);
    op->posting = false;
    if (op->finished) {
      release_op(op);
    } else if (UCS_PTR_IS_PTR(request)) {
      op->request = request;
      outstanding_.insert(op);
    } else {
      complete(op, UCS_PTR_STATUS(request), 0);
    }
  };
  for (int peer = 0; peer < size_; ++peer) {
    if (peer == rank_) continue;
    post(true, peer);
    post(false, peer);
  }
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms_);
  for (;;) {
    bool all = true;
    for (int peer = 0; peer < size_; ++peer) {
      if (peer == rank_) continue;
      all = all && sends[peer].done && recvs[peer].done;
    }
    if (all) break;
    // A peer that fails now fails its farewell receive (fail_failed_peers_receives), so only
    // the deadline needs checking here.
    if (Clock::now() > deadline) {
      cancel_all(Status::error(ZRT_REMOTE_ERROR, "{}: farewell not completed", name_));
      return false;
    }
    if (ucp_worker_progress(worker_->worker()) != 0) continue;
    if (failures_.unhandled) fail_failed_peers_receives();
    if (arm()) {
      pollfd fd{event_fd_, POLLIN, 0};
      poll(&fd, 1, 100);
    }
  }
  for (int peer = 0; peer < size_; ++peer) {
    if (peer == rank_) continue;
    if (!sends[peer].status.is_ok() || !recvs[peer].status.is_ok()) return false;
  }
  return true;
}

void UcxTransport::close_endpoints() {
  const bool healthy = farewell() || size_ == 1;
  std::vector<void*> closing;
  for (int peer = 0; peer < size_; ++peer) {
    if (endpoints_[peer] == nullptr) continue;
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    // Flush-close (delivers what is in flight) to healthy peers; a failed peer cannot answer.
    param.flags = (healthy && failures_.of_peer[peer].is_ok()) ? 0 : UCP_EP_CLOSE_FLAG_FORCE;
    ucs_status_ptr_t request = ucp_ep_close_nbx(endpoints_[peer], &param);
    endpoints_[peer] = nullptr;
    if (UCS_PTR_IS_PTR(request)) closing.push_back(request);
    if (watchers_.empty() || watchers_[peer] == nullptr) continue;
    request = ucp_ep_close_nbx(watchers_[peer], &param);
    watchers_[peer] = nullptr;
    if (UCS_PTR_IS_PTR(request)) closing.push_back(request);
  }
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms_);
  while (!closing.empty()) {
    ucp_worker_progress(worker_->worker());
    for (auto it = closing.begin(); it != closing.end();) {
      if (ucp_request_check_status(*it) != UCS_INPROGRESS) {
        ucp_request_free(*it);
        it = closing.erase(it);
      } else {
        ++it;
      }
    }
    if (Clock::now() > deadline) {
      ZRT_LOG_WARN("{}: {} endpoint(s) did not close within {} ms; destroying the worker anyway",
                   name_, closing.size(), timeout_ms_);
      break;
    }
  }
}

void UcxTransport::cancel_recv(TransportCompletion* completion, const Status& reason) {
  UcxOp* target = nullptr;
  for (UcxOp* op : outstanding_.snapshot()) {
    if (op->is_recv && op->completion == completion) target = op;
  }
  if (target == nullptr) return;
  target->has_reason = true;
  target->reason = reason;
  ucp_request_cancel(worker_->worker(), target->request);
  // UCX calls back from progress; completion->done is ours (the op record may be reused).
  const auto deadline =
      Clock::now() + std::chrono::milliseconds(std::min<int64_t>(timeout_ms_, 1000));
  while (!completion->done && Clock::now() < deadline) {
    if (ucp_worker_progress(worker_->worker()) == 0) {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }
  if (!completion->done && outstanding_.contains(target) && target->completion == completion) {
    target->completion = nullptr;  // detached: UCX's late callback writes nothing
    completion->status = reason;
    completion->done = true;
  }
}

UcxTransport::~UcxTransport() {
  if (!outstanding_.empty()) {
    cancel_all(Status::error(ZRT_REMOTE_ERROR, "{}: transport destroyed", name_));
  }
  memory_->unmap_all_peers();  // remote keys go before the endpoints they were unpacked on
  close_endpoints();
  const std::vector<UcxOp*> leftovers = outstanding_.snapshot();
  for (UcxOp* op : leftovers) {
    op->orphaned = true;
    outstanding_.erase(op);
  }
  memory_.reset();  // unmap before the context goes
  worker_.reset();
  for (UcxOp* op : leftovers) delete op;
  while (free_ops_ != nullptr) {
    UcxOp* op = free_ops_;
    free_ops_ = op->next;
    delete op;
  }
}

}  // namespace

Status wire_ucx_transport(std::unique_ptr<UcxWorker> worker, int rank, int size,
                          const std::vector<std::vector<uint8_t>>& addresses,
                          const TransportOptions& options, std::unique_ptr<Transport>* transport) {
  if (worker == nullptr) return Status::invalid_argument("wire_ucx_transport: worker is NULL");
  if (transport == nullptr)
    return Status::invalid_argument("wire_ucx_transport: transport is NULL");
  if (size < 1 || size > kMaxRanks) {
    return Status::invalid_argument("wire_ucx_transport: size {} is not in [1, {}]", size,
                                    kMaxRanks);
  }
  if (rank < 0 || rank >= size) {
    return Status::invalid_argument("wire_ucx_transport: rank {} is not in [0, {})", rank, size);
  }
  if (addresses.size() != static_cast<size_t>(size)) {
    return Status::invalid_argument("wire_ucx_transport: {} addresses for {} ranks",
                                    addresses.size(), size);
  }
  for (int peer = 0; peer < size; ++peer) {
    if (addresses[peer].empty()) {
      return Status::invalid_argument("wire_ucx_transport: rank {} sent an empty address", peer);
    }
  }
  ErrorMode error_mode = ErrorMode::kHybrid;
  ZRT_RETURN_IF_ERROR(read_error_mode(options, &error_mode));
  auto result = std::make_unique<UcxTransport>(std::move(worker), rank, size, options);
  ZRT_RETURN_IF_ERROR(result->wire(addresses, error_mode));
  *transport = std::move(result);
  return Status::ok();
}

Status create_ucx_transport(Bootstrap& bootstrap, const TransportOptions& options,
                            std::unique_ptr<Transport>* transport) {
  if (transport == nullptr) {
    return Status::invalid_argument("create_ucx_transport: transport is NULL");
  }
  std::unique_ptr<UcxWorker> worker;
  ZRT_RETURN_IF_ERROR(UcxWorker::create(options, &worker));
  const int size = bootstrap.size();
  // Two exchanges: lengths, then addresses padded to the longest (records must be equal-sized).
  const uint64_t length = worker->address().size();
  std::vector<uint64_t> lengths(size);
  ZRT_RETURN_IF_ERROR(bootstrap.allgather(&length, lengths.data(), sizeof(length))
                          .with_context("create_ucx_transport: exchanging address lengths"));
  const uint64_t longest = *std::max_element(lengths.begin(), lengths.end());
  std::vector<uint8_t> mine(longest, 0);
  std::memcpy(mine.data(), worker->address().data(), length);
  std::vector<uint8_t> all(longest * size);
  ZRT_RETURN_IF_ERROR(bootstrap.allgather(mine.data(), all.data(), longest)
                          .with_context("create_ucx_transport: exchanging worker addresses"));
  std::vector<std::vector<uint8_t>> addresses(size);
  for (int peer = 0; peer < size; ++peer) {
    if (lengths[peer] > longest) {
      return Status::error(ZRT_INTERNAL_ERROR, "create_ucx_transport: bad length from rank {}",
                           peer);
    }
    const uint8_t* begin = all.data() + longest * peer;
    addresses[peer].assign(begin, begin + lengths[peer]);
  }
  return wire_ucx_transport(std::move(worker), bootstrap.rank(), size, addresses, options,
                            transport);
}

}  // namespace zrt
