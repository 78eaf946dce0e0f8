#include "collectives/ring_window.h"

#include <atomic>
#include <cstring>
#include <vector>

#include <fmt/format.h>

namespace zrt {
namespace {

// Below the tags the stream's handshakes reserve (this one's 0x7fff, the one-shot arena's 0x7ffd),
// so that a READY never shares a tag with them, even in a task that runs both (the ring
// all-reduce gathering by cma).
constexpr uint32_t kTagModulus = 0x7ffd;
constexpr uint32_t kHandshakeTag = 0x7fff;

}  // namespace

uint32_t RingWindow::ready_tag(uint64_t unit) const {
  return static_cast<uint32_t>((tag_offset_ + unit) % kTagModulus);
}

Status RingWindow::attach(TaskContext& context, int left, int right) {
  resources_ = context.resources;
  if (resources_ == nullptr || !resources_->windows) {
    return Status(ZRT_INTERNAL_ERROR, "window ring: the stream has no window inbox");
  }
  if (resources_->inbox == nullptr) {
    // The stream's first window phase: its inbox, which the engine frees with the stream.
    const size_t bytes =
        static_cast<size_t>(resources_->window_slots) * resources_->window_slot_bytes;
    void* inbox = nullptr;
    ZRT_RETURN_IF_ERROR(context.transport.alloc_registered(bytes, &inbox)
                            .with_context(fmt::format("window inbox of stream {} ({} bytes)",
                                                      context.stream_index, bytes)));
    resources_->inbox = static_cast<char*>(inbox);
  }
  slots_ = static_cast<uint64_t>(resources_->window_slots);
  slot_bytes_ = resources_->window_slot_bytes;
  if (slots_ < 2 || slots_ > kMaxSlots || slot_bytes_ == 0) {
    return Status(ZRT_INTERNAL_ERROR, "window ring: bad inbox geometry");
  }
  inbox_ = resources_->inbox;
  right_inbox_ = resources_->right_inbox;
  left_ = left;
  right_ = right;
  return Status::ok();
}

void RingWindow::start(uint64_t units, uint32_t tag_offset, bool fingerprint_first) {
  units_ = units;
  tag_offset_ = tag_offset;
  fingerprint_first_ = fingerprint_first;
  next_ready_post_ = 0;
  written_ = 0;
  handshake_started_ = false;
  ready_seen_.fill(false);
}

Status RingWindow::handshake(TaskContext& context, CollTask& task, bool* ready) {
  if (right_inbox_ != nullptr) {
    *ready = true;
    return Status::ok();
  }
  *ready = false;
  if (!handshake_started_) {
    handshake_started_ = true;
    std::vector<uint8_t> key;
    ZRT_RETURN_IF_ERROR(context.transport.pack_registered_key(resources_->inbox, &key)
                            .with_context("window handshake"));
    if (key.size() > kWindowKeyMaxBytes) {
      return Status::error(ZRT_INTERNAL_ERROR, "window handshake: memory key of {} bytes > {}",
                           key.size(), kWindowKeyMaxBytes);
    }
    const uint64_t address = reinterpret_cast<uintptr_t>(inbox_);
    resources_->window_key.resize(sizeof(address) + key.size());
    std::memcpy(resources_->window_key.data(), &address, sizeof(address));
    std::memcpy(resources_->window_key.data() + sizeof(address), key.data(), key.size());
    ZRT_RETURN_IF_ERROR(task.post_recv(context, right_, kHandshakeTag,
                                       resources_->window_peer.data(),
                                       resources_->window_peer.size(), &key_recv_));
    ZRT_RETURN_IF_ERROR(task.post_send(context, left_, kHandshakeTag, resources_->window_key.data(),
                                       resources_->window_key.size(), &key_send_,
                                       /*data=*/false));
  }
  if (!key_recv_.finished()) {
    task.note_waiting(right_);
    return Status::ok();
  }
  key_recv_.posted = false;
  if (!key_recv_.completion.status.is_ok()) {
    return key_recv_.completion.status.with_context(
        fmt::format("window handshake: receive from rank {}", right_));
  }
  const size_t bytes = key_recv_.completion.bytes;
  if (bytes <= sizeof(uint64_t)) {
    return Status::error(ZRT_REMOTE_ERROR, "window handshake: {} bytes from rank {}", bytes,
                         right_);
  }
  uint64_t address = 0;
  std::memcpy(&address, resources_->window_peer.data(), sizeof(address));
  const std::vector<uint8_t> key(resources_->window_peer.begin() + sizeof(address),
                                 resources_->window_peer.begin() + static_cast<long>(bytes));
  void* mapped = nullptr;
  ZRT_RETURN_IF_ERROR(
      context.transport.map_peer_registered(right_, key, address, &mapped)
          .with_context(fmt::format("window handshake: mapping rank {}'s inbox (ZRT_WINDOWS=0 "
                                    "sends through UCX messages instead)",
                                    right_)));
  resources_->right_inbox = right_inbox_ = static_cast<char*>(mapped);
  task.advanced();
  *ready = true;
  return Status::ok();
}

Status RingWindow::post_ready_receives(TaskContext& context, CollTask& task, uint64_t next) {
  while (next_ready_post_ < units_ && next_ready_post_ < next + slots_) {
    const int slot = static_cast<int>(next_ready_post_ % slots_);
    ZRT_RETURN_IF_ERROR(task.post_recv(context, left_, ready_tag(next_ready_post_),
                                       &ready_in_[slot], sizeof(FingerprintedReady),
                                       &ready_recvs_[slot]));
    ++next_ready_post_;
  }
  return Status::ok();
}

Status RingWindow::arrived(CollTask& task, uint64_t unit, size_t bytes, bool* ok) {
  const int slot = static_cast<int>(unit % slots_);
  *ok = false;
  // The slot's credit goes out when the unit is consumed: its previous credit must be gone.
  PostedOp& credit = credit_sends_[slot];
  ZRT_RETURN_IF_ERROR(task.collect(&credit, left_, true, 0));
  if (credit.busy()) return Status::ok();
  if (!ready_seen_[slot]) {
    PostedOp& ready = ready_recvs_[slot];
    if (!ready.finished()) return Status::ok();
    // Collected here rather than by task.collect, which would count the notification as data
    // (consumed() counts the chunk's bytes).
    ready.posted = false;
    if (!ready.completion.status.is_ok()) {
      return ready.completion.status.with_context(
          fmt::format("window: waiting for chunk {} from rank {}", unit, left_));
    }
    const size_t got = ready.completion.bytes;
    uint64_t written = 0;
    if (got == sizeof(FingerprintedReady)) {
      ZRT_RETURN_IF_ERROR(
          task.check_fingerprint(&ready_in_[slot].fingerprint, sizeof(OrderFingerprint), left_));
      written = ready_in_[slot].bytes;
    } else if (got == sizeof(uint64_t)) {
      // A peer without the fingerprint where this rank expects one called something else.
      if (carries_fingerprint(unit) && task.fingerprint_on()) {
        ZRT_RETURN_IF_ERROR(task.check_fingerprint(&ready_in_[slot], got, left_));
      }
      std::memcpy(&written, &ready_in_[slot], sizeof(written));
    } else {
      return Status::error(ZRT_REMOTE_ERROR, "window: notification of {} bytes from rank {}", got,
                           left_);
    }
    task.advanced();
    if (written != bytes) {
      return Status::error(ZRT_REMOTE_ERROR,
                           "window: rank {} wrote {} bytes for chunk {}, expected {} (mismatched "
                           "collective arguments across ranks?)",
                           left_, written, unit, bytes);
    }
    ready_seen_[slot] = true;
  }
  *ok = true;
  return Status::ok();
}

Status RingWindow::consumed(TaskContext& context, CollTask& task, uint64_t unit, size_t bytes) {
  const int slot = static_cast<int>(unit % slots_);
  ready_seen_[slot] = false;
  ZRT_RETURN_IF_ERROR(task.post_send(context, left_, credit_tag(unit), nullptr, 0,
                                     &credit_sends_[slot],
                                     /*data=*/false));
  task.add_received(bytes);
  task.advanced();
  return Status::ok();
}

Status RingWindow::writable(CollTask& task, uint64_t unit, bool* ok) {
  *ok = false;
  PostedOp& ready = ready_sends_[unit % slots_];
  ZRT_RETURN_IF_ERROR(task.collect(&ready, right_, true, 0));
  if (ready.busy()) return Status::ok();
  if (unit >= slots_) {
    PostedOp& credit = credit_recvs_[unit % slots_];  // CREDIT(unit - S)
    if (credit.posted) {
      if (!credit.finished()) return Status::ok();
      ZRT_RETURN_IF_ERROR(task.collect(&credit, right_, false, 0));
    }
  }
  *ok = true;
  return Status::ok();
}

Status RingWindow::written(TaskContext& context, CollTask& task, uint64_t unit, size_t bytes) {
  const int slot = static_cast<int>(unit % slots_);
  ZRT_RETURN_IF_ERROR(
      task.post_recv(context, right_, credit_tag(unit), nullptr, 0, &credit_recvs_[slot]));
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (carries_fingerprint(unit) && task.fingerprint_on()) {
    fingerprinted_out_.fingerprint = task.fingerprint();
    fingerprinted_out_.bytes = bytes;
    ZRT_RETURN_IF_ERROR(task.post_send(context, right_, ready_tag(unit), &fingerprinted_out_,
                                       sizeof(fingerprinted_out_), &ready_sends_[slot],
                                       /*data=*/false));
  } else {
    ready_out_[slot] = bytes;
    ZRT_RETURN_IF_ERROR(task.post_send(context, right_, ready_tag(unit), &ready_out_[slot],
                                       sizeof(uint64_t), &ready_sends_[slot],
                                       /*data=*/false));
  }
  task.add_sent(bytes);
  ++written_;
  task.advanced();
  return Status::ok();
}

Status RingWindow::drained(CollTask& task, bool* done) {
  *done = false;
  bool busy = false;
  for (PostedOp& credit : credit_recvs_) {
    ZRT_RETURN_IF_ERROR(task.collect(&credit, right_, false, 0));
    busy |= credit.busy();
  }
  if (busy) {
    task.note_waiting(right_);
    return Status::ok();
  }
  for (PostedOp& send : ready_sends_) {
    ZRT_RETURN_IF_ERROR(task.collect(&send, right_, true, 0));
    busy |= send.busy();
  }
  for (PostedOp& send : credit_sends_) {
    ZRT_RETURN_IF_ERROR(task.collect(&send, left_, true, 0));
    busy |= send.busy();
  }
  ZRT_RETURN_IF_ERROR(task.collect(&key_send_, left_, true, 0));
  busy |= key_send_.busy();
  *done = !busy;
  return Status::ok();
}

}  // namespace zrt
