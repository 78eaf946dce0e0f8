// The binding plan on described machines (a two-socket GPU server, this small VM), and on the
// machine the test runs on (discovered with hwloc when the build has it).
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <set>

#include <gtest/gtest.h>

#include "tools/common/binding.h"
#include "tools/common/topology.h"

namespace zrt::tools {
namespace {

// Two sockets × 8 cores (2 threads each), one NUMA node per socket, 4 GPUs (two per socket),
// 2 NICs (one per socket): the shape of a typical DGX-like box, halved.
Topology two_socket_gpu_server() {
  Topology t;
  t.hostname = "server";
  for (int s = 0; s < 2; ++s) {
    TopoSocket socket{s, {}};
    TopoNuma numa{s, 64ull << 30, {}};
    for (int c = 0; c < 8; ++c) {
      int core_index = s * 8 + c;
      TopoCore core{core_index, s, s, {core_index, core_index + 16}};
      socket.pus.insert(socket.pus.end(), core.pus.begin(), core.pus.end());
      numa.pus.insert(numa.pus.end(), core.pus.begin(), core.pus.end());
      t.cores.push_back(core);
    }
    t.sockets.push_back(socket);
    t.numa_nodes.push_back(numa);
  }
  for (int g = 0; g < 4; ++g) {
    int s = g / 2;
    t.gpus.push_back({"cuda" + std::to_string(g), "gpu", "0000:0" + std::to_string(g) + ":00.0",
                      "GPU", s, t.numa_nodes[static_cast<size_t>(s)].pus});
  }
  for (int n = 0; n < 2; ++n) {
    t.nics.push_back({"mlx5_" + std::to_string(n), "nic", "0000:1" + std::to_string(n) + ":00.0",
                      "", n, t.numa_nodes[static_cast<size_t>(n)].pus});
  }
  return t;
}

Topology small_vm(int cores) {
  Topology t;
  TopoNuma numa{0, 24ull << 30, {}};
  for (int c = 0; c < cores; ++c) {
    t.cores.push_back({c, 0, 0, {c}});
    numa.pus.push_back(c);
  }
  t.numa_nodes.push_back(numa);
  t.sockets.push_back({0, numa.pus});
  t.nics.push_back({"eth0", "nic", "0000:00:03.0", "", -1, {}});
  return t;
}

bool contains(const std::vector<int>& v, int x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

TEST(Binding, GpuServerPlacesRanksNearTheirGpuAndNic) {
  Topology t = two_socket_gpu_server();
  BindingPlan plan;
  ASSERT_TRUE(plan_binding(t, 4, &plan).is_ok());
  ASSERT_EQ(plan.ranks.size(), 4u);
  std::set<int> used;
  for (const RankBinding& rb : plan.ranks) {
    EXPECT_EQ(rb.gpu, rb.local_rank);
    int socket = rb.local_rank / 2;
    EXPECT_EQ(rb.numa, socket);
    EXPECT_EQ(rb.nic_name, "mlx5_" + std::to_string(socket));
    EXPECT_FALSE(rb.shared);
    EXPECT_EQ(rb.cpus.size(), 8u);  // 4 cores × 2 threads
    for (int cpu : rb.cpus) {
      EXPECT_TRUE(contains(t.numa_nodes[static_cast<size_t>(socket)].pus, cpu)) << cpu;
      EXPECT_TRUE(used.insert(cpu).second) << "cpu " << cpu << " given twice";
    }
    EXPECT_TRUE(contains(rb.cpus, rb.progress_cpu));
    EXPECT_TRUE(contains(t.nics[static_cast<size_t>(socket)].local_pus, rb.progress_cpu));
  }
  auto env = binding_environment(plan.ranks[1]);
  EXPECT_EQ(env["ZRT_BIND_GPU"], "1");
  EXPECT_EQ(env["ZRT_BIND_NIC"], "mlx5_0");
  EXPECT_EQ(env["ZRT_BIND_CPUS"], "4-7,20-23");
}

TEST(Binding, MoreRanksThanGpusShareEachGpusCores) {
  Topology t = two_socket_gpu_server();
  BindingPlan plan;
  ASSERT_TRUE(plan_binding(t, 8, &plan).is_ok());
  // Ranks 0 and 4 drive GPU 0; with ranks 1 and 5 (GPU 1, same socket) they split its 8 cores.
  EXPECT_EQ(plan.ranks[0].gpu, 0);
  EXPECT_EQ(plan.ranks[4].gpu, 0);
  EXPECT_EQ(plan.ranks[0].cpus.size(), 2u * 2);
  for (int cpu : plan.ranks[0].cpus) EXPECT_FALSE(contains(plan.ranks[4].cpus, cpu));
}

TEST(Binding, WithoutGpusSpreadsOverNumaNodesInBlocks) {
  Topology t = two_socket_gpu_server();
  t.gpus.clear();
  BindingPlan plan;
  ASSERT_TRUE(plan_binding(t, 4, &plan).is_ok());
  EXPECT_EQ(plan.ranks[0].numa, 0);
  EXPECT_EQ(plan.ranks[1].numa, 0);
  EXPECT_EQ(plan.ranks[2].numa, 1);
  EXPECT_EQ(plan.ranks[3].numa, 1);
  EXPECT_EQ(plan.ranks[0].gpu, -1);
  EXPECT_NE(plan.note.find("NUMA"), std::string::npos);
}

TEST(Binding, OversubscribedVmSharesCoresAndSaysSo) {
  Topology t = small_vm(2);
  BindingPlan plan;
  ASSERT_TRUE(plan_binding(t, 3, &plan).is_ok());
  EXPECT_EQ(plan.ranks[0].cpus, std::vector<int>{0});
  EXPECT_EQ(plan.ranks[1].cpus, std::vector<int>{1});
  EXPECT_EQ(plan.ranks[2].cpus, std::vector<int>{0});
  EXPECT_TRUE(plan.ranks[2].shared);
  EXPECT_NE(plan.note.find("shared"), std::string::npos);
  EXPECT_EQ(plan.ranks[0].nic_name, "eth0");

  ASSERT_TRUE(plan_binding(t, 1, &plan).is_ok());
  EXPECT_EQ(plan.ranks[0].cpus, (std::vector<int>{0, 1}));
  EXPECT_EQ(plan.ranks[0].progress_cpu, 1);  // the last core, away from the compute thread
}

TEST(Binding, RefusesBadInput) {
  BindingPlan plan;
  EXPECT_EQ(plan_binding(small_vm(2), 0, &plan).code(), ZRT_INVALID_ARGUMENT);
  EXPECT_EQ(plan_binding(Topology{}, 1, &plan).code(), ZRT_INVALID_ARGUMENT);
  RankBinding none;
  EXPECT_EQ(apply_binding(none).code(), ZRT_INVALID_ARGUMENT);
  RankBinding out_of_range;
  out_of_range.cpus = {CPU_SETSIZE + 5};
  EXPECT_EQ(apply_binding(out_of_range).code(), ZRT_INVALID_ARGUMENT);
  RankBinding dummy;
  EXPECT_EQ(binding_for_local_rank(3, 2, &dummy).code(), ZRT_INVALID_ARGUMENT);
}

TEST(CpuList, FormatsAndParsesRanges) {
  EXPECT_EQ(format_cpu_list({0, 1, 2, 3, 8, 10, 11}), "0-3,8,10-11");
  std::vector<int> cpus;
  ASSERT_TRUE(parse_cpu_list("0-3,8,10-11", "x", &cpus).is_ok());
  EXPECT_EQ(cpus, (std::vector<int>{0, 1, 2, 3, 8, 10, 11}));
  EXPECT_FALSE(parse_cpu_list("3-1", "x", &cpus).is_ok());
  EXPECT_FALSE(parse_cpu_list("a", "x", &cpus).is_ok());
  EXPECT_FALSE(parse_cpu_list("1,,2", "x", &cpus).is_ok());
}

TEST(Topology, ThisMachine) {
  Topology t;
  Status s = discover_topology(&t);
  if (!topology_supported()) {
    EXPECT_EQ(s.code(), ZRT_UNSUPPORTED);
    EXPECT_NE(s.message().find("hwloc"), std::string::npos);
    return;
  }
  ASSERT_TRUE(s.is_ok()) << s.message();
  EXPECT_FALSE(t.cores.empty());
  EXPECT_FALSE(t.numa_nodes.empty());
  long online = sysconf(_SC_NPROCESSORS_ONLN);
  size_t pus = 0;
  for (const TopoCore& core : t.cores) pus += core.pus.size();
  EXPECT_EQ(static_cast<long>(pus), online);
}

TEST(Binding, AppliedBindingIsTheProcessAffinity) {
  if (!topology_supported()) GTEST_SKIP() << "built without hwloc";
  RankBinding rb;
  ASSERT_TRUE(binding_for_local_rank(0, 2, &rb).is_ok());
  // Apply in a child so the test process keeps its own affinity.
  pid_t pid = fork();
  if (pid == 0) {
    if (!apply_binding(rb).is_ok()) _exit(2);
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof(set), &set) != 0) _exit(3);
    if (CPU_COUNT(&set) != static_cast<int>(rb.cpus.size())) _exit(4);
    for (int cpu : rb.cpus) {
      if (!CPU_ISSET(cpu, &set)) _exit(5);
    }
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

}  // namespace
}  // namespace zrt::tools
