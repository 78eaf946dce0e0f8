// The measured side of train_lm's memory report: this process's resident set, read from /proc,
// beside what zrt_partition_memory says the partition manager holds.
//
// The baseline is taken just before zrt_partition_finalize, once every buffer of this program
// is allocated and touched (and the loss stream has taken its staging): finalize allocates
// zrt's arenas and touches every page, so the growth of the peak (VmHWM) over the baseline is
// what memory.total claims, plus what the kernel counts twice. RSS counts a shared page once in
// every mapping of it, and zrt maps memory twice by design: a peer's registered memory, which
// the same-host collectives read in place (that page is the peer's, in the peer's total), and
// at stage 3 a fetched unit's slot of the gather window, at the unit's own address too. The
// first is measured here (peers_grown) and taken off; the second is transient (at most the
// largest unit) and stays in the residual, as do the staging memory the partition manager's
// streams take at their first collectives (docs/API.md, "Stream memory"), which its total does
// not count, and allocator slack.
#pragma once

#include <cstdint>

namespace train_lm {

// A field of /proc/self/status in bytes (the kernel writes kB), or -1 where it has none.
int64_t proc_status_bytes(const char* field);

// Resident bytes of memfd mappings whose file this process does not hold open: other
// processes' memory (zrt keeps an fd of each memfd it allocates, and closes the one it opens to
// map a peer's). -1 where /proc/self/smaps or /proc/self/fd cannot be read.
int64_t peer_memfd_resident_bytes();

struct RssProbe {
  int64_t baseline = -1;        // VmRSS before finalize
  int64_t peak = -1;            // VmHWM after the last step
  int64_t peers_baseline = -1;  // peer_memfd_resident_bytes() at the baseline
  int64_t peers_end = -1;       // and after the last step

  void take_baseline();
  void take_peak();
  bool known() const {
    return baseline >= 0 && peak >= 0 && peers_baseline >= 0 && peers_end >= 0;
  }
  // The peak's growth over the baseline, and the part of it that is peers' memory.
  double growth() const { return static_cast<double>(peak - baseline); }
  double peers_grown() const { return static_cast<double>(peers_end - peers_baseline); }
};

}  // namespace train_lm
