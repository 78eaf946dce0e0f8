// Failures of the framework's callbacks (the optimizer of zrt_partition_step, the zrt_oob_t
// functions). A callback fails with zrt_callback_error("why"), which leaves its message on the
// calling thread; the zrt call that invoked it turns the returned value into a Status here, so
// the message travels with the error instead of a bare ZRT_INTERNAL_ERROR, and a value outside
// zrt_status_t (a binding whose callback raised) is named as such.
#pragma once

#include <string>

#include "lib/core/status.h"
#include "zrt/zrt.h"

namespace zrt {

// Records this thread's callback message (zrt_callback_error).
void set_callback_message(std::string message);
// Forgets it: called before a callback runs, so a stale message never shows.
void clear_callback_message();

// Whether `code` is one of zrt_status_t's enumerators.
bool is_known_status(int code);

// What a callback's return value means, for the message of the call that invoked it:
// ZRT_SUCCESS is ok; ZRT_CALLBACK_ERROR carries the thread's callback message (or says that
// none was set); a value outside zrt_status_t is ZRT_CALLBACK_ERROR naming the value; any other
// code is kept. `callback` names the callback ("the optimizer callback"). Clears the message.
Status callback_result(int code, const std::string& callback);

}  // namespace zrt
