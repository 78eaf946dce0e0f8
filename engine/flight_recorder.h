// FlightRecorder: each communicator's ring of its last K collectives and partition calls, so
// that a hung or failed job can say which rank stopped where (docs/ARCHITECTURE.md#flight-
// recorder). Fixed-size, allocated when the engine is created (K = ZRT_TRACE_DEPTH); recording
// takes no lock and allocates nothing: a record claims its slot with one atomic increment and
// every field is a relaxed atomic, so a dump running on another thread reads whole values (a
// record overwritten while it is read shows as a newer id, and the dump skips it).
//
// States: posted (enqueued), started (at the head of its stream: its messages are out), done,
// failed. Timestamps are steady-clock nanoseconds; the dump's header carries the steady and
// wall clocks of the moment it was written, so a reader can place them.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "lib/core/status.h"

namespace zrt {

enum class TraceState : uint8_t { kPosted = 0, kStarted = 1, kDone = 2, kFailed = 3 };
const char* trace_state_name(TraceState state);

// What one record describes. A collective: kind (zrt_coll_kind_t), count, dtype, op, root or
// peer, purpose, stream. A partition call: `call` names it ("grad_ready"), unit its unit.
struct TraceCall {
  bool partition = false;
  const char* call = nullptr;  // a string literal (partition calls)
  int kind = -1;
  uint64_t count = 0;
  int dtype = -1;
  int op = -1;    // zrt_op_t, 0xff for premul_sum, -1 for none
  int root = -1;  // rooted kinds
  int peer = -1;  // send / recv
  int purpose = 0;
  int32_t purpose_id = -1;  // the unit or bucket; a partition call's unit
  int stream = -1;
};

// A record as a dump reads it.
struct TraceRecord {
  uint64_t id = 0;  // 1, 2, ... in posting order
  TraceCall call;
  uint32_t sequence = 0;  // the collective's number on its stream, once started
  bool has_sequence = false;
  TraceState state = TraceState::kPosted;
  int64_t posted_ns = 0;
  int64_t started_ns = 0;
  int64_t done_ns = 0;
};

class FlightRecorder {
 public:
  // depth 0: records nothing.
  explicit FlightRecorder(size_t depth);
  ~FlightRecorder();
  FlightRecorder(const FlightRecorder&) = delete;
  FlightRecorder& operator=(const FlightRecorder&) = delete;

  size_t depth() const { return depth_; }
  // Records a posted call; returns its ticket for started()/finished() (0 when off). Any thread.
  // `at_ns` (now_ns()'s clock) lets a caller that has just read the clock pass it: the inline
  // path records a call's post, start and end with two clock reads instead of five.
  uint64_t post(const TraceCall& call, int64_t at_ns = now_ns());
  void started(uint64_t ticket, uint32_t sequence, int64_t at_ns = now_ns());
  void finished(uint64_t ticket, bool ok, int64_t at_ns = now_ns());
  // Records ever posted (the ring holds the last depth() of them).
  uint64_t recorded() const { return next_.load(std::memory_order_relaxed); }

  // Copies the ring, oldest first, into `out` (up to depth() records); returns how many.
  size_t snapshot(TraceRecord* out, size_t capacity) const;

  static int64_t now_ns();

 private:
  struct Slot;
  Slot* slot_for(uint64_t ticket) const;

  // The slot of a ticket, (ticket - 1) mod depth_ taken on the ticket's low 32 bits by a multiply
  // (Lemire's fastmod): three 64-bit divisions a call were a measurable part of an 8-byte
  // all-reduce. At the 2^32 wrap a slot is reused early once; every reader maps alike.
  size_t slot_index(uint64_t ticket) const;

  size_t depth_;
  uint64_t depth_magic_ = 0;  // UINT64_MAX / depth_ + 1
  std::unique_ptr<Slot[]> slots_;
  std::atomic<uint64_t> next_{0};
};

// What a dump file's first line says about the rank and the moment.
struct TraceHeader {
  int rank = 0;
  int size = 1;
  int instance = 0;  // the communicator's creation number in this process
  std::string reason;
};

// The dump: JSON lines, a header line then one line per record, oldest first, written to
// `path` through a temporary file and a rename (a reader never sees half a file).
Status write_trace_file(const FlightRecorder& recorder, const TraceHeader& header,
                        const std::string& path);
// <dir>/zrt-trace-r<rank>-c<instance>.jsonl
std::string trace_file_path(const std::string& dir, int rank, int instance);

}  // namespace zrt
