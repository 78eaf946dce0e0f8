// A rank's watch on its launcher. zrt-run hands every rank the read end of a pipe whose only
// write end it holds (ZRT_LAUNCHER_FD); when zrt-run dies, even by SIGKILL, the pipe reports
// end-of-file. A thread of the rank waits for that and ends the rank with a message, so that
// no rank keeps training under pid 1 with nobody to report to. Ranks that never reach a
// bootstrap are covered by the parent-death signal (SIGTERM) zrt-run sets before exec, which
// the watch clears once it takes over (so the message is not lost to the signal).
#pragma once

#include "lib/core/status.h"

namespace zrt {

// The exit code of a rank whose launcher is gone.
inline constexpr int kLauncherGoneExitCode = 1;

// Starts the watch on `fd` once per process (later calls and fd < 0 do nothing). An fd that is
// not a pipe is ZRT_INVALID_ARGUMENT naming ZRT_LAUNCHER_FD. `rank` is for the message.
Status watch_launcher(int fd, int rank);

}  // namespace zrt
