#include "collectives/one_shot_lane.h"

#include <memory>
#include <utility>

namespace zrt {
namespace {

std::unique_ptr<CollTask> heap_task(CollTask& task, OneShotPhase& phase) {
  auto moved = std::make_unique<CollTask>(std::move(task));
  moved->add_phase(std::make_unique<OneShotPhase>(std::move(phase)));
  return moved;
}

}  // namespace

Status run_one_shot_collective(Stream& stream, CollTask& task, OneShotPhase phase) {
  task.set_memory_path();
  InlineCall call;
  call.trace = task.trace_call();
  if (!stream.begin_inline(&call)) return stream.enqueue(heap_task(task, phase));
  TaskContext& context = *call.context;
  // The task has no phase yet: its start() starts the fingerprint check alone, as it would
  // before the phase's own start.
  Status status = task.start(context);
  if (status.is_ok()) status = phase.start(context, task);
  bool done = false;
  if (status.is_ok()) {
    status = spin_inline(
        stream, call, [&](bool* finished) { return phase.progress(context, task, finished); },
        &done);
  }
  if (status.is_ok() && done) {
    stream.end_inline(call, task.kind(), task.internal(), task.bytes_sent(), task.bytes_received());
    return Status::ok();
  }
  // Late or failed: the progress thread continues the phase where it stands (a failed phase
  // reports its error again there, where the engine handles it).
  phase.keep_error(status);
  stream.hand_off_inline(call, heap_task(task, phase));
  return Status::ok();
}

}  // namespace zrt
