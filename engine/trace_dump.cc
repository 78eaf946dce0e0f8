#include "engine/trace_dump.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

namespace zrt {
namespace {

std::mutex g_mutex;
std::vector<TraceSource*> g_sources;  // guarded by g_mutex
bool g_installed = false;             // guarded by g_mutex
int g_pipe[2] = {-1, -1};
struct sigaction g_previous_term;
struct sigaction g_previous_usr1;

void on_signal(int signal_number) {
  const int saved = errno;
  const unsigned char byte = static_cast<unsigned char>(signal_number);
  ssize_t written = ::write(g_pipe[1], &byte, 1);  // async-signal-safe; full pipe: dropped
  (void)written;
  errno = saved;
}

void dump_all(const std::string& reason) {
  std::lock_guard<std::mutex> lock(g_mutex);
  for (TraceSource* source : g_sources) source->dump_on_signal(reason);
}

void dumper(int read_fd) {
  for (;;) {
    unsigned char byte = 0;
    const ssize_t got = ::read(read_fd, &byte, 1);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return;
    if (byte == SIGUSR1) {
      dump_all("SIGUSR1");
      continue;
    }
    if (byte == SIGTERM) {
      dump_all("SIGTERM");
      // The disposition the process had before zrt, then the signal again.
      sigaction(SIGTERM, &g_previous_term, nullptr);
      raise(SIGTERM);
    }
  }
}

// In a forked child: no dumper thread exists there, so the old dispositions come back.
void after_fork_in_child() {
  if (!g_installed) return;
  sigaction(SIGTERM, &g_previous_term, nullptr);
  sigaction(SIGUSR1, &g_previous_usr1, nullptr);
  ::close(g_pipe[0]);
  ::close(g_pipe[1]);
  g_pipe[0] = g_pipe[1] = -1;
  g_installed = false;
  // The child's copy of the mutex may be held by a parent thread that does not exist here.
  new (&g_mutex) std::mutex();
  g_sources.clear();
}

bool install_locked(std::string* error) {
  if (::pipe2(g_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
    *error = std::string("flight recorder: pipe: ") + std::strerror(errno);
    return false;
  }
  // The reader blocks; only the handler's end must never block.
  const int flags = fcntl(g_pipe[0], F_GETFL);
  fcntl(g_pipe[0], F_SETFL, flags & ~O_NONBLOCK);
  struct sigaction action {};
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  if (sigaction(SIGTERM, &action, &g_previous_term) != 0 ||
      sigaction(SIGUSR1, &action, &g_previous_usr1) != 0) {
    *error = std::string("flight recorder: sigaction: ") + std::strerror(errno);
    return false;
  }
  static std::once_flag at_fork;
  std::call_once(at_fork, [] { pthread_atfork(nullptr, nullptr, after_fork_in_child); });
  std::thread(dumper, g_pipe[0]).detach();
  g_installed = true;
  return true;
}

}  // namespace

bool register_trace_source(TraceSource* source, std::string* error) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (!g_installed && !install_locked(error)) return false;
  g_sources.push_back(source);
  return true;
}

void unregister_trace_source(TraceSource* source) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_sources.erase(std::remove(g_sources.begin(), g_sources.end(), source), g_sources.end());
}

}  // namespace zrt
