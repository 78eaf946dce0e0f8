// Reads out of a peer process's memory on this host with one kernel copy (Linux cross-memory
// attach, process_vm_readv): the `cma` all-gather (one_shot.h) copies each peer's block straight
// out of the peer's input into its output, where a copy through a shared arena takes two.
//
// Whether it works depends on the kernel's ptrace policy (Yama's ptrace_scope, a seccomp filter,
// separate PID namespaces), so the communicator probes every pair at creation
// (probe_peer_memory below) and the table's `cma` rows are passed over unless every rank
// can read every other.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "lib/core/status.h"

namespace zrt {

// Reads `bytes` at `remote` in process `pid` (rank `peer`, for messages) into `local`, calling
// the kernel again after a partial read. Errors are values, never a signal: ZRT_REMOTE_ERROR
// when the process has exited (ESRCH) or does not hold the range (EFAULT: the peer's buffer is
// not what it passed), ZRT_SYSTEM_ERROR for anything else (EPERM: the probe's verdict changed).
Status read_peer_memory(int pid, uint64_t remote, void* local, size_t bytes, int peer);

// Whether the 8 bytes at `remote` in process `pid` read as `expected`: the probe, which so also
// catches a pid that names another process (a PID namespace of its own).
bool peer_memory_reads_as(int pid, uint64_t remote, uint64_t expected);

// An all-gather of `bytes` per rank over some channel already up (the bootstrap's, at
// communicator creation): rank r's bytes land at output + r * bytes.
using PeerGather = std::function<Status(const void* input, void* output, size_t bytes)>;

// Whether every rank of a one-host world can read every other's memory, decided alike on every
// rank. Collective: two gathers, of {pid, address, value} and of verdicts. Each rank reads a
// word of every peer's stack through the kernel and compares it with the value the peer
// published; the second gather both spreads the verdicts and keeps every word alive until every
// peer has read it. Sets *pids to every rank's pid when each pair passed, else clears it (an
// INFO line says which rank failed). Errors: the gather's.
Status probe_peer_memory(int rank, int size, const PeerGather& gather, const std::string& name,
                         std::vector<int>* pids);

}  // namespace zrt
