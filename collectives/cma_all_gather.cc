// The cma all-gather's own steps (one_shot.h): the deposit's description of the input's
// registered allocation, step 4's reads of every peer's block straight out of its process (or
// through a mapping of its registered memory), and the drain (step 6) before the collective
// completes, since the peers read the caller's input.
#include <algorithm>
#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "collectives/one_shot.h"
#include "collectives/one_shot_arena.h"
#include "collectives/peer_memory.h"
#include "lib/core/log.h"

namespace zrt {

using namespace one_shot_arena;  // the arena's layout, which every step here reads

Status OneShotPhase::describe_source(TaskContext& context, uint64_t parity) {
  OneShotArena& arena = context.resources->one_shot;
  char* mine = slot(arena.own, parity);
  const size_t bytes = count_ * spec_.element_size;
  RegisteredRange range;
  SourceLine line{};
  if (context.transport.find_registered(input_, std::max<size_t>(bytes, 1), &range)) {
    if (arena.slot_source[parity] != range.id || arena.slot_source_frees[parity] != range.frees) {
      std::vector<uint8_t> key;
      ZRT_RETURN_IF_ERROR(
          context.transport.pack_registered_key(reinterpret_cast<const void*>(range.base), &key)
              .with_context("cma all-gather: describing the input's registered allocation"));
      if (key.size() > kSourceKeyMaxBytes) {
        return Status::error(ZRT_INTERNAL_ERROR, "cma all-gather: a memory key of {} bytes",
                             key.size());
      }
      const uint64_t key_bytes = key.size();
      std::memcpy(mine + kSourceKeyOffset, &key_bytes, sizeof(key_bytes));
      std::memcpy(mine + kSourceKeyOffset + sizeof(key_bytes), key.data(), key.size());
      arena.slot_source[parity] = range.id;
      arena.slot_source_frees[parity] = range.frees;
    }
    line = SourceLine{range.id, range.frees, range.base, range.length};
  } else {
    line.frees = range.frees;
  }
  std::memcpy(mine + kSourceLineOffset, &line, sizeof(line));
  return Status::ok();
}

Status OneShotPhase::read_peers(TaskContext& context) {
  const std::vector<char*>& ranks = context.resources->one_shot.ranks;
  const uint64_t parity = sequence_ & 1;
  const size_t bytes = count_ * spec_.element_size;
  // From the next rank on, so that N - 1 readers of one input do not all start on it at once.
  for (int step = 1; step < context.size; ++step) {
    const int peer = ring_mod(context.rank + step, context.size);
    const char* peer_slot = slot(ranks[peer], parity);
    uint64_t source = 0;
    std::memcpy(&source, peer_slot + kSourceOffset, sizeof(source));
    char* out = output_ + static_cast<size_t>(peer) * bytes;
    const char* mapped = nullptr;
    Status status = mapped_source(context, peer, peer_slot, source, bytes, &mapped);
    if (status.is_ok() && mapped != nullptr) {
      std::memcpy(out, mapped, bytes);
    } else if (status.is_ok()) {
      status = read_peer_memory((*peer_pids_)[peer], source, out, bytes, peer);
    }
    ZRT_RETURN_IF_ERROR(status.with_context(fmt::format(
        "cma all-gather, collective {} of stream {}", sequence_, context.stream_index)));
  }
  char* own = output_ + static_cast<size_t>(context.rank) * bytes;
  if (own != input_) std::memcpy(own, input_, bytes);
  return Status::ok();
}

// Where `peer`'s input at `source` is mapped here, or null when it is not in registered memory
// or the peer's memory cannot be mapped (then the kernel reads it). Mappings of a peer whose
// count of freed allocations changed are dropped first: one may be of a buffer it freed.
Status OneShotPhase::mapped_source(TaskContext& context, int peer, const char* peer_slot,
                                   uint64_t source, size_t bytes, const char** mapped) {
  OneShotArena& arena = context.resources->one_shot;
  SourceLine line;
  std::memcpy(&line, peer_slot + kSourceLineOffset, sizeof(line));
  std::vector<MappedSource>& sources = arena.sources[peer];
  if (arena.source_frees[peer] != line.frees) {
    for (const MappedSource& old : sources) {
      if (old.local != nullptr) context.transport.unmap_peer_registered(old.local);
    }
    sources.clear();
    arena.source_frees[peer] = line.frees;
  }
  *mapped = nullptr;
  if (line.id == 0) return Status::ok();
  if (source < line.base || source - line.base > line.length ||
      bytes > line.length - (source - line.base)) {
    return Status::error(ZRT_REMOTE_ERROR,
                         "rank {} described its input ({} bytes at {:#x}) outside its registered "
                         "allocation ({} bytes at {:#x})",
                         peer, bytes, source, line.length, line.base);
  }
  const uint64_t offset = source - line.base;
  for (const MappedSource& known : sources) {
    if (known.id != line.id) continue;
    if (known.local != nullptr) *mapped = known.local + offset;
    return Status::ok();
  }
  uint64_t key_bytes = 0;
  std::memcpy(&key_bytes, peer_slot + kSourceKeyOffset, sizeof(key_bytes));
  if (key_bytes == 0 || key_bytes > kSourceKeyMaxBytes) {
    return Status::error(ZRT_REMOTE_ERROR, "rank {} described its input with a {}-byte key", peer,
                         key_bytes);
  }
  const char* key_start = peer_slot + kSourceKeyOffset + sizeof(key_bytes);
  const std::vector<uint8_t> key(key_start, key_start + key_bytes);
  void* local = nullptr;
  Status status = context.transport.map_peer_registered(peer, key, line.base, &local);
  // A dead peer fails the call; anything else (a descriptor limit, an mmap failure) leaves the
  // reads of this allocation to the kernel, which still reaches it, and says why once.
  if (status.code() == ZRT_REMOTE_ERROR) return status;
  if (!status.is_ok()) {
    ZRT_LOG_WARN("cma all-gather: rank {}'s registered memory is read through the kernel: {}", peer,
                 status.message());
    sources.push_back(MappedSource{line.id, nullptr});
    return Status::ok();
  }
  sources.push_back(MappedSource{line.id, static_cast<char*>(local)});
  *mapped = static_cast<char*>(local) + offset;
  return Status::ok();
}

bool OneShotPhase::drained(TaskContext& context, CollTask& task) {
  OneShotArena& arena = context.resources->one_shot;
  for (; next_peer_ < context.size; ++next_peer_) {
    if (next_peer_ == context.rank || arena.peer_finished[next_peer_] > sequence_) continue;
    arena.peer_finished[next_peer_] = load_acquire(finished_word(arena.ranks[next_peer_]));
    if (arena.peer_finished[next_peer_] <= sequence_) {
      task.note_waiting(next_peer_);
      return false;
    }
  }
  return true;
}

}  // namespace zrt
