// zrt-run's job control: serve the rendezvous store, start N local ranks with a launcher's
// environment, relay their output, and bring the whole job down when one rank fails.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace zrt {

struct LaunchOptions {
  int ranks = 1;  // on this node (--nproc-per-node)
  // zrt's store's port (ZRT_STORE_PORT); 0 = any free port on one node, MASTER_PORT+1 on several
  int port = 0;
  // MASTER_PORT, left to the framework (torch.distributed); 0 = a free one on one node, 29500
  // (torchrun's default) on several
  int master_port = 0;
  // Several nodes (torchrun's names): node 0's zrt-run serves the job's store at
  // master_addr:port, the others join it (node_rendezvous.h).
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  std::string rdzv_id;         // the job's identity on every node; "" = the launcher's job id
  double join_timeout_s = 60;  // how long the nodes wait for one another
  bool prefix = true;          // "[rank] " before every output line
  bool tag_output = false;     // "[rank:stdout] " / "[rank:stderr] " instead
  double timeout_s = 0;        // kill the job after this long; 0 = no limit
  int64_t grace_ms = 3000;     // between SIGTERM and SIGKILL when bringing the job down
  // --bind: bind each rank to the cores of tools/common/binding.h's plan (zrt-topo prints it),
  // applied right after fork(), before exec().
  bool bind = false;
  std::vector<std::string> command;  // program and its arguments
};

// Runs the job to completion and returns zrt-run's exit status: 0 only when every rank (of every
// node) exited with 0. Diagnostics ("zrt-run: rank 2 exited with code 3", on several nodes
// "zrt-run: node 1 (host): rank 3 exited with code 3") go to stderr.
int run_job(const LaunchOptions& options);

}  // namespace zrt
