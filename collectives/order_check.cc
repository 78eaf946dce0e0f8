#include "collectives/order_check.h"

#include <fmt/format.h>

#include "lib/core/dtype.h"
#include "engine/stream_resources.h"

namespace zrt {
namespace {

bool is_rooted(int kind) {
  return kind == ZRT_COLL_BROADCAST || kind == ZRT_COLL_REDUCE;
}

bool is_reducing(int kind) {
  return kind == ZRT_COLL_ALL_REDUCE || kind == ZRT_COLL_REDUCE_SCATTER || kind == ZRT_COLL_REDUCE;
}

std::string format_bytes(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024.0 && unit < 4) {
    value /= 1024.0;
    ++unit;
  }
  if (unit == 0) return fmt::format("{} B", bytes);
  std::string text = fmt::format("{:.1f}", value);
  if (text.size() > 2 && text.compare(text.size() - 2, 2, ".0") == 0) text.resize(text.size() - 2);
  return text + " " + kUnits[unit];
}

std::string purpose_text(const OrderFingerprint& fingerprint) {
  const char* what = nullptr;
  switch (static_cast<Purpose>(fingerprint.purpose)) {
    case Purpose::kUnit:
      what = "unit";
      break;
    case Purpose::kBucket:
      what = "bucket";
      break;
    case Purpose::kInternal:
      what = "internal";
      break;
    default:
      return "";
  }
  if (fingerprint.purpose_id < 0) return std::string(what) + ", ";
  return fmt::format("{} {}, ", what, fingerprint.purpose_id);
}

std::string rank_list(const std::string& joined, int count) {
  return (count == 1 ? "rank " : "ranks ") + joined;
}

}  // namespace

OrderFingerprint make_fingerprint(const CollectiveArgs& args) {
  OrderFingerprint fingerprint;
  fingerprint.magic = kOrderFingerprintMagic;
  fingerprint.kind = static_cast<uint8_t>(args.kind);
  fingerprint.purpose = static_cast<uint8_t>(args.purpose);
  fingerprint.purpose_id = args.purpose_id;
  if (args.kind == ZRT_COLL_BARRIER) return fingerprint;
  fingerprint.count = args.count;
  fingerprint.dtype = static_cast<uint8_t>(args.dtype);
  if (is_reducing(args.kind)) {
    fingerprint.op = args.premul ? OrderFingerprint::kPremulOp : static_cast<uint8_t>(args.op);
  }
  if (is_rooted(args.kind)) fingerprint.root = args.root;
  return fingerprint;
}

std::string describe_fingerprint(const OrderFingerprint& fingerprint) {
  const auto kind = static_cast<zrt_coll_kind_t>(fingerprint.kind);
  const char* name = fingerprint.kind < ZRT_COLL_KIND_COUNT ? coll_kind_name(kind) : "unknown";
  const std::string purpose = purpose_text(fingerprint);
  if (kind == ZRT_COLL_BARRIER) {
    if (purpose.empty()) return name;
    return fmt::format("{}({})", name, purpose.substr(0, purpose.size() - 2));
  }
  const auto dtype = static_cast<zrt_dtype_t>(fingerprint.dtype);
  const bool known_dtype = check_dtype(dtype, "dtype").is_ok();
  std::string text = fmt::format("{}({}{} x {}", name, purpose, fingerprint.count,
                                 known_dtype ? dtype_name(dtype) : "?");
  if (known_dtype) text += " = " + format_bytes(fingerprint.count * dtype_size(dtype));
  if (is_reducing(kind)) {
    text += ", ";
    text += fingerprint.op == OrderFingerprint::kPremulOp
                ? "premul_sum"
                : op_name(static_cast<zrt_op_t>(fingerprint.op));
  }
  if (is_rooted(kind)) text += fmt::format(", root {}", fingerprint.root);
  if (fingerprint.variant == OrderFingerprint::kGatherByCma) text += ", gathering by cma";
  return text + ")";
}

bool fingerprints_match(const OrderFingerprint& a, const OrderFingerprint& b) {
  return a.kind == b.kind && a.count == b.count && a.dtype == b.dtype && a.op == b.op &&
         a.root == b.root && a.purpose == b.purpose && a.purpose_id == b.purpose_id &&
         a.variant == b.variant;
}

Status OrderCheck::start(TaskContext& context) {
  active_ = false;
  exchange_count_ = pending_ops_ = pending_sends_ = matched_peers_ = 0;
  matched_noted_ = false;
  mismatch_ = Status::ok();
  peer_error_ = Status::ok();
  if (!context.check_order || !has_fingerprint_ || context.size < 2) return Status::ok();
  active_ = true;
  started_ = std::chrono::steady_clock::now();
  mine_.rank = context.rank;
  mine_.stream = context.stream_index;
  mine_.sequence = context.sequence;
  if (context.resources != nullptr) last_matched_ = context.resources->last_matched;

  // Every peer, nearest right neighbour first; beyond kMaxCheckedPeers the two ring neighbours.
  const int others = context.size - 1;
  int peers[kMaxCheckedPeers];
  if (others <= kMaxCheckedPeers) {
    for (int i = 0; i < others; ++i)
      peers[exchange_count_++] = (context.rank + 1 + i) % context.size;
  } else {
    peers[exchange_count_++] = (context.rank + 1) % context.size;
    peers[exchange_count_++] = (context.rank + context.size - 1) % context.size;
  }
  const uint64_t tag = context.tag_base | kOrderCheckTagBit;
  for (int i = 0; i < exchange_count_; ++i) {
    Exchange& exchange = exchanges_[i];
    exchange = Exchange{};
    exchange.peer = peers[i];
    ZRT_RETURN_IF_ERROR(
        context.transport
            .recv(exchange.peer, tag, &exchange.theirs, sizeof(OrderFingerprint), &exchange.recv)
            .with_context(fmt::format("order check: receive of rank {}'s "
                                      "fingerprint",
                                      exchange.peer)));
    exchange.recv_posted = true;
    ++pending_ops_;
    ZRT_RETURN_IF_ERROR(
        context.transport.send(exchange.peer, tag, &mine_, sizeof(OrderFingerprint), &exchange.send)
            .with_context(
                fmt::format("order check: send of the fingerprint to rank {}", exchange.peer)));
    exchange.send_posted = true;
    ++pending_ops_;
    ++pending_sends_;
    bytes_sent_ += sizeof(OrderFingerprint);
    ++messages_sent_;
  }
  return Status::ok();
}

void OrderCheck::examine(Exchange& exchange) {
  if (!exchange.recv.status.is_ok()) {
    if (peer_error_.is_ok()) peer_error_ = exchange.recv.status;
    return;
  }
  const OrderFingerprint& theirs = exchange.theirs;
  if (exchange.recv.bytes != sizeof(OrderFingerprint) || theirs.magic != kOrderFingerprintMagic) {
    if (mismatch_.is_ok()) {
      mismatch_ = Status::error(ZRT_INVALID_USAGE,
                                "order check: rank {} sent a malformed fingerprint ({} bytes) for "
                                "collective #{} of stream {} (different zrt builds?)",
                                exchange.peer, exchange.recv.bytes, mine_.sequence, mine_.stream);
      mismatch_time_ = std::chrono::steady_clock::now();
    }
    return;
  }
  exchange.received = true;
  if (fingerprints_match(mine_, theirs)) {
    ++matched_peers_;
    return;
  }
  if (!mismatch_.is_ok()) return;
  // Collectives are matched by stream and number, so both calls below are the same
  // collective slot on the two ranks.
  mismatch_ = Status::error(ZRT_INVALID_USAGE,
                            "collective order mismatch at collective #{} of stream {}: rank {} "
                            "called {} where rank {} called {}",
                            mine_.sequence, mine_.stream, theirs.rank, describe_fingerprint(theirs),
                            mine_.rank, describe_fingerprint(mine_));
  mismatch_time_ = std::chrono::steady_clock::now();
}

int OrderCheck::poll(TaskContext& context) {
  if (!active_ || pending_ops_ == 0) return 0;
  int completed = 0;
  for (int i = 0; i < exchange_count_; ++i) {
    Exchange& exchange = exchanges_[i];
    if (exchange.send_posted && !exchange.send_seen && exchange.send.done) {
      exchange.send_seen = true;
      --pending_ops_;
      --pending_sends_;
      ++completed;
      if (!exchange.send.status.is_ok() && peer_error_.is_ok()) peer_error_ = exchange.send.status;
    }
    if (exchange.recv_posted && !exchange.recv_seen && exchange.recv.done) {
      exchange.recv_seen = true;
      --pending_ops_;
      ++completed;
      examine(exchange);
    }
  }
  if (matched_peers_ == exchange_count_) note_matched(context);
  return completed;
}

void OrderCheck::note_matched(TaskContext& context) {
  if (matched_noted_) return;
  matched_noted_ = true;
  if (context.resources != nullptr) context.resources->last_matched = mine_;
}

bool OrderCheck::mismatch_ready() const {
  if (mismatch_.is_ok()) return false;
  if (pending_sends_ == 0) return true;
  return std::chrono::steady_clock::now() - mismatch_time_ >=
         std::chrono::milliseconds(kVerdictGraceMs);
}

std::string OrderCheck::missing_description() const {
  if (!active_) return "";
  std::string joined;
  int count = 0;
  for (int i = 0; i < exchange_count_; ++i) {
    const Exchange& exchange = exchanges_[i];
    if (exchange.received) continue;
    joined += (count == 0 ? "" : ", ") + std::to_string(exchange.peer);
    ++count;
  }
  if (count == 0) return "";
  return fmt::format("order check: no fingerprint from {} for collective #{} of stream {}",
                     rank_list(joined, count), mine_.sequence, mine_.stream);
}

std::string OrderCheck::waiting_on() const {
  if (!active_) return "";
  std::string joined;
  int count = 0;
  for (int i = 0; i < exchange_count_; ++i) {
    const Exchange& exchange = exchanges_[i];
    if (exchange.recv_seen) continue;
    joined += (count == 0 ? "" : ", ") + std::to_string(exchange.peer);
    ++count;
  }
  if (count == 0) return "";
  const std::string who = rank_list(joined, count);
  std::string last = "no collective of this stream matched yet";
  if (last_matched_.magic == kOrderFingerprintMagic) {
    last = fmt::format("the last collective matched on stream {} was #{} {}", mine_.stream,
                       last_matched_.sequence, describe_fingerprint(last_matched_));
  }
  return fmt::format(
      "{} (behind: {} not called collective #{} of stream {}, {} here, or called fewer "
      "collectives on this stream; {})",
      who, count == 1 ? "has" : "have", mine_.sequence, mine_.stream, describe_fingerprint(mine_),
      last);
}

}  // namespace zrt
