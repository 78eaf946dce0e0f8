#include "tests/hardening/peer_failure.h"

#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>

namespace zrt::testing {

std::string run_dir() {
  const char* dir = std::getenv("ZRT_TEST_RUN_DIR");
  return dir != nullptr ? dir : ".";
}

void publish_victim_pid() {
  const std::string path = run_dir() + "/victim.pid";
  {
    std::ofstream out(path + ".tmp");
    out << getpid() << "\n";
  }
  std::rename((path + ".tmp").c_str(), path.c_str());
}

void kill_victim() {
  std::ifstream in(run_dir() + "/victim.pid");
  pid_t pid = 0;
  if (in >> pid && pid > 0) kill(pid, SIGKILL);
}

zrt_status_t barrier_sync(zrt_comm_t comm, zrt_stream_t stream) {
  const zrt_status_t status = zrt_barrier(comm, stream);
  return status != ZRT_SUCCESS ? status : zrt_stream_synchronize(stream);
}

}  // namespace zrt::testing
