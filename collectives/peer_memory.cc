#include "collectives/peer_memory.h"

#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "lib/core/log.h"

namespace zrt {

namespace {

struct ProbeRecord {
  int32_t pid;
  uint32_t reserved;
  uint64_t address;  // of `value`, in the publisher's process
  uint64_t value;
};

}  // namespace

Status read_peer_memory(int pid, uint64_t remote, void* local, size_t bytes, int peer) {
  char* to = static_cast<char*>(local);
  while (bytes > 0) {
    iovec local_range{to, bytes};
    iovec remote_range{reinterpret_cast<void*>(static_cast<uintptr_t>(remote)), bytes};
    const ssize_t got = process_vm_readv(pid, &local_range, 1, &remote_range, 1, 0);
    if (got > 0) {
      to += got;
      remote += static_cast<uint64_t>(got);
      bytes -= static_cast<size_t>(got);
      continue;
    }
    const int error = got == 0 ? EFAULT : errno;
    if (error == EINTR) continue;
    if (error == ESRCH) {
      return Status::error(ZRT_REMOTE_ERROR, "rank {} (pid {}) has exited", peer, pid);
    }
    if (error == EFAULT) {
      return Status::error(ZRT_REMOTE_ERROR,
                           "rank {}'s buffer ({} bytes at 0x{:x}) is not readable in its process "
                           "(freed, or not the size the call says, on that rank?)",
                           peer, bytes, remote);
    }
    return Status::error(ZRT_SYSTEM_ERROR, "reading rank {}'s memory (pid {}): {}", peer, pid,
                         std::strerror(error));
  }
  return Status::ok();
}

bool peer_memory_reads_as(int pid, uint64_t remote, uint64_t expected) {
  uint64_t value = 0;
  iovec local_range{&value, sizeof(value)};
  iovec remote_range{reinterpret_cast<void*>(static_cast<uintptr_t>(remote)), sizeof(value)};
  return process_vm_readv(pid, &local_range, 1, &remote_range, 1, 0) ==
             static_cast<ssize_t>(sizeof(value)) &&
         value == expected;
}

Status probe_peer_memory(int rank, int size, const PeerGather& gather, const std::string& name,
                         std::vector<int>* pids) {
  pids->clear();
  // Differs across processes and runs, so a pid that names some other process reads otherwise.
  const uint64_t value =
      static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) ^
      (static_cast<uint64_t>(getpid()) << 40) ^ 0x636d61ull;
  volatile uint64_t word = value;
  ProbeRecord mine{};
  mine.pid = static_cast<int32_t>(getpid());
  mine.address = reinterpret_cast<uintptr_t>(&word);
  mine.value = value;
  std::vector<ProbeRecord> records(static_cast<size_t>(size));
  ZRT_RETURN_IF_ERROR(gather(&mine, records.data(), sizeof(mine))
                          .with_context("probing cross-memory reads between local ranks"));
  int unreadable = -1;
  for (int peer = 0; peer < size && unreadable < 0; ++peer) {
    const ProbeRecord& record = records[static_cast<size_t>(peer)];
    if (peer != rank && !peer_memory_reads_as(record.pid, record.address, record.value)) {
      unreadable = peer;
    }
  }
  const uint8_t verdict = unreadable < 0 ? 1 : 0;
  std::vector<uint8_t> verdicts(static_cast<size_t>(size));
  ZRT_RETURN_IF_ERROR(gather(&verdict, verdicts.data(), sizeof(verdict))
                          .with_context("sharing the cross-memory read probe's verdicts"));
  (void)word;
  for (int peer = 0; peer < size; ++peer) {
    if (verdicts[static_cast<size_t>(peer)] != 0) continue;
    if (rank == 0 || peer == rank) {
      ZRT_LOG_INFO(
          "{}: rank {} cannot read {} memory with process_vm_readv (ptrace policy, e.g. "
          "kernel.yama.ptrace_scope, or PID namespaces): all-gather copies through the mapped "
          "arenas instead of the single-copy cma path",
          name, peer,
          unreadable >= 0 && peer == rank ? "rank " + std::to_string(unreadable) + "'s"
                                          : "a peer's");
    }
    return Status::ok();
  }
  for (const ProbeRecord& record : records) pids->push_back(record.pid);
  return Status::ok();
}

}  // namespace zrt
