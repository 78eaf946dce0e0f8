// How ranks are placed.
//
// The unit of locality is a group of cores close to one or more GPUs (their PCI locality), or, on a
// machine without GPUs, a NUMA node. Ranks are assigned to groups first: with G GPUs, local
// rank r drives GPU r % G and joins that GPU's group; without GPUs, ranks are spread over the
// NUMA nodes in contiguous blocks (ranks 0..k-1 on node 0, ...), so neighbours in rank order —
// which ring algorithms pair up — share a memory controller.
//
// Inside a group of k ranks and c cores, each rank gets c / k contiguous cores (the first
// c % k ranks one more). The progress thread of a rank goes on the last of its cores, moved
// onto a core local to the rank's NIC when one of its cores is; it keeps the rank's compute
// thread (on the first cores) undisturbed. When k > c the machine is oversubscribed: rank i
// gets core i % c and is marked shared, which is legal (zrt's waits block) but slow, and the
// plan's note says so.
#include "tools/common/binding.h"

#include <sched.h>

#include <algorithm>
#include <cerrno>

#include <fmt/format.h>

namespace zrt::tools {
namespace {

bool overlaps(const std::vector<int>& a, const std::vector<int>& b) {
  for (int x : a) {
    if (std::find(b.begin(), b.end(), x) != b.end()) return true;
  }
  return false;
}

// Cores whose PUs fall inside `pus` (all cores when pus is empty: no locality known).
std::vector<const TopoCore*> cores_within(const Topology& topology, const std::vector<int>& pus) {
  std::vector<const TopoCore*> out;
  for (const TopoCore& core : topology.cores) {
    if (pus.empty() || overlaps(core.pus, pus)) out.push_back(&core);
  }
  return out;
}

const TopoDevice* nearest_nic(const Topology& topology, const std::vector<int>& near_pus) {
  for (const TopoDevice& nic : topology.nics) {
    if (!nic.local_pus.empty() && overlaps(nic.local_pus, near_pus)) return &nic;
  }
  // Prefer a real (PCI) NIC over loopback-like virtual ones when none is local.
  for (const TopoDevice& nic : topology.nics) {
    if (!nic.pci_busid.empty()) return &nic;
  }
  return topology.nics.empty() ? nullptr : &topology.nics.front();
}

}  // namespace

Status plan_binding(const Topology& topology, int local_ranks, BindingPlan* plan) {
  if (local_ranks < 1) {
    return Status::invalid_argument("local ranks must be at least 1, got {}", local_ranks);
  }
  if (topology.cores.empty()) {
    return Status::invalid_argument("the topology has no cores to bind to");
  }
  const int n = local_ranks;

  // Group g: the cores a set of ranks shares, and which ranks (in order) belong to it.
  struct Group {
    std::vector<const TopoCore*> cores;
    std::vector<int> ranks;
  };
  std::vector<Group> groups;
  std::vector<int> group_of_rank(static_cast<size_t>(n));
  std::vector<int> gpu_of_rank(static_cast<size_t>(n), -1);
  if (!topology.gpus.empty()) {
    // GPUs with the same locality (e.g. two GPUs behind one socket) share one group, so their
    // ranks split those cores instead of each taking all of them.
    std::vector<int> group_of_gpu;
    for (const TopoDevice& gpu : topology.gpus) {
      std::vector<const TopoCore*> cores = cores_within(topology, gpu.local_pus);
      auto same = std::find_if(groups.begin(), groups.end(),
                               [&](const Group& g) { return g.cores == cores; });
      if (same == groups.end()) {
        groups.push_back({cores, {}});
        same = groups.end() - 1;
      }
      group_of_gpu.push_back(static_cast<int>(same - groups.begin()));
    }
    for (int r = 0; r < n; ++r) {
      const size_t gpu = static_cast<size_t>(r) % topology.gpus.size();
      group_of_rank[static_cast<size_t>(r)] = group_of_gpu[gpu];
      gpu_of_rank[static_cast<size_t>(r)] = static_cast<int>(gpu);
    }
  } else if (topology.numa_nodes.size() > 1) {
    for (const TopoNuma& numa : topology.numa_nodes)
      groups.push_back({cores_within(topology, numa.pus), {}});
    size_t count = groups.size();
    for (int r = 0; r < n; ++r) {
      group_of_rank[static_cast<size_t>(r)] =
          static_cast<int>(static_cast<size_t>(r) * count / static_cast<size_t>(n));
    }
  } else {
    groups.push_back({cores_within(topology, {}), {}});
  }
  for (int r = 0; r < n; ++r)
    groups[static_cast<size_t>(group_of_rank[static_cast<size_t>(r)])].ranks.push_back(r);

  BindingPlan out;
  out.ranks.resize(static_cast<size_t>(n));
  bool oversubscribed = false;
  for (Group& group : groups) {
    if (group.ranks.empty()) continue;
    // GPUs whose locality hwloc could not resolve leave no cores: use the whole machine.
    if (group.cores.empty()) group.cores = cores_within(topology, {});
    const size_t k = group.ranks.size(), c = group.cores.size();
    for (size_t i = 0; i < k; ++i) {
      RankBinding& rb = out.ranks[static_cast<size_t>(group.ranks[i])];
      rb.local_rank = group.ranks[i];
      std::vector<const TopoCore*> mine;
      if (c >= k) {
        size_t base = c / k, extra = c % k;
        size_t begin = i * base + std::min(i, extra);
        size_t len = base + (i < extra ? 1 : 0);
        mine.assign(group.cores.begin() + static_cast<long>(begin),
                    group.cores.begin() + static_cast<long>(begin + len));
      } else {
        mine.push_back(group.cores[i % c]);
        rb.shared = true;
        oversubscribed = true;
      }
      for (const TopoCore* core : mine)
        rb.cpus.insert(rb.cpus.end(), core->pus.begin(), core->pus.end());
      rb.numa = mine.front()->numa;
      const int gpu = gpu_of_rank[static_cast<size_t>(rb.local_rank)];
      if (gpu >= 0) {
        rb.gpu = gpu;
        rb.gpu_name = topology.gpus[static_cast<size_t>(gpu)].name;
      }
      const TopoDevice* nic = nearest_nic(
          topology, gpu >= 0 && !topology.gpus[static_cast<size_t>(gpu)].local_pus.empty()
                        ? topology.gpus[static_cast<size_t>(gpu)].local_pus
                        : rb.cpus);
      if (nic != nullptr) rb.nic_name = nic->name;
      const TopoCore* progress = mine.back();
      if (nic != nullptr && !nic->local_pus.empty()) {
        for (auto it = mine.rbegin(); it != mine.rend(); ++it) {
          if (overlaps((*it)->pus, nic->local_pus)) {
            progress = *it;
            break;
          }
        }
      }
      rb.progress_cpu = progress->pus.empty() ? -1 : progress->pus.front();
    }
  }
  if (oversubscribed) {
    out.note = fmt::format(
        "{} ranks on {} cores: cores are shared (fine for tests, since zrt's waits block, but "
        "expect lower bandwidth)",
        n, topology.cores.size());
  } else if (topology.gpus.empty()) {
    out.note = topology.numa_nodes.size() > 1 ? "no GPUs: ranks spread over NUMA nodes in blocks"
                                              : "no GPUs, one NUMA node: cores split evenly";
  } else {
    out.note = "rank r drives GPU r % GPUs, on cores local to that GPU";
  }
  *plan = std::move(out);
  return Status::ok();
}

std::map<std::string, std::string> binding_environment(const RankBinding& binding) {
  std::map<std::string, std::string> env;
  env["ZRT_BIND_CPUS"] = format_cpu_list(binding.cpus);
  if (binding.progress_cpu >= 0) env["ZRT_PROGRESS_CPU"] = fmt::format("{}", binding.progress_cpu);
  if (binding.gpu >= 0) env["ZRT_BIND_GPU"] = fmt::format("{}", binding.gpu);
  if (!binding.nic_name.empty()) env["ZRT_BIND_NIC"] = binding.nic_name;
  return env;
}

Status apply_binding(const RankBinding& binding) {
  if (binding.cpus.empty()) {
    return Status::invalid_argument("binding of local rank {} has no CPUs", binding.local_rank);
  }
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int cpu : binding.cpus) {
    if (cpu < 0 || cpu >= CPU_SETSIZE) {
      return Status::invalid_argument("binding of local rank {}: CPU {} out of range",
                                      binding.local_rank, cpu);
    }
    CPU_SET(cpu, &set);
  }
  if (sched_setaffinity(0, sizeof(set), &set) != 0) {
    return Status::system_error(fmt::format("binding local rank {} to CPUs {}", binding.local_rank,
                                            format_cpu_list(binding.cpus)),
                                errno);
  }
  return Status::ok();
}

Status binding_for_local_rank(int local_rank, int local_ranks, RankBinding* binding) {
  if (local_rank < 0 || local_rank >= local_ranks) {
    return Status::invalid_argument("local rank {} is outside 0..{}", local_rank, local_ranks - 1);
  }
  Topology topology;
  ZRT_RETURN_IF_ERROR(discover_topology(&topology));
  BindingPlan plan;
  ZRT_RETURN_IF_ERROR(plan_binding(topology, local_ranks, &plan));
  *binding = plan.ranks[static_cast<size_t>(local_rank)];
  return Status::ok();
}

Status prepare_launch_binding(int local_ranks, LaunchBinding* binding) {
  Topology topology;
  ZRT_RETURN_IF_ERROR(discover_topology(&topology));
  LaunchBinding out;
  ZRT_RETURN_IF_ERROR(plan_binding(topology, local_ranks, &out.plan));
  for (const RankBinding& rb : out.plan.ranks) {
    cpu_set_t set;
    CPU_ZERO(&set);
    for (int cpu : rb.cpus) {
      if (cpu < 0 || cpu >= CPU_SETSIZE) {
        return Status::invalid_argument("binding of local rank {}: CPU {} out of range",
                                        rb.local_rank, cpu);
      }
      CPU_SET(cpu, &set);
    }
    out.cpu_sets.push_back(set);
    std::vector<std::string> env;
    for (const auto& [name, value] : binding_environment(rb)) env.push_back(name + "=" + value);
    out.environment.push_back(std::move(env));
  }
  *binding = std::move(out);
  return Status::ok();
}

int apply_launch_binding(const LaunchBinding& binding, int local_rank) noexcept {
  if (local_rank < 0 || static_cast<size_t>(local_rank) >= binding.cpu_sets.size()) return EINVAL;
  const cpu_set_t& set = binding.cpu_sets[static_cast<size_t>(local_rank)];
  return sched_setaffinity(0, sizeof(set), &set) == 0 ? 0 : errno;
}

}  // namespace zrt::tools
