// SubringReduce: one ring reduce-scatter among a subset of the communicator's ranks (the ranks
// of one host, or the ranks of equal local rank on every host), over blocks that need not be
// contiguous, as the two-level collectives run it job after job (two_level_reduce_scatter.h).
//
// The ring is RingReduceScatter's (ring_reduce_scatter.h) with ranks replaced by positions in
// `members`: the partial of block s starts at member s+1 and walks right; member s adds its own
// input last, so block s is ((x[s+1] + x[s+2]) + ...) + x[s] over the members, on every run.
// Blocks are cut into chunks of slot_bytes; up to kSlots receives and kSlots forwarded partials
// are in flight (with two members, received straight into the output: no slots). A job is done when
// every reduction was made and every send completed, so the next job may reuse the slots and the
// caller may reuse the inputs.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "collectives/coll_task.h"

namespace zrt {

class SubringReduce {
 public:
  static constexpr int kSlots = 4;

  // Scratch a ring over `members` ranks needs: kSlots receive slots and kSlots for the partials
  // it forwards; none with two members, where every chunk received is a last step: it is
  // received straight into the output and reduced there with this rank's input (the same sum,
  // a + b with a the received partial), so the chunks in flight are not bounded by slots.
  static size_t scratch_bytes(int members, size_t slot_bytes) {
    return members > 2 ? 2 * kSlots * slot_bytes : 0;
  }
  // `members` (comm ranks in ring order) must outlive the object; `me` is this rank's position;
  // `scratch` holds scratch_bytes(members.size(), slot_bytes).
  void init(const std::vector<int>* members, int me, char* scratch, size_t slot_bytes,
            const ReduceSpec& spec);
  // Starts a job: block j of every member is `length[j]` elements at `input[j]` (arrays of
  // members.size()); this rank's block goes to `output`. Every input is multiplied by
  // input_scale (the spec's scale on the user's data, 1 on partials). `final`: output is the
  // user's buffer (reduce_chunk's streamed stores apply). Tags start at tag_first.
  void begin(const char* const* input, const size_t* length, char* output, double input_scale,
             bool final, uint32_t tag_first);
  // Whether this rank's own block (input[me], read only by each chunk's last step, which adds it
  // to the sum of the others) is written yet: a job may begin before it is, and its last steps
  // then wait for this to be set. begin() sets it.
  void set_own_ready(bool ready) { own_ready_ = ready; }
  bool own_ready() const { return own_ready_; }
  // The next job's first message (unit 0's send to the right, and its receive from the left)
  // carries the task's fingerprint in front of its data (fingerprint_check.h).
  void carry_fingerprint() { fingerprint_first_ = true; }
  // Advances as far as completions allow; *moved when anything happened.
  Status progress(TaskContext& context, CollTask& task, bool* moved);
  bool active() const { return active_; }
  // Tags a job over these lengths uses.
  uint32_t units() const { return static_cast<uint32_t>(job_.unit_count); }
  int left() const { return left_; }

 private:
  // The job begin() started: every member's block, where this rank's goes, and its tags.
  struct Job {
    const char* const* input = nullptr;
    const size_t* length = nullptr;
    char* output = nullptr;
    double input_scale = 1.0;
    bool final = false;
    uint32_t tag_first = 0;
    uint64_t unit_count = 0;
    uint32_t tag(uint64_t unit) const { return tag_first + static_cast<uint32_t>(unit); }
  };
  // The job's units in flight, in unit order: receives (and step-0 sends) posted up to
  // next_post, reductions made up to next_reduce, the partials they forward through the send
  // slots in turn.
  struct Units {
    uint64_t next_post = 0;
    uint64_t next_reduce = 0;
    uint64_t send_seq = 0;
    std::array<PostedOp, kSlots> recvs;
    std::array<PostedOp, kSlots> input_sends;
    std::array<PostedOp, kSlots> slot_sends;

    void restart() { next_post = next_reduce = send_seq = 0; }
    // Collects finished sends to `right`; true when none is still in flight.
    bool finish_sends(CollTask& task, int right, Status* status);
  };

  size_t chunk_count(int block, size_t chunk) const;
  const char* input_chunk(int block, size_t chunk) const;
  // Where the chunk of unit (chunk, step) in `slot` is received: the slot, or with two members
  // the output (every step is the last).
  char* received(int slot, size_t chunk) const;
  // progress's two phases, *moved when they did anything.
  Status post_units(TaskContext& context, CollTask& task, bool* moved);
  Status reduce_next(TaskContext& context, CollTask& task, bool* moved);

  const std::vector<int>* members_ = nullptr;
  int me_ = 0;
  int size_ = 1;
  int left_ = 0;
  int right_ = 0;
  ReduceSpec spec_;
  size_t chunk_elems_ = 1;
  std::array<char*, kSlots> recv_slots_{};
  std::array<char*, kSlots> send_slots_{};

  bool active_ = false;
  bool own_ready_ = true;
  bool fingerprint_first_ = false;
  Job job_;
  Units units_;
};

}  // namespace zrt
