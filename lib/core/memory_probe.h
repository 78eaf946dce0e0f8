// Memory admission: before zrt allocates something large (a partition arena at finalize, a
// stream's staging), it asks what the machine can give and refuses with ZRT_OUT_OF_MEMORY and
// the figures when the request does not fit, instead of letting the pages be touched until the
// kernel's OOM killer picks a victim (docs/ARCHITECTURE.md#memory-admission).
//
// The limits, each read fresh at the point of allocation (a few small files; allocations are
// rare, never on the training path):
//   - MemAvailable of /proc/meminfo: what the kernel can hand out without swapping;
//   - the memory cgroup of this process, when it has a limit: v2 memory.max - memory.current of
//     its cgroup and of every ancestor, v1 memory.limit_in_bytes - memory.usage_in_bytes;
//   - for memory placed in the shared-memory filesystem: the free space of /dev/shm (zrt's own
//     shared memory is memfd, which that mount does not bound, so only named segments ask).
// A fixed headroom (kAdmissionHeadroomBytes) stays for the rest of the machine.
#pragma once

#include <cstdint>
#include <string>

#include "lib/core/status.h"

namespace zrt {

inline constexpr uint64_t kAdmissionHeadroomBytes = uint64_t{128} << 20;

// Where the probe reads; tests point it at a folder of fake files.
struct MemoryProbePaths {
  std::string meminfo = "/proc/meminfo";
  std::string self_cgroup = "/proc/self/cgroup";
  std::string cgroup_root = "/sys/fs/cgroup";  // v2 unified root; v1 controllers below it
  std::string shm_dir = "/dev/shm";
};

// What the machine can give now. A limit that could not be read is absent (has_* false).
struct MemoryLimits {
  bool has_available = false;
  uint64_t available = 0;  // MemAvailable, bytes
  bool has_cgroup = false;
  uint64_t cgroup_limit = 0;  // of the tightest level
  uint64_t cgroup_usage = 0;
  std::string cgroup_where;  // the file that sets the tightest limit
  bool has_shm = false;
  uint64_t shm_free = 0;  // statvfs of shm_dir, bytes free to unprivileged users
};

MemoryLimits probe_memory(const MemoryProbePaths& paths = MemoryProbePaths());

enum class MemoryPlace {
  kPrivate,        // anonymous memory of this process
  kSharedAnon,     // memfd shared with peers: bounded like private memory
  kShmFilesystem,  // a named segment in /dev/shm: also bounded by its free space
};

// ok when `bytes` fits every limit in `limits` with kAdmissionHeadroomBytes to spare; else
// ZRT_OUT_OF_MEMORY "<what> needs N bytes (x GiB); <limit> has only M bytes (y GiB) available
// (...all figures...)".
Status admit_memory(const std::string& what, uint64_t bytes, MemoryPlace place,
                    const MemoryLimits& limits);
// admit_memory with a fresh probe_memory().
Status admit_memory(const std::string& what, uint64_t bytes, MemoryPlace place);

}  // namespace zrt
