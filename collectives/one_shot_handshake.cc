// OneShotPhase's handshake (one_shot.h), run by a stream's first one-shot collective: the stream's
// arena is allocated, its key sent to every peer, and every peer's arena mapped as its key
// arrives; the stream keeps the mappings. The only messages of the one-shot path.
#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "collectives/one_shot.h"
#include "collectives/one_shot_arena.h"

namespace zrt {

using namespace one_shot_arena;  // the arena's layout, which every step here reads

namespace {

// Task bits of the handshake's key messages.
constexpr uint32_t kKeyTag = 0x7ffd;

Status allocate_arena(TaskContext& context, OneShotArena& arena) {
  void* memory = nullptr;
  ZRT_RETURN_IF_ERROR(context.transport.alloc_registered(kArenaBytes, &memory)
                          .with_context(fmt::format("one-shot arena of stream {} ({} bytes)",
                                                    context.stream_index, kArenaBytes)));
  arena.own = static_cast<char*>(memory);
  arena.bytes = kArenaBytes;
  std::memset(arena.own, 0, kControlBytes);  // nothing finished, no call announced
  for (uint64_t parity = 0; parity < 2; ++parity) {
    std::memset(slot(arena.own, parity), 0, kHeaderBytes);  // nothing published
  }
  return Status::ok();
}

// The key the peers map this rank's arena by (its address, then the packed memory key), and the
// per-peer state the mappings and the calls after them fill, empty for `n` ranks.
Status prepare_exchange(TaskContext& context, OneShotArena& arena, int n) {
  std::vector<uint8_t> key;
  ZRT_RETURN_IF_ERROR(
      context.transport.pack_registered_key(arena.own, &key).with_context("one-shot handshake"));
  const uint64_t address = reinterpret_cast<uintptr_t>(arena.own);
  arena.key.resize(sizeof(address) + key.size());
  std::memcpy(arena.key.data(), &address, sizeof(address));
  std::memcpy(arena.key.data() + sizeof(address), key.data(), key.size());
  arena.peer_keys.assign(n, std::vector<uint8_t>(sizeof(address) + kWindowKeyMaxBytes));
  arena.ranks.assign(n, nullptr);
  arena.peer_finished.assign(n, 0);
  arena.tiny_values.assign(n, 0);
  arena.sources.assign(n, {});
  arena.source_frees.assign(n, 0);
  arena.slot_source = {};
  arena.slot_source_frees = {};
  return Status::ok();
}

}  // namespace

// Exchanges the arenas' keys with every peer and maps theirs; the stream keeps the mappings.
Status OneShotPhase::handshake(TaskContext& context, CollTask& task, bool* ready) {
  OneShotArena& arena = context.resources->one_shot;
  *ready = false;
  if (!keys_posted_) {
    keys_posted_ = true;
    ZRT_RETURN_IF_ERROR(post_keys(context, task));
  }
  bool mapped = false;
  ZRT_RETURN_IF_ERROR(map_peer_arenas(context, task, &mapped));
  if (!mapped) return Status::ok();
  for (int peer = 0; peer < context.size; ++peer) {
    if (peer == context.rank) continue;
    ZRT_RETURN_IF_ERROR(task.collect(&key_sends_[peer], peer, true, 0));
    if (key_sends_[peer].busy()) {
      task.note_waiting(peer);
      return Status::ok();
    }
  }
  arena.ranks[context.rank] = arena.own;
  arena.ready = true;
  *ready = true;
  return Status::ok();
}

Status OneShotPhase::post_keys(TaskContext& context, CollTask& task) {
  OneShotArena& arena = context.resources->one_shot;
  const int n = context.size;
  if (arena.own == nullptr) ZRT_RETURN_IF_ERROR(allocate_arena(context, arena));
  ZRT_RETURN_IF_ERROR(prepare_exchange(context, arena, n));
  key_sends_.assign(n, PostedOp{});
  key_recvs_.assign(n, PostedOp{});
  for (int peer = 0; peer < n; ++peer) {
    if (peer == context.rank) continue;
    ZRT_RETURN_IF_ERROR(task.post_recv(context, peer, kKeyTag, arena.peer_keys[peer].data(),
                                       arena.peer_keys[peer].size(), &key_recvs_[peer]));
  }
  for (int peer = 0; peer < n; ++peer) {
    if (peer == context.rank) continue;
    ZRT_RETURN_IF_ERROR(task.post_send(context, peer, kKeyTag, arena.key.data(), arena.key.size(),
                                       &key_sends_[peer], /*data=*/false));
  }
  return Status::ok();
}

Status OneShotPhase::map_peer_arenas(TaskContext& context, CollTask& task, bool* all) {
  OneShotArena& arena = context.resources->one_shot;
  *all = false;
  for (int peer = 0; peer < context.size; ++peer) {
    PostedOp& recv = key_recvs_[peer];
    if (peer == context.rank || !recv.posted) continue;
    if (!recv.finished()) {
      task.note_waiting(peer);
      return Status::ok();
    }
    recv.posted = false;
    if (!recv.completion.status.is_ok()) {
      return recv.completion.status.with_context(
          fmt::format("one-shot handshake: receive from rank {}", peer));
    }
    const size_t got = recv.completion.bytes;
    if (got <= sizeof(uint64_t)) {
      return Status::error(ZRT_REMOTE_ERROR, "one-shot handshake: {} bytes from rank {}", got,
                           peer);
    }
    const std::vector<uint8_t>& received = arena.peer_keys[peer];
    uint64_t address = 0;
    std::memcpy(&address, received.data(), sizeof(address));
    const std::vector<uint8_t> key(received.begin() + sizeof(address),
                                   received.begin() + static_cast<long>(got));
    void* mapped = nullptr;
    ZRT_RETURN_IF_ERROR(
        context.transport.map_peer_registered(peer, key, address, &mapped)
            .with_context(fmt::format("one-shot handshake: mapping rank {}'s arena (ZRT_ALGO or "
                                      "ZRT_ALGO_TABLE can choose another algorithm)",
                                      peer)));
    arena.ranks[peer] = static_cast<char*>(mapped);
    task.advanced();
  }
  *all = true;
  return Status::ok();
}

}  // namespace zrt
