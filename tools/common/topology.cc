#include "tools/common/topology.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>

#include <fmt/format.h>

#include "zrt_build_config.h"

#if ZRT_HAVE_HWLOC
#include <hwloc.h>
#endif

namespace zrt::tools {

bool topology_supported() {
  return ZRT_HAVE_HWLOC != 0;
}

std::string format_cpu_list(const std::vector<int>& cpus) {
  std::vector<int> sorted = cpus;
  std::sort(sorted.begin(), sorted.end());
  sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
  std::string out;
  for (size_t i = 0; i < sorted.size();) {
    size_t j = i;
    while (j + 1 < sorted.size() && sorted[j + 1] == sorted[j] + 1) ++j;
    if (!out.empty()) out += ",";
    out += j == i ? fmt::format("{}", sorted[i]) : fmt::format("{}-{}", sorted[i], sorted[j]);
    i = j + 1;
  }
  return out;
}

Status parse_cpu_list(const std::string& text, const char* what, std::vector<int>* cpus) {
  std::vector<int> out;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t comma = text.find(',', pos);
    std::string item =
        text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    char* end = nullptr;
    long first = std::strtol(item.c_str(), &end, 10);
    long last = first;
    if (end == item.c_str() || first < 0) {
      return Status::invalid_argument("{}: '{}' is not a CPU list like 0-3,8", what, text);
    }
    if (*end == '-') {
      char* end2 = nullptr;
      last = std::strtol(end + 1, &end2, 10);
      if (end2 == end + 1 || *end2 != '\0' || last < first) {
        return Status::invalid_argument("{}: bad range '{}' in '{}'", what, item, text);
      }
    } else if (*end != '\0') {
      return Status::invalid_argument("{}: '{}' is not a CPU list like 0-3,8", what, text);
    }
    for (long c = first; c <= last; ++c) out.push_back(static_cast<int>(c));
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  *cpus = std::move(out);
  return Status::ok();
}

#if ZRT_HAVE_HWLOC
namespace {

std::vector<int> bitmap_pus(hwloc_const_bitmap_t set) {
  std::vector<int> pus;
  if (set == nullptr) return pus;
  int index = -1;
  while ((index = hwloc_bitmap_next(set, index)) != -1) pus.push_back(index);
  return pus;
}

// The NUMA node whose CPUs contain (or most overlap) `pus`; -1 if none does.
int nearest_numa(const Topology& topology, const std::vector<int>& pus) {
  int best = -1;
  size_t best_overlap = 0;
  for (const TopoNuma& numa : topology.numa_nodes) {
    size_t overlap = 0;
    for (int pu : pus) overlap += std::count(numa.pus.begin(), numa.pus.end(), pu);
    if (overlap > best_overlap) {
      best_overlap = overlap;
      best = numa.os_index;
    }
  }
  return best;
}

struct HwlocTopology {
  hwloc_topology_t topo = nullptr;
  ~HwlocTopology() {
    if (topo != nullptr) hwloc_topology_destroy(topo);
  }
};

}  // namespace

Status discover_topology(Topology* topology) {
  HwlocTopology h;
  if (hwloc_topology_init(&h.topo) != 0) return Status::system_error("hwloc_topology_init", errno);
  // I/O devices are filtered out by default; GPUs and NICs are the point of this tool.
  hwloc_topology_set_io_types_filter(h.topo, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
  if (hwloc_topology_load(h.topo) != 0) return Status::system_error("hwloc_topology_load", errno);

  Topology out;
  char host[256] = {0};
  if (gethostname(host, sizeof(host) - 1) == 0) out.hostname = host;

  int sockets = hwloc_get_nbobjs_by_type(h.topo, HWLOC_OBJ_PACKAGE);
  for (int i = 0; i < sockets; ++i) {
    hwloc_obj_t obj = hwloc_get_obj_by_type(h.topo, HWLOC_OBJ_PACKAGE, static_cast<unsigned>(i));
    out.sockets.push_back({i, bitmap_pus(obj->cpuset)});
  }
  int numas = hwloc_get_nbobjs_by_type(h.topo, HWLOC_OBJ_NUMANODE);
  for (int i = 0; i < numas; ++i) {
    hwloc_obj_t obj = hwloc_get_obj_by_type(h.topo, HWLOC_OBJ_NUMANODE, static_cast<unsigned>(i));
    out.numa_nodes.push_back({static_cast<int>(obj->os_index), obj->attr->numanode.local_memory,
                              bitmap_pus(obj->cpuset)});
  }
  int cores = hwloc_get_nbobjs_by_type(h.topo, HWLOC_OBJ_CORE);
  for (int i = 0; i < cores; ++i) {
    hwloc_obj_t obj = hwloc_get_obj_by_type(h.topo, HWLOC_OBJ_CORE, static_cast<unsigned>(i));
    TopoCore core;
    core.index = i;
    core.pus = bitmap_pus(obj->cpuset);
    hwloc_obj_t package = hwloc_get_ancestor_obj_by_type(h.topo, HWLOC_OBJ_PACKAGE, obj);
    core.socket = package != nullptr ? static_cast<int>(package->logical_index) : -1;
    core.numa = nearest_numa(out, core.pus);
    out.cores.push_back(std::move(core));
  }

  for (hwloc_obj_t os = hwloc_get_next_osdev(h.topo, nullptr); os != nullptr;
       os = hwloc_get_next_osdev(h.topo, os)) {
    const hwloc_obj_osdev_type_e type = os->attr->osdev.type;
    TopoDevice device;
    device.name = os->name != nullptr ? os->name : "?";
    if (type == HWLOC_OBJ_OSDEV_COPROC || type == HWLOC_OBJ_OSDEV_GPU) {
      // The same GPU shows up as cuda0, nvml0 and card0 (DRM); keep CUDA's view when present,
      // else the first one seen per PCI device.
      device.kind = "gpu";
    } else if (type == HWLOC_OBJ_OSDEV_NETWORK || type == HWLOC_OBJ_OSDEV_OPENFABRICS) {
      device.kind = "nic";
    } else {
      continue;
    }
    const char* model = hwloc_obj_get_info_by_name(os, "GPUModel");
    if (model == nullptr) model = hwloc_obj_get_info_by_name(os, "PCIDevice");
    if (model != nullptr) device.model = model;
    hwloc_obj_t pci = os->parent;
    if (pci != nullptr && pci->type == HWLOC_OBJ_PCI_DEVICE) {
      device.pci_busid =
          fmt::format("{:04x}:{:02x}:{:02x}.{:01x}", pci->attr->pcidev.domain,
                      pci->attr->pcidev.bus, pci->attr->pcidev.dev, pci->attr->pcidev.func);
    }
    hwloc_obj_t anchor = hwloc_get_non_io_ancestor_obj(h.topo, os);
    // A device hanging off the machine root has no locality worth reporting.
    if (anchor != nullptr && anchor->type != HWLOC_OBJ_MACHINE) {
      device.local_pus = bitmap_pus(anchor->cpuset);
      device.numa = nearest_numa(out, device.local_pus);
    }
    std::vector<TopoDevice>& list = device.kind == "gpu" ? out.gpus : out.nics;
    auto same_pci = std::find_if(list.begin(), list.end(), [&](const TopoDevice& d) {
      return !d.pci_busid.empty() && d.pci_busid == device.pci_busid;
    });
    if (same_pci != list.end()) {
      if (device.name.rfind("cuda", 0) == 0) *same_pci = device;
      continue;
    }
    list.push_back(std::move(device));
  }
  *topology = std::move(out);
  return Status::ok();
}

#else

Status discover_topology(Topology*) {
  return Status::error(ZRT_UNSUPPORTED,
                       "this zrt was built without hwloc, so it cannot discover the topology; "
                       "install hwloc (Debian: apt-get install libhwloc-dev) and reconfigure "
                       "with `meson setup --reconfigure <build> -Dhwloc=enabled`");
}

#endif

}  // namespace zrt::tools
