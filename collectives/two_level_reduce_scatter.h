// Two-level reduce-scatter, for ranks on H hosts of L consecutive ranks each (two_level_grid.h).
//
// Rank r = (host h, local rank l) must end with block r. The blocks for the ranks of host g are
// contiguous, so level one is a reduce-scatter inside each host over those L blocks: local rank
// l gets the host's partial sum of block (g, l). Level two is a reduce-scatter across the hosts
// among the ranks of local rank l (one per host), over the H partials: rank (h, l) gets the sum
// of the hosts' partials of its own block. Each rank sends (L-1)/L of the data to its host's
// ranks and (H-1)/H of its L-th share across: a host sends L(H-1) blocks over the network, where
// one ring over all ranks would send N-1 of them per host link, and L links per host carry them
// at once.
//
// Reduction order (fixed, the same on every run; it differs from the flat ring's): element of
// block (h, l) = ring order across hosts of the partials, each partial in ring order inside its
// host: Σ_g over hosts starting at host h+1 and ending at h of (Σ_j over local ranks starting
// at l+1 and ending at l of x[g, j]), each Σ as SubringReduce orders it
// (two_level_ring_reduce.h).
//
// Pipelining: every block is cut into chunks of chunk_elems elements. Level one runs the jobs
// (k, g) of chunk k for every other host g, then for this host (the partial level two needs
// last: each chunk's last step adds it, SubringReduce::set_own_ready); level two runs chunk k as
// soon as level one finished chunk k for every other host, so the network carries chunk k while
// the host reduces this host's share of chunk k and then chunk k+1, and a small reduce-scatter
// costs about the longer of the two levels, not their sum. In place, level two receives into
// the output, which is then this rank's block of the input, still to be read by level one's
// own-host job; there level two waits for every job of its chunk. Level two
// keeps kCrossRings chunks in flight (one ring each, tags apart), so the network link does not
// fall idle while one chunk's ring completes and the next one's starts. Level one's partials sit
// in kDepth = kCrossRings + 1 staging buffers of H chunks each in the stream's scratch memory.
//
// Level one runs over the mapped windows (two_level_window.h) when the stream has them
// (EngineOptions::peer_windows with two_level_hosts; ZRT_WINDOWS=0: tagged messages,
// SubringReduce): every job's chunks go straight into the next local rank's inbox, the jobs one
// stream of units, so the host's ranks never wait on a drain between jobs. The order of the sums is
// the same either way.
#pragma once

#include <array>
#include <vector>

#include "collectives/coll_task.h"
#include "collectives/two_level_grid.h"
#include "collectives/two_level_ring_reduce.h"
#include "collectives/two_level_window.h"

namespace zrt {

class TwoLevelReduceScatter final : public Phase {
 public:
  static constexpr int kCrossRings = 2;
  static constexpr int kDepth = kCrossRings + 1;
  static constexpr size_t kSlotBytes = size_t{128} << 10;
  // Messages across two hosts, where the ring needs no slots (SubringReduce::scratch_bytes):
  // a staging chunk (682 KiB with windows) travels whole. Over tcp fewer, larger messages cost
  // less CPU per byte: whole chunks instead of 256 KiB messages took 64 MiB across 2 hosts x 2
  // from 57-59 to 47-54 ms, side by side (bench/multihost/link_profile.py).
  static constexpr size_t kPairMessageBytes = size_t{1} << 20;

  TwoLevelReduceScatter(const void* input, void* output, BlockLayout layout, const ReduceSpec& spec,
                        HostGrid grid, uint32_t tag_offset, bool host_windows)
      : host_windows_(host_windows),
        input_(static_cast<const char*>(input)),
        output_(static_cast<char*>(output)),
        layout_(layout),
        spec_(spec),
        grid_(grid),
        tag_offset_(tag_offset) {}

  Status start(TaskContext& context, CollTask& task) override;
  Status progress(TaskContext& context, CollTask& task, bool* done) override;
  // In front of level two's first message (fingerprint_check.h).
  Status start_fingerprint(TaskContext& context, CollTask& task) override;

 private:
  bool start_host_job();
  bool start_cross_job();
  // Level one's jobs run chunk by chunk, this host's last: job i is chunk i / H of host
  // host_of_job(i).
  int host_of_job(size_t job) const {
    return static_cast<int>((static_cast<size_t>(host_) + 1 + job) %
                            static_cast<size_t>(grid_.hosts));
  }
  // Tells each running ring of level two whether level one finished its chunk's own partial.
  void release_own_partials();
  size_t host_jobs_done() const;
  // Chunks of level two done, in order (the oldest still active bounds it).
  size_t cross_jobs_done() const;
  bool cross_active() const;
  size_t chunk_length(int block, size_t chunk) const {
    return layout_.chunk_length(block, chunk, chunk_elems_);
  }
  char* staging(size_t chunk, int host) const {
    return staging_ + ((chunk % kDepth) * grid_.hosts + host) * chunk_elems_ * spec_.element_size;
  }

  bool host_windows_;
  const char* input_;
  char* output_;
  BlockLayout layout_;
  ReduceSpec spec_;
  HostGrid grid_;
  uint32_t tag_offset_;
  bool fingerprint_in_header_ = false;  // start_fingerprint chose the header route
  int host_ = 0;
  int local_ = 0;
  std::vector<int> host_members_;   // this host's ranks
  std::vector<int> cross_members_;  // the ranks of this local rank on every host
  SubringReduce host_ring_;         // without windows
  HostWindowReduce host_window_;
  std::array<SubringReduce, kCrossRings> cross_rings_;  // chunk k on ring k % kCrossRings
  char* staging_ = nullptr;
  size_t chunk_elems_ = 1;
  size_t chunks_ = 0;
  size_t host_jobs_started_ = 0;  // in host_of_job's order
  size_t cross_jobs_started_ = 0;
  std::array<size_t, kCrossRings> cross_chunk_{};  // the chunk each ring runs
  // Level two may start before the own host's partial (the output is not in the input).
  bool own_partial_last_ = false;
  uint32_t host_tag_ = 0;
  uint32_t cross_tag_ = 0;
  std::vector<const char*> host_input_;
  std::vector<size_t> host_length_;
  std::array<std::vector<const char*>, kCrossRings> cross_input_;  // per ring, while it runs
  std::array<std::vector<size_t>, kCrossRings> cross_length_;
};

}  // namespace zrt
