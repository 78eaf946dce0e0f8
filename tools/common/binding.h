// CPU binding for the ranks of one host: which cores each local rank runs on, where its
// progress thread goes, and which GPU and NIC are closest to it. zrt-topo prints the plan,
// zrt-run --bind applies it to each child before exec.
#pragma once

#include <sched.h>

#include <map>
#include <string>
#include <vector>

#include "lib/core/status.h"
#include "tools/common/topology.h"

namespace zrt::tools {

struct RankBinding {
  int local_rank = 0;
  std::vector<int> cpus;  // OS PU indices the rank is bound to
  int progress_cpu = -1;  // the PU its progress thread should use (one of cpus)
  int numa = -1;          // NUMA node of its cores
  int gpu = -1;           // index into Topology::gpus, -1 without GPUs
  std::string gpu_name;
  std::string nic_name;  // nearest NIC, "" without NICs
  bool shared = false;   // more ranks than cores: this rank's cores are shared with others
};

struct BindingPlan {
  std::vector<RankBinding> ranks;
  std::string note;  // why the plan looks as it does (oversubscription, no GPUs, ...)
};

// Computes the binding of `local_ranks` ranks on `topology`.
// Errors: ZRT_INVALID_ARGUMENT (local_ranks < 1, a topology without cores).
Status plan_binding(const Topology& topology, int local_ranks, BindingPlan* plan);

// The environment zrt-run exports to a bound rank: ZRT_BIND_CPUS, ZRT_PROGRESS_CPU, and
// ZRT_BIND_GPU / ZRT_BIND_NIC when known.
std::map<std::string, std::string> binding_environment(const RankBinding& binding);

// Binds the calling process (and the threads it creates later) to binding.cpus.
Status apply_binding(const RankBinding& binding);

// Discovers the topology, plans for `local_ranks` and returns the binding of `local_rank`:
// the one call zrt-run needs.
Status binding_for_local_rank(int local_rank, int local_ranks, RankBinding* binding);

// What a launcher needs to bind its children: everything computed before fork(), so that the
// child only makes one system call between fork and exec (where a multi-threaded parent's
// child may only make async-signal-safe calls).
struct LaunchBinding {
  BindingPlan plan;
  std::vector<cpu_set_t> cpu_sets;                    // by local rank
  std::vector<std::vector<std::string>> environment;  // "NAME=value" entries, by local rank
};

// Discovers the topology and plans `local_ranks` ranks. Errors: ZRT_UNSUPPORTED without hwloc
// (the message says how to enable it), the planner's errors.
Status prepare_launch_binding(int local_ranks, LaunchBinding* binding);

// In the child, after fork and before exec: binds the calling process to its rank's CPUs.
// Async-signal-safe (one sched_setaffinity call). Returns 0 or an errno value.
int apply_launch_binding(const LaunchBinding& binding, int local_rank) noexcept;

}  // namespace zrt::tools
