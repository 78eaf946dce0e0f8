// The ZRT_MEM_CUDA variants of the partition manager's two seams (engine/arena_backend.h,
// engine/element_ops.h): an arena backend over one DeviceArena block (ncclMemAlloc, so NCCL
// may register it, else cudaMalloc) and element ops over the CUDA kernels of
// device/device_kernels.h. The partition manager gets them from the communicator's
// DeviceContext (engine/device.h), never from here.
//
// Ordering without host synchronisation. The host ops finish before they return; a device op
// that did the same would stall the training thread on every call. So the device ops have two
// modes. Bound to a zrt CUDA stream (ElementOps::bind, ElementOps::run_on), they launch on that
// stream and return at once: a reduction's follow-up and the conversion feeding a gather sit on
// the same stream as the collective, ordered by CUDA itself. Before the first launch of a
// binding the bound stream waits (cudaStreamWaitEvent) on an event recorded on CUDA's legacy
// default stream, which orders zrt's work after every kernel the framework queued on its default
// or blocking streams (its gradients, its optimizer). Unbound, an op runs on the ops' own stream
// and waits for it: only calls off the training path (load_param, checkpoint copies, gradient
// norm read-back, step preparation) take that route.
#pragma once

#include <memory>

#include "lib/core/status.h"
#include "engine/arena_backend.h"
#include "engine/element_ops.h"

namespace zrt {

// One device block on `device`; allocate() hands it zero-filled.
Status create_device_arena_backend(int device, std::unique_ptr<ArenaBackend>* backend);
// Pinned (page-locked, mapped, portable) host memory, zero-filled: offload_optimizer's arena.
Status create_pinned_host_arena_backend(int device, std::unique_ptr<ArenaBackend>* backend);

// Element ops on `device`. They own a CUDA stream, one timing-free event and the few bytes of
// device workspace the fused sum-of-squares kernel needs, all made here (finalize time).
Status create_device_element_ops(int device, std::unique_ptr<ElementOps>* ops);

}  // namespace zrt
