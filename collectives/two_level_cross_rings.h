// CrossHostRings: the level across hosts of the two-level collectives
// (two_level_reduce_scatter.h, two_level_all_gather.h). Sub-rings among the ranks of this local
// rank on every host, one job per chunk of the blocks: chunk k runs on ring k % kRings, its tags
// after those of chunk k-1, so kRings chunks are in flight at once and the network link does not
// fall idle while one chunk's ring completes and the next one's starts.
//
// Ring is SubringReduce or SubringGather; Block is what the ring's job takes for each host's
// block (an input to reduce, or an output to gather into).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "collectives/two_level_grid.h"

namespace zrt {

template <typename Ring, typename Block, int kRings>
class CrossHostRings {
 public:
  // This rank's ring: the ranks of local rank `local` on every host, in host order; the jobs'
  // tags start at tag_first. The caller then inits each ring over members().
  void place(const HostGrid& grid, int local, uint32_t tag_first) {
    members_.resize(grid.hosts);
    for (int g = 0; g < grid.hosts; ++g) members_[g] = grid.rank_of(g, local);
    for (int ring = 0; ring < kRings; ++ring) {
      blocks_[ring].assign(grid.hosts, Block{});
      lengths_[ring].assign(grid.hosts, 0);
    }
    started_ = 0;
    tag_ = tag_first;
  }
  const std::vector<int>* members() const { return &members_; }
  std::array<Ring, kRings>& rings() { return rings_; }
  Ring& ring(int ring) { return rings_[ring]; }

  // The next job: chunk started() on ring next_ring(), once that ring is no longer active. The
  // caller sets its blocks (set_block), begins the ring over blocks() and lengths() with tag(),
  // then calls started_job.
  size_t started() const { return started_; }
  int next_ring() const { return static_cast<int>(started_ % kRings); }
  void set_block(int ring, int host, Block block, size_t length) {
    blocks_[ring][host] = block;
    lengths_[ring][host] = length;
  }
  const Block* blocks(int ring) const { return blocks_[ring].data(); }
  const size_t* lengths(int ring) const { return lengths_[ring].data(); }
  uint32_t tag() const { return tag_; }
  void started_job(int ring) {
    chunk_[ring] = started_;
    tag_ += rings_[ring].units();
    ++started_;
  }
  // The chunk `ring` runs (or last ran).
  size_t chunk_of(int ring) const { return chunk_[ring]; }

  // Chunks done, in order (the oldest still active bounds it).
  size_t done() const {
    // Chunk k ran on ring k % kRings: every chunk before the last kRings started is done; of
    // those, the oldest still active is the first not done.
    for (size_t chunk = started_ > kRings ? started_ - kRings : 0; chunk < started_; ++chunk) {
      if (rings_[chunk % kRings].active()) return chunk;
    }
    return started_;
  }
  bool active() const {
    for (const Ring& ring : rings_) {
      if (ring.active()) return true;
    }
    return false;
  }
  // The rank every ring receives from.
  int left() const { return rings_[0].left(); }

 private:
  std::vector<int> members_;
  std::array<Ring, kRings> rings_;
  std::array<size_t, kRings> chunk_{};
  size_t started_ = 0;
  uint32_t tag_ = 0;
  std::array<std::vector<Block>, kRings> blocks_;  // per ring, while it runs
  std::array<std::vector<size_t>, kRings> lengths_;
};

}  // namespace zrt
