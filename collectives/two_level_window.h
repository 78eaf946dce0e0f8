// HostWindowRing: the two-level collectives' ring inside one host over the mapped windows
// (ring_window.h), as the one-host window ring runs it (window_reduce_scatter.h,
// window_all_gather.h), but over the host's ranks only and over a whole sequence of jobs at
// once (two_level_reduce_scatter.h, two_level_all_gather.h).
//
// A job is one sub-ring collective: block j of member j is length[j] elements at block[j]. Its
// blocks are cut into slot-sized chunks that travel as units (c, k), u = c * (L - 1) + k, as in
// WindowPhase; the units of the jobs are numbered on from one job to the next, so the window
// never drains between jobs: the writer copies the next job's step-0 chunks into the right
// neighbour's inbox while the reader still works on the previous job's, and only the last job
// waits for every credit. Which jobs may move is the caller's (the staging buffers of the level
// across hosts, the chunks it delivered): `limit` in the derived classes' progress.
//
// The right neighbour is the next local rank of the same host, always the same for a stream,
// so the stream's one mapped inbox serves every two-level collective it runs (the handshake
// maps it at the stream's first one).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "collectives/coll_task.h"
#include "collectives/ring_window.h"

namespace zrt {

class HostWindowRing {
 public:
  // `members` (comm ranks of this host in ring order) must outlive the object; `me` is this
  // rank's position. Attaches the stream's window (inbox geometry, neighbours).
  Status attach(TaskContext& context, const std::vector<int>* members, int me, size_t element_size);
  // Starts the window over every job added; tags from tag_offset. `fingerprint_first`: READY(0)
  // carries the task's fingerprint (two_level_fingerprint.h), as the one-host window ring's does.
  void begin(uint32_t tag_offset, bool fingerprint_first);

  size_t jobs() const { return jobs_.size(); }
  // Jobs whose every unit this rank has consumed (their reduction outputs are complete).
  size_t jobs_consumed() const;
  // Every unit consumed and the window drained (every unit written here was credited).
  Status finished(CollTask& task, bool* done);
  int left() const { return window_.left(); }

 protected:
  struct Job {
    uint64_t first_unit = 0;
    uint64_t units = 0;
    size_t first_block = 0;  // index of its member 0 in blocks_ / lengths_
    char* out = nullptr;
  };
  struct Unit {
    size_t job = 0;
    size_t chunk = 0;
    int step = 0;
  };
  // Where unit u lies; *cursor is a job index at or before it, moved forward (writer and reader
  // keep one each: both go through the units in order).
  Unit locate(uint64_t unit, size_t* cursor) const;
  const char* chunk_of(const Unit& at, int block) const {
    return blocks_[jobs_[at.job].first_block + block] + at.chunk * chunk_elems_ * element_size_;
  }
  size_t count_of(const Unit& at, int block) const;
  Status ready_to_move(TaskContext& context, CollTask& task, bool* ready);
  // Adds the next job (arrays of members.size()); `out` is where this rank's block of a
  // reduction goes (null for a gather). Before begin().
  void add_job_blocks(const char* const* block, const size_t* length, char* out);

  RingWindow window_;
  int me_ = 0;
  int size_ = 1;
  size_t element_size_ = 1;
  size_t chunk_elems_ = 1;
  std::vector<Job> jobs_;
  std::vector<const char*> blocks_;
  std::vector<size_t> lengths_;
  uint64_t unit_count_ = 0;
  uint64_t next_write_ = 0;    // units written into the right neighbour's inbox
  uint64_t next_consume_ = 0;  // units read out of this rank's inbox
  size_t write_job_ = 0;
  size_t consume_job_ = 0;
};

// Level one of the two-level reduce-scatter: job j reduces the host's inputs of its L blocks,
// this rank's block into the job's `out`, in WindowReduceScatter's order (block s is
// ((x[s+1] + x[s+2]) + ...) + x[s] over the members, the tagged SubringReduce's order), every
// input scaled by input_scale.
class HostWindowReduce final : public HostWindowRing {
 public:
  void add_job(const char* const* input, const size_t* length, char* out) {
    add_job_blocks(input, length, out);
  }
  void set_spec(const ReduceSpec& spec, double input_scale) {
    spec_ = spec;
    input_scale_ = input_scale;
  }
  // Moves what it can; outputs only of jobs below `limit` are written. *moved if anything did.
  Status progress(TaskContext& context, CollTask& task, size_t limit, bool* moved);

 private:
  ReduceSpec spec_;
  double input_scale_ = 1.0;
};

// Level two of the two-level all-gather: job j gathers its L blocks, in place in the output;
// this rank's own block of job j is read from block[me] once job j is below `limit` (the level
// across hosts delivered it).
class HostWindowGather final : public HostWindowRing {
 public:
  Status attach(TaskContext& context, const std::vector<int>* members, int me,
                size_t element_size) {
    outputs_.clear();
    return HostWindowRing::attach(context, members, me, element_size);
  }
  // The blocks are written here, so they come as writable pointers.
  void add_job(char* const* block, const size_t* length);
  // Outputs this large are written with non-temporal stores (stream_copy.h).
  void set_stream_output(bool stream) { stream_output_ = stream; }
  Status progress(TaskContext& context, CollTask& task, size_t limit, bool* moved);

 private:
  char* output_chunk(const Unit& at, int block) const {
    return outputs_[jobs_[at.job].first_block + block] + at.chunk * chunk_elems_ * element_size_;
  }
  void write_output(char* out, const char* in, size_t bytes) const;

  std::vector<char*> outputs_;  // blocks_, writable
  bool stream_output_ = false;
};

}  // namespace zrt
