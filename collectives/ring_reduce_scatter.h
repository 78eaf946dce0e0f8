// Ring reduce-scatter, pipelined in chunks.
//
// The buffer is N blocks (BlockLayout); rank r ends with the reduction of block r. The partial
// sum of block s starts on rank s+1 (its own input) and walks the ring to the right: each rank
// on the way receives the partial from its left neighbour, adds its own input for that block,
// and passes the result on; the last hop lands on rank s, which adds its input and writes the
// result. So the reduction order of block s is fixed, ((x[s+1] + x[s+2]) + ...) + x[s], the same
// on every run (Determinism).
//
// Each block is cut into C chunks of at most chunk_elems elements and the work is ordered
// chunk-major: unit u = c * (N - 1) + k is step k of chunk c. At unit (c, k) rank r sends block
// r-1-k, chunk c, to the right (at k = 0 straight from the user's input, later from the send
// slot that holds its partial) and receives block r-2-k, chunk c, from the left into one of
// kRecvSlots small staging slots. The reduction reads that slot (cache-resident) and the user's
// input once, and writes either a send slot (k < N-2) or the user's output (k = N-2), so every
// input byte is read from DRAM once and every output byte written once. Unit (c, k)'s result is
// sent as unit (c, k+1), which is the next unit in order: the ranks run one unit apart around
// the ring and keep up to kRecvSlots receives and kSendSlots partial sends in flight. The sends
// of a rank are the right neighbour's receives of the same unit, matched by the tag (tag_offset
// + unit).
//
// Each rank sends exactly (N-1) blocks: S(N-1)/N bytes for equal blocks.
// In place (output is the input's block r) is safe: block r's input is read only by the last
// reduction of each chunk, which writes the same elements.
#pragma once

#include "collectives/coll_task.h"

namespace zrt {

class RingReduceScatter final : public Phase {
 public:
  static constexpr int kRecvSlots = 4;
  static constexpr int kSendSlots = 4;
  static constexpr size_t kSlotBytes = size_t{256} << 10;

  RingReduceScatter(const void* input, void* output, BlockLayout layout, const ReduceSpec& spec,
                    uint32_t tag_offset)
      : input_(static_cast<const char*>(input)),
        output_(static_cast<char*>(output)),
        layout_(layout),
        spec_(spec),
        tag_offset_(tag_offset) {}

  Status start(TaskContext& context, CollTask& task) override;
  Status progress(TaskContext& context, CollTask& task, bool* done) override;

  // Tag values used (units), so a following phase can start after them.
  static uint32_t units(const BlockLayout& layout, int size, size_t element_size);

 private:
  size_t chunk_count(int block, size_t chunk) const;  // elements of chunk `chunk` of `block`
  const char* input_chunk(int block, size_t chunk) const;

  const char* input_;
  char* output_;
  BlockLayout layout_;
  ReduceSpec spec_;
  uint32_t tag_offset_;
  size_t chunk_elems_ = 0;
  uint64_t unit_count_ = 0;
  uint64_t next_post_ = 0;
  uint64_t next_reduce_ = 0;
  uint64_t send_seq_ = 0;
  int left_ = 0;
  int right_ = 0;
  std::array<PostedOp, kRecvSlots> recvs_;
  std::array<PostedOp, kRecvSlots> input_sends_;
  std::array<PostedOp, kSendSlots> slot_sends_;
  std::array<char*, kRecvSlots> recv_slots_{};
  std::array<char*, kSendSlots> send_slots_{};
};

}  // namespace zrt
