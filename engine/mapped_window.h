// MappedWindow: the stage 3 gather window with a fixed address per unit
// (docs/ARCHITECTURE.md#stable-unit-addresses). The window's memory is depth + 1 slots, always
// committed, which the all-gathers write through the slots' own addresses; every unit also has
// an address of its own, reserved for the manager's life but backed by memory only while the
// unit is fetched: map(unit, slot) shows the slot's pages there, unmap(unit) takes them away
// again, after which a read of the unit's address faults rather than showing whichever unit
// the slot holds next. So a framework may keep a pointer into a unit across its release and
// fetch (autograd's saved tensors), while the memory held is still the window's.
//
// Host memory (zero/partition/host_mapped_window.h): a memfd mapped twice. Device memory
// (device/device_mapped_window.h): the CUDA virtual memory API, behind
// DeviceContext::create_mapped_window. Declared here, below the partition and the NCCL layer,
// because both implement or use it. Called from the training thread only.
#pragma once

#include <cstddef>
#include <vector>

#include "lib/core/status.h"

namespace zrt {

struct MappedWindowSpec {
  int slots = 0;
  size_t slot_bytes = 0;           // what one slot must hold: the largest unit's segment
  std::vector<size_t> unit_bytes;  // per unit: its segment's bytes (0: no segment, no address)
};

class MappedWindow {
 public:
  virtual ~MappedWindow() = default;

  // Where the gathers write `slot`: fixed, its memory committed for the window's life.
  virtual char* slot_address(int slot) const = 0;
  // The unit's fixed address (null for a unit without a segment).
  virtual char* unit_address(int unit) const = 0;
  // Memory the window commits, with the rounding of slots to pages or granules.
  virtual size_t committed_bytes() const = 0;

  // The unit's address shows `slot`'s memory (holding the unit's gathered segment) until
  // unmap(unit). The unit is not mapped.
  virtual Status map(int unit, int slot) = 0;
  // The unit was released: its address shows no memory any more.
  virtual Status unmap(int unit) = 0;
  // A gather is about to write `slot`: returns once no released unit's address can show what
  // it writes (device memory: the framework's reads of that unit, already queued, are done).
  virtual Status prepare_gather(int slot) = 0;
};

}  // namespace zrt
