// The machine as zrt's tools see it: sockets, NUMA nodes, cores, GPUs and NICs with the CPUs
// local to each (their PCI locality). Discovered with hwloc when the build has it; the data
// structures themselves need no hwloc, so binding plans can be computed and tested anywhere.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lib/core/status.h"

namespace zrt::tools {

struct TopoSocket {
  int index = 0;
  std::vector<int> pus;  // OS indices of the processing units (hardware threads)
};

struct TopoNuma {
  int os_index = 0;
  uint64_t memory_bytes = 0;
  std::vector<int> pus;
};

struct TopoCore {
  int index = 0;  // logical index, in hwloc's topology order
  int socket = -1;
  int numa = -1;  // OS index of the NUMA node holding it
  std::vector<int> pus;
};

struct TopoDevice {
  std::string name;            // "cuda0", "mlx5_0", "eth0"
  std::string kind;            // "gpu" or "nic"
  std::string pci_busid;       // "0000:3b:00.0"; empty for virtual devices
  std::string model;           // "NVIDIA H100 80GB HBM3", "" if unknown
  int numa = -1;               // nearest NUMA node, -1 when the device has no locality
  std::vector<int> local_pus;  // CPUs close to the device (empty = no locality known)
};

struct Topology {
  std::string hostname;
  std::vector<TopoSocket> sockets;
  std::vector<TopoNuma> numa_nodes;
  std::vector<TopoCore> cores;
  std::vector<TopoDevice> gpus;
  std::vector<TopoDevice> nics;
};

// True when this build can discover topology (hwloc was found at configure time).
bool topology_supported();

// Discovers this machine. ZRT_UNSUPPORTED with a message saying how to enable hwloc when the
// build has none; ZRT_SYSTEM_ERROR if hwloc fails.
Status discover_topology(Topology* topology);

// "0-3,8,10-11".
std::string format_cpu_list(const std::vector<int>& cpus);
// Parses the same form; the message names `what`.
Status parse_cpu_list(const std::string& text, const char* what, std::vector<int>* cpus);

}  // namespace zrt::tools
