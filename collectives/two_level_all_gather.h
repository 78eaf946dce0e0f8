// Two-level all-gather, for ranks on H hosts of L consecutive ranks each (two_level_grid.h): the
// reverse of two_level_reduce_scatter.h. Level one is an all-gather across the hosts among the
// ranks of local rank l: rank (h, l) receives block (g, l) of every host g straight into its
// place in the output. Level two is an all-gather inside each host, once for the L blocks of
// every host g (contiguous in the output): each local rank contributes the block (g, l) that
// level one brought it. A host receives L(H-1) blocks over the network, each exactly once.
//
// Pipelining: every block is cut into chunks of kChunkBytes; level one runs chunk after chunk
// without waiting, kCrossRings chunks at once (one ring each, tags apart) so that the network
// link does not fall idle while one chunk's ring completes and the next one's starts, level two
// runs job (k, g) for every other host g once level one has chunk k, so the network moves chunk
// k+1 while the host's ranks exchange chunk k. Job (k, own host) needs nothing from the network:
// it comes first among chunk k's jobs and runs as soon as level one started chunk k (which put
// this rank's own chunk in the output), while the network moves chunk k; a small all-gather
// then costs the longer of the two levels, not their sum. No staging: both levels receive into
// the output.
//
// Level two runs over the mapped windows (two_level_window.h) when the stream has them
// (EngineOptions::peer_windows with two_level_hosts; ZRT_WINDOWS=0: tagged messages,
// SubringGather): every job's chunks go straight into the next local rank's inbox, the jobs one
// stream of units.
#pragma once

#include <vector>

#include "collectives/coll_task.h"
#include "collectives/two_level_cross_rings.h"
#include "collectives/two_level_grid.h"
#include "collectives/two_level_ring_gather.h"
#include "collectives/two_level_window.h"

namespace zrt {

// The all-reduce's all-gather phase starts its tags here, half the task's tag space after its
// reduce-scatter phase's (tags may wrap: the transport matches equal tags in posting order).
inline constexpr uint32_t kTwoLevelGatherTags = 0x8000;

class TwoLevelAllGather final : public Phase {
 public:
  // 2 MiB chunks, each one message across hosts, with kCrossRings rings in flight on each
  // connection (the flat ring keeps 8 x 1 MiB in flight and drove the link harder than the
  // earlier two-level 4 x 128 KiB did; measured: docs/ARCHITECTURE.md#measured-costs). Over tcp
  // fewer, larger messages cost less CPU per byte: whole chunks instead of 512 KiB messages took
  // 64 MiB across 2 hosts x 2 from 52-53 to 49 ms, side by side (bench/multihost/link_profile.py;
  // measured: docs/ARCHITECTURE.md#two-level-collectives). The host's tagged ring
  // (ZRT_WINDOWS=0) keeps 512 KiB messages.
  static constexpr size_t kChunkBytes = size_t{2} << 20;
  static constexpr int kCrossRings = 2;
  static constexpr size_t kCrossMessageBytes = kChunkBytes;
  static constexpr size_t kHostMessageBytes = size_t{512} << 10;

  TwoLevelAllGather(const void* own, void* output, BlockLayout layout, size_t element_size,
                    HostGrid grid, uint32_t tag_offset, bool host_windows)
      : own_(static_cast<const char*>(own)),
        output_(static_cast<char*>(output)),
        layout_(layout),
        element_size_(element_size),
        grid_(grid),
        tag_offset_(tag_offset) {
    host_level_.windows = host_windows;
  }

  Status start(TaskContext& context, CollTask& task) override;
  Status progress(TaskContext& context, CollTask& task, bool* done) override;
  // In front of level one's first message across hosts (fingerprint_check.h).
  Status start_fingerprint(TaskContext& context, CollTask& task) override;

 private:
  // Level two: the all-gather inside this host, job (k, g) of host g's blocks in place in the
  // output: over the mapped windows (every job queued at start), else job after job on the
  // tagged ring.
  struct HostLevel {
    bool windows = false;
    std::vector<int> members;  // this host's ranks
    SubringGather ring;        // without windows
    HostWindowGather window;
    size_t jobs_started = 0;  // in host_of_job's order, on the ring
    uint32_t tag = 0;
    std::vector<char*> output;  // the job's blocks, one per local rank
    std::vector<size_t> length;
  };

  // The phases of start.
  void place_ranks(const TaskContext& context);
  Status queue_window_jobs(TaskContext& context);
  // The blocks of level two's job (chunk, host `target`) into host_level_.output / length.
  void set_host_job(size_t chunk, int target);
  bool start_cross_job();
  bool start_host_job();
  // Level two's jobs run chunk by chunk, this host's first: job i is chunk i / H of host
  // host_of_job(i).
  int host_of_job(size_t job) const {
    return static_cast<int>((static_cast<size_t>(host_) + job) % static_cast<size_t>(grid_.hosts));
  }
  // How many of level two's jobs may run: those of the chunks level one delivered, and the own
  // host's job of the chunk it started next.
  size_t host_jobs_ready() const;
  char* block_chunk(int block, size_t chunk) const {
    return output_ + (layout_.offset(block) + chunk * chunk_elems_) * element_size_;
  }

  const char* own_;
  char* output_;
  BlockLayout layout_;
  size_t element_size_;
  HostGrid grid_;
  uint32_t tag_offset_;
  bool fingerprint_in_header_ = false;  // start_fingerprint chose the header route
  int host_ = 0;
  int local_ = 0;
  HostLevel host_level_;
  // Level one: the all-gather across hosts of this local rank's blocks, chunk by chunk into the
  // output.
  CrossHostRings<SubringGather, char*, kCrossRings> cross_level_;
  size_t chunk_elems_ = 1;
  size_t chunks_ = 0;  // of the longest block
};

}  // namespace zrt
