#include "lib/bootstrap/launcher_watch.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <mutex>
#include <string>
#include <thread>

#include <fmt/format.h>

namespace zrt {
namespace {

std::mutex watch_mutex;
bool watching = false;

[[noreturn]] void launcher_gone(int rank) {
  // stdout and stderr are pipes to the dead launcher: writing may fail, and must not kill the
  // rank with SIGPIPE before it has said why it stops.
  signal(SIGPIPE, SIG_IGN);
  const std::string line = fmt::format(
      "zrt: rank {} (pid {}): the launcher (zrt-run, parent pid) is gone; exiting with code {} "
      "instead of running on without it. Start the job again.\n",
      rank, getpid(), kLauncherGoneExitCode);
  ssize_t written = write(STDERR_FILENO, line.data(), line.size());
  (void)written;
  // Other threads may be mid-collective: no destructors, no atexit handlers.
  _exit(kLauncherGoneExitCode);
}

void watch(int fd, int rank) {
  while (true) {
    pollfd entry{fd, POLLIN, 0};
    const int ready = poll(&entry, 1, -1);
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0) return;  // cannot watch (EINVAL, ENOMEM): the parent-death signal is gone too
    char byte;
    const ssize_t n = read(fd, &byte, 1);
    if (n == 0) launcher_gone(rank);
    if (n < 0 && errno != EINTR && errno != EAGAIN) return;
    // The launcher never writes; a byte is ignored.
  }
}

}  // namespace

Status watch_launcher(int fd, int rank) {
  if (fd < 0) return Status::ok();
  std::lock_guard<std::mutex> lock(watch_mutex);
  if (watching) return Status::ok();
  struct stat info {};
  if (fstat(fd, &info) != 0 || !S_ISFIFO(info.st_mode)) {
    return Status::invalid_argument(
        "ZRT_LAUNCHER_FD={} is not an open pipe from zrt-run; unset it when not launched by "
        "zrt-run",
        fd);
  }
  // Children the rank starts (data loaders, shells) need not hold it.
  fcntl(fd, F_SETFD, FD_CLOEXEC);
  std::thread(watch, fd, rank).detach();
  watching = true;
  // The watch reports and exits by itself; the signal would race it and kill silently.
  prctl(PR_SET_PDEATHSIG, 0);
  return Status::ok();
}

}  // namespace zrt
