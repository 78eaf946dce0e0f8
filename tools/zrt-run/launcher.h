// zrt-run's job control: serve the rendezvous store, start N local ranks with a launcher's
// environment, relay their output, and bring the whole job down when one rank fails.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace zrt {

struct LaunchOptions {
  int ranks = 1;
  int port = 0;             // zrt's store's port (ZRT_STORE_PORT); 0 = any free port
  int master_port = 0;      // MASTER_PORT, left to the framework (torch.distributed); 0 = free
  bool prefix = true;       // "[rank] " before every output line
  bool tag_output = false;  // "[rank:stdout] " / "[rank:stderr] " instead
  double timeout_s = 0;     // kill the job after this long; 0 = no limit
  int64_t grace_ms = 3000;  // between SIGTERM and SIGKILL when bringing the job down
  // --bind: bind each rank to the cores of tools/common/binding.h's plan (zrt-topo prints it),
  // applied right after fork(), before exec().
  bool bind = false;
  std::vector<std::string> command;  // program and its arguments
};

// Runs the job to completion and returns zrt-run's exit status: 0 only when every rank exited
// with 0. Diagnostics ("zrt-run: rank 2 exited with code 3") go to stderr.
int run_job(const LaunchOptions& options);

}  // namespace zrt
