// zrt-topo: prints the machine's topology (sockets, NUMA nodes, cores, GPUs, NICs with their
// PCI locality) and the binding zrt-run --bind would apply for N local ranks.
#include <cstdio>
#include <cstdlib>
#include <string>

#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "lib/core/launcher_variables.h"
#include "tools/common/binding.h"
#include "tools/common/table.h"
#include "tools/common/topology.h"
#include "tools/common/units.h"

namespace zrt::tools {
namespace {

constexpr int kExitOk = 0, kExitUsage = 2, kExitUnsupported = 3, kExitFailure = 1;

std::string or_dash(const std::string& s) {
  return s.empty() ? "-" : s;
}

std::string render_text(const Topology& topo, const BindingPlan& plan) {
  size_t pus = 0;
  for (const TopoCore& core : topo.cores) pus += core.pus.size();
  std::string out = fmt::format(
      "# host {}: {} socket(s), {} NUMA node(s), {} core(s), {} hardware thread(s), {} GPU(s), "
      "{} NIC(s)\n",
      topo.hostname, topo.sockets.size(), topo.numa_nodes.size(), topo.cores.size(), pus,
      topo.gpus.size(), topo.nics.size());

  Table numa;
  numa.add_column("numa", Table::Align::kRight);
  numa.add_column("memory", Table::Align::kRight);
  numa.add_column("cpus", Table::Align::kLeft);
  for (const TopoNuma& n : topo.numa_nodes) {
    numa.add_row(
        {fmt::format("{}", n.os_index), format_size(n.memory_bytes), format_cpu_list(n.pus)});
  }
  out += "\n" + numa.render("# ");

  Table cores;
  cores.add_column("core");
  cores.add_column("socket");
  cores.add_column("numa");
  cores.add_column("cpus", Table::Align::kLeft);
  for (const TopoCore& c : topo.cores) {
    cores.add_row({fmt::format("{}", c.index), fmt::format("{}", c.socket),
                   fmt::format("{}", c.numa), format_cpu_list(c.pus)});
  }
  out += "\n" + cores.render("# ");

  Table devices;
  devices.add_column("device", Table::Align::kLeft);
  devices.add_column("kind", Table::Align::kLeft);
  devices.add_column("pci", Table::Align::kLeft);
  devices.add_column("numa");
  devices.add_column("local cpus", Table::Align::kLeft);
  devices.add_column("model", Table::Align::kLeft);
  for (const auto* list : {&topo.gpus, &topo.nics}) {
    for (const TopoDevice& d : *list) {
      devices.add_row(
          {d.name, d.kind, or_dash(d.pci_busid), d.numa < 0 ? "-" : fmt::format("{}", d.numa),
           d.local_pus.empty() ? "(no locality)" : format_cpu_list(d.local_pus), or_dash(d.model)});
    }
  }
  out += "\n";
  out += devices.rows() == 0 ? std::string("# no GPUs or NICs found\n") : devices.render("# ");

  Table binding;
  binding.add_column("local_rank");
  binding.add_column("cpus", Table::Align::kLeft);
  binding.add_column("progress_cpu");
  binding.add_column("numa");
  binding.add_column("gpu", Table::Align::kLeft);
  binding.add_column("nic", Table::Align::kLeft);
  binding.add_column("shared", Table::Align::kLeft);
  for (const RankBinding& rb : plan.ranks) {
    binding.add_row({fmt::format("{}", rb.local_rank), format_cpu_list(rb.cpus),
                     fmt::format("{}", rb.progress_cpu), fmt::format("{}", rb.numa),
                     or_dash(rb.gpu_name), or_dash(rb.nic_name), rb.shared ? "yes" : "no"});
  }
  out += fmt::format("\n# binding for {} local rank(s) (zrt-run --bind): {}\n", plan.ranks.size(),
                     plan.note);
  out += binding.render("# ");
  return out;
}

nlohmann::json to_json(const Topology& topo, const BindingPlan& plan) {
  nlohmann::json j;
  j["host"] = topo.hostname;
  for (const TopoSocket& s : topo.sockets)
    j["sockets"].push_back({{"index", s.index}, {"cpus", s.pus}});
  for (const TopoNuma& n : topo.numa_nodes) {
    j["numa_nodes"].push_back(
        {{"os_index", n.os_index}, {"memory_bytes", n.memory_bytes}, {"cpus", n.pus}});
  }
  for (const TopoCore& c : topo.cores) {
    j["cores"].push_back(
        {{"index", c.index}, {"socket", c.socket}, {"numa", c.numa}, {"cpus", c.pus}});
  }
  j["gpus"] = nlohmann::json::array();
  j["nics"] = nlohmann::json::array();
  for (const auto& [key, list] : {std::pair{"gpus", &topo.gpus}, std::pair{"nics", &topo.nics}}) {
    for (const TopoDevice& d : *list) {
      j[key].push_back({{"name", d.name},
                        {"pci", d.pci_busid},
                        {"model", d.model},
                        {"numa", d.numa},
                        {"local_cpus", d.local_pus}});
    }
  }
  j["binding"]["note"] = plan.note;
  for (const RankBinding& rb : plan.ranks) {
    j["binding"]["ranks"].push_back({{"local_rank", rb.local_rank},
                                     {"cpus", rb.cpus},
                                     {"progress_cpu", rb.progress_cpu},
                                     {"numa", rb.numa},
                                     {"gpu", rb.gpu},
                                     {"gpu_name", rb.gpu_name},
                                     {"nic", rb.nic_name},
                                     {"shared", rb.shared},
                                     {"env", binding_environment(rb)}});
  }
  return j;
}

int run(int argc, char** argv) {
  CLI::App app{
      "zrt-topo: the machine's sockets, NUMA nodes, cores, GPUs and NICs (with PCI "
      "locality), and the CPU binding zrt-run --bind applies for N local ranks."};
  app.footer(
      "Examples:\n"
      "  zrt-topo                 topology, and the binding for $LOCAL_WORLD_SIZE ranks (or 1)\n"
      "  zrt-topo -n 8            the binding for 8 ranks per host\n"
      "  zrt-topo -n 4 --json     the same as JSON, for scripts\n"
      "Exit codes: 0 ok, 1 discovery failed, 2 bad usage, 3 built without hwloc.");
  int ranks = 0;
  bool json = false;
  app.add_option("-n,--ranks", ranks,
                 "local ranks to plan the binding for (default: "
                 "$LOCAL_WORLD_SIZE, else 1)")
      ->check(CLI::Range(1, 4096));
  app.add_flag("--json", json, "print JSON instead of tables");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    return code == 0 ? kExitOk : kExitUsage;
  }
  if (ranks == 0) {
    const LauncherVariables launcher = LauncherVariables::load();
    const char* env = launcher.value("LOCAL_WORLD_SIZE");
    ranks = env != nullptr && std::atoi(env) > 0 ? std::atoi(env) : 1;
  }
  if (!topology_supported()) {
    Status status = discover_topology(nullptr);
    fmt::print(stderr, "zrt-topo: {}\n", status.message());
    return kExitUnsupported;
  }
  Topology topo;
  Status status = discover_topology(&topo);
  if (!status.is_ok()) {
    fmt::print(stderr, "zrt-topo: {}\n", status.message());
    return status.code() == ZRT_UNSUPPORTED ? kExitUnsupported : kExitFailure;
  }
  BindingPlan plan;
  status = plan_binding(topo, ranks, &plan);
  if (!status.is_ok()) {
    fmt::print(stderr, "zrt-topo: {}\n", status.message());
    return kExitUsage;
  }
  if (json) {
    fmt::print("{}\n", to_json(topo, plan).dump(2));
  } else {
    fmt::print("{}", render_text(topo, plan));
  }
  return kExitOk;
}

}  // namespace
}  // namespace zrt::tools

int main(int argc, char** argv) {
  return zrt::tools::run(argc, argv);
}
