// The device MappedWindow (engine/mapped_window.h), through the CUDA virtual memory API, the
// mechanism of PyTorch's expandable segments: each slot is one physical allocation
// (cuMemCreate, the slot's bytes rounded up to the allocation granularity, 2 MiB on current
// GPUs) mapped once where the gathers write it; every unit has a virtual range of a slot's size
// reserved at finalize (cuMemAddressReserve), and a fetch maps the slot's allocation there as
// well (cuMemMap, cuMemSetAccess). A reserved range without a mapping is not readable: a kernel
// that reads a released unit fails with an illegal-address error instead of reading another
// unit's parameters.
//
// Mappings change on the host at once, while the framework's kernels that read a unit may still
// be queued after its release. So a release only records an event on the legacy default stream
// (after which every blocking stream's earlier work is done too: docs/API.md asks the framework
// for such streams), and the unit's range is unmapped when its slot is next gathered into, after
// that event (prepare_gather; usually long passed), or when the unit is mapped again elsewhere.
//
// The driver's entry points come through the runtime (cudaGetDriverEntryPointByVersion), so zrt
// needs no link against libcuda and loads on machines without a driver.
#pragma once

#include <memory>

#include "lib/core/status.h"
#include "engine/mapped_window.h"

namespace zrt {

// Errors: ZRT_UNSUPPORTED (no usable device, or a driver without the virtual memory API),
// ZRT_OUT_OF_MEMORY, ZRT_SYSTEM_ERROR (the driver call is named).
Status create_device_mapped_window(int device, int64_t timeout_ms, const MappedWindowSpec& spec,
                                   std::unique_ptr<MappedWindow>* window);

}  // namespace zrt
