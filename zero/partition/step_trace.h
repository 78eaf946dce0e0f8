// The offloaded step's stretches of training-thread work as partition calls in the
// communicator's flight recorder (engine/flight_recorder.h): per segment the wait for its
// gradient (its reduction, and its copy to the host where one is made), the optimizer callback
// and the conversion back; for the step the rest of its backup, the wait for the copies and
// reductions still in flight after the last callback, the vote and the publish. A dump then
// shows where in the pipeline a rank stopped, and bench_overlap's offload mode reads the last
// step's records for its breakdown of the step (docs/ARCHITECTURE.md#offload-pipeline).
// Recording is a few relaxed atomics per stretch.
#pragma once

#include <utility>

#include "zero/comm/communicator.h"
#include "lib/core/status.h"
#include "engine/engine.h"

namespace zrt {

// The calls, as the records name them (string literals, so records may keep the pointers).
inline constexpr const char* kTraceOffloadWait = "offload_wait";
inline constexpr const char* kTraceOffloadOptimizer = "offload_optimizer";
inline constexpr const char* kTraceOffloadConvert = "offload_convert";
inline constexpr const char* kTraceOffloadDrain = "offload_drain";
inline constexpr const char* kTraceStepBackup = "step_backup";
inline constexpr const char* kTraceStepVote = "step_vote";
inline constexpr const char* kTraceStepPublish = "step_publish";

// Runs body() (returning Status) as partition call `call` of `segment` (-1 = none).
template <typename Body>
Status traced_step_part(Communicator& comm, const char* call, int segment, Body&& body) {
  FlightRecorder& recorder = comm.engine().recorder();
  TraceCall traced;
  traced.partition = true;
  traced.call = call;
  traced.purpose_id = segment;
  const uint64_t ticket = recorder.post(traced);
  recorder.started(ticket, 0);
  Status status = std::forward<Body>(body)();
  recorder.finished(ticket, status.is_ok());
  return status;
}

}  // namespace zrt
