// When the flight recorders (flight_recorder.h) are written without anyone asking: on SIGUSR1
// (every communicator of the process, which goes on running) and SIGTERM (then the signal's
// previous disposition runs, by default the end of the process). Installed only once a
// communicator has a trace directory (ZRT_TRACE_DIR): a library takes no signals by default.
//
// The handler only writes the signal's number into a pipe; a thread of its own reads the pipe
// and writes the files, outside the handler, where formatting and file I/O are safe. A forked
// child gets the previous dispositions back (pthread_atfork): the thread is not inherited.
#pragma once

#include <string>

namespace zrt {

class TraceSource {
 public:
  virtual ~TraceSource() = default;
  // Writes this communicator's recorder into its trace directory; `reason` goes in the header.
  virtual void dump_on_signal(const std::string& reason) = 0;
};

// Adds a communicator to those a signal dumps; installs the handlers and the thread on first
// use in this process. Returns false (with *error set) when they could not be installed.
bool register_trace_source(TraceSource* source, std::string* error);
void unregister_trace_source(TraceSource* source);

}  // namespace zrt
