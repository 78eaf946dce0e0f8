// Partition calls in the communicator's flight recorder (engine/flight_recorder.h): the
// calls that drive a step (fetch, release, grad_ready, grad_norm, step), so that a dump shows
// where in the step a rank was when its collectives stopped.
#pragma once

#include "zero/api/handles.h"
#include "zero/api/partition_handle.h"
#include "zero/comm/communicator.h"
#include "engine/flight_recorder.h"

namespace zrt::api {

// Runs body() as partition call `call` (a string literal) of `unit` (-1 = none), recorded as
// started before and done or failed after.
template <typename Body>
Status traced_partition_call(const zrt_partition* pm, const char* call, int unit, Body&& body) {
  FlightRecorder& recorder = pm->comm->impl->engine().recorder();
  TraceCall traced;
  traced.partition = true;
  traced.call = call;
  traced.purpose_id = unit;
  const uint64_t ticket = recorder.post(traced);
  recorder.started(ticket, 0);
  Status status = body();
  recorder.finished(ticket, status.is_ok());
  return status;
}

}  // namespace zrt::api
