#include "device/device_mapped_window.h"

#include <cuda.h>
#include <cuda_runtime.h>

#include <vector>

#include "lib/core/log.h"
#include "device/cuda_status.h"
#include "device/poll_wait.h"

namespace zrt {
namespace {

// The driver calls this file makes, resolved once through the runtime.
struct VmmApi {
  decltype(&::cuMemAddressReserve) address_reserve = nullptr;
  decltype(&::cuMemAddressFree) address_free = nullptr;
  decltype(&::cuMemCreate) create = nullptr;
  decltype(&::cuMemRelease) release = nullptr;
  decltype(&::cuMemMap) map = nullptr;
  decltype(&::cuMemUnmap) unmap = nullptr;
  decltype(&::cuMemSetAccess) set_access = nullptr;
  decltype(&::cuMemGetAllocationGranularity) granularity = nullptr;
  decltype(&::cuGetErrorName) error_name = nullptr;
};

template <typename F>
Status resolve(const char* symbol, F* function) {
  void* address = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  const cudaError_t error =
      cudaGetDriverEntryPointByVersion(symbol, &address, 12000, cudaEnableDefault, &found);
  if (error != cudaSuccess) return cuda_status(error, "cudaGetDriverEntryPointByVersion");
  if (found != cudaDriverEntryPointSuccess || address == nullptr) {
    return Status::error(ZRT_UNSUPPORTED,
                         "the CUDA driver has no {} (the virtual memory API needs CUDA 12)",
                         symbol);
  }
  *function = reinterpret_cast<F>(address);
  return Status::ok();
}

Status load_vmm_api(VmmApi* api) {
  ZRT_RETURN_IF_ERROR(resolve("cuMemAddressReserve", &api->address_reserve));
  ZRT_RETURN_IF_ERROR(resolve("cuMemAddressFree", &api->address_free));
  ZRT_RETURN_IF_ERROR(resolve("cuMemCreate", &api->create));
  ZRT_RETURN_IF_ERROR(resolve("cuMemRelease", &api->release));
  ZRT_RETURN_IF_ERROR(resolve("cuMemMap", &api->map));
  ZRT_RETURN_IF_ERROR(resolve("cuMemUnmap", &api->unmap));
  ZRT_RETURN_IF_ERROR(resolve("cuMemSetAccess", &api->set_access));
  ZRT_RETURN_IF_ERROR(resolve("cuMemGetAllocationGranularity", &api->granularity));
  return resolve("cuGetErrorName", &api->error_name);
}

size_t round_up(size_t bytes, size_t unit) {
  return (bytes + unit - 1) / unit * unit;
}

class DeviceMappedWindow final : public MappedWindow {
 public:
  DeviceMappedWindow(int device, int64_t timeout_ms) : device_(device), timeout_ms_(timeout_ms) {}

  ~DeviceMappedWindow() override {
    DeviceGuard guard;
    if (!guard.enter(device_).is_ok()) return;
    // Destroying the manager is off the training path: wait for every kernel that may read a
    // unit, then take the mappings down in reverse.
    cudaDeviceSynchronize();
    for (size_t u = 0; u < mapped_slot_.size(); ++u) {
      if (mapped_slot_[u] >= 0) api_.unmap(unit_va(static_cast<int>(u)), stride_);
    }
    for (size_t s = 0; s < handles_.size(); ++s) {
      if (slot_mapped_[s]) api_.unmap(slot_va(static_cast<int>(s)), stride_);
      api_.release(handles_[s]);
    }
    if (units_base_ != 0) api_.address_free(units_base_, units_total_);
    if (slots_base_ != 0) api_.address_free(slots_base_, stride_ * handles_.size());
    for (cudaEvent_t event : released_) {
      if (event != nullptr) cudaEventDestroy(event);
    }
  }

  Status init(const MappedWindowSpec& spec) {
    if (spec.slots < 1 || spec.slot_bytes == 0) {
      return Status::invalid_argument("gather window of {} slots of {} bytes", spec.slots,
                                      spec.slot_bytes);
    }
    DeviceGuard guard;
    ZRT_RETURN_IF_ERROR(guard.enter(device_));
    ZRT_RETURN_IF_ERROR(load_vmm_api(&api_));
    prop_.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop_.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop_.location.id = device_;
    access_.location = prop_.location;
    access_.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    size_t granule = 0;
    ZRT_RETURN_IF_ERROR(check(api_.granularity(&granule, &prop_, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
                              "cuMemGetAllocationGranularity"));
    stride_ = round_up(spec.slot_bytes, granule);
    const size_t slots_total = stride_ * static_cast<size_t>(spec.slots);
    ZRT_RETURN_IF_ERROR(check(api_.address_reserve(&slots_base_, slots_total, granule, 0, 0),
                              "cuMemAddressReserve (the slots)"));
    handles_.reserve(static_cast<size_t>(spec.slots));
    slot_mapped_.assign(static_cast<size_t>(spec.slots), 0);
    for (int s = 0; s < spec.slots; ++s) {
      CUmemGenericAllocationHandle handle = 0;
      ZRT_RETURN_IF_ERROR(check(api_.create(&handle, stride_, &prop_, 0), "cuMemCreate"));
      handles_.push_back(handle);
      ZRT_RETURN_IF_ERROR(check(api_.map(slot_va(s), stride_, 0, handle, 0), "cuMemMap (a slot)"));
      slot_mapped_[static_cast<size_t>(s)] = 1;
    }
    ZRT_RETURN_IF_ERROR(check(api_.set_access(slots_base_, slots_total, &access_, 1),
                              "cuMemSetAccess (the slots)"));
    // Zero once, as every arena is, so that no gather reads a page nobody wrote.
    ZRT_CUDA_RETURN_IF_ERROR(cudaMemset(slot_address(0), 0, slots_total));
    ZRT_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
    const size_t units = spec.unit_bytes.size();
    has_segment_.assign(units, 0);
    mapped_slot_.assign(units, -1);
    pending_.assign(units, 0);
    released_.assign(units, nullptr);
    unit_index_.assign(units, 0);
    size_t with_segment = 0;
    for (size_t u = 0; u < units; ++u) {
      if (spec.unit_bytes[u] > spec.slot_bytes) {
        return Status::invalid_argument("unit {} has {} bytes, more than a slot's {}", u,
                                        spec.unit_bytes[u], spec.slot_bytes);
      }
      if (spec.unit_bytes[u] == 0) continue;
      has_segment_[u] = 1;
      unit_index_[u] = with_segment++;
    }
    // A mapping covers a whole allocation, so every unit's range is a slot's size: virtual
    // address space only, of which a GPU has far more than memory.
    units_total_ = stride_ * with_segment;
    if (units_total_ > 0) {
      ZRT_RETURN_IF_ERROR(check(api_.address_reserve(&units_base_, units_total_, granule, 0, 0),
                                "cuMemAddressReserve (the units)"));
    }
    for (size_t u = 0; u < units; ++u) {
      if (!has_segment_[u]) continue;
      ZRT_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&released_[u], cudaEventDisableTiming));
    }
    return Status::ok();
  }

  char* slot_address(int slot) const override { return reinterpret_cast<char*>(slot_va(slot)); }
  char* unit_address(int unit) const override {
    return has_segment_[unit] ? reinterpret_cast<char*>(unit_va(unit)) : nullptr;
  }
  size_t committed_bytes() const override { return stride_ * handles_.size(); }

  Status map(int unit, int slot) override {
    if (!has_segment_[unit]) return Status::ok();
    DeviceGuard guard;
    ZRT_RETURN_IF_ERROR(guard.enter(device_));
    if (mapped_slot_[unit] == slot) {  // released and fetched again from the same slot
      pending_[unit] = 0;
      return Status::ok();
    }
    if (mapped_slot_[unit] >= 0) ZRT_RETURN_IF_ERROR(take_down(unit));
    ZRT_RETURN_IF_ERROR(check(api_.map(unit_va(unit), stride_, 0, handles_[slot], 0),
                              "cuMemMap (a slot at its unit's address)"));
    mapped_slot_[unit] = slot;
    return check(api_.set_access(unit_va(unit), stride_, &access_, 1),
                 "cuMemSetAccess (a unit's address)");
  }

  Status unmap(int unit) override {
    if (!has_segment_[unit] || mapped_slot_[unit] < 0) return Status::ok();
    DeviceGuard guard;
    ZRT_RETURN_IF_ERROR(guard.enter(device_));
    ZRT_CUDA_RETURN_IF_ERROR(cudaEventRecord(released_[unit], cudaStreamLegacy));
    pending_[unit] = 1;
    return Status::ok();
  }

  Status prepare_gather(int slot) override {
    for (size_t u = 0; u < mapped_slot_.size(); ++u) {
      if (mapped_slot_[u] != slot) continue;
      if (!pending_[u]) {
        return Status(ZRT_INTERNAL_ERROR,
                      fmt::format("gather into slot {} while unit {} is mapped there", slot, u));
      }
      DeviceGuard guard;
      ZRT_RETURN_IF_ERROR(guard.enter(device_));
      ZRT_RETURN_IF_ERROR(take_down(static_cast<int>(u)));
    }
    return Status::ok();
  }

 private:
  CUdeviceptr slot_va(int slot) const { return slots_base_ + static_cast<size_t>(slot) * stride_; }
  CUdeviceptr unit_va(int unit) const {
    return units_base_ + unit_index_[static_cast<size_t>(unit)] * stride_;
  }

  Status check(CUresult result, const char* what) const {
    if (result == CUDA_SUCCESS) return Status::ok();
    const char* name = "an unknown CUresult";
    if (api_.error_name != nullptr) api_.error_name(result, &name);
    const zrt_status_t code = result == CUDA_ERROR_OUT_OF_MEMORY   ? ZRT_OUT_OF_MEMORY
                              : result == CUDA_ERROR_NOT_SUPPORTED ? ZRT_UNSUPPORTED
                                                                   : ZRT_SYSTEM_ERROR;
    return Status::error(code, "gather window on device {}: {}: {}", device_, what, name);
  }

  // Unmaps a released unit once the framework's kernels queued before its release are done.
  Status take_down(int unit) {
    cudaEvent_t event = released_[unit];
    ZRT_RETURN_IF_ERROR(
        poll_until(timeout_ms_, "the kernels reading a released unit", [event]() -> Status {
          const cudaError_t result = cudaEventQuery(event);
          if (result == cudaErrorNotReady) {
            return Status(ZRT_IN_PROGRESS, "not reached");
          }
          return cuda_status(result, "cudaEventQuery");
        }));
    ZRT_RETURN_IF_ERROR(check(api_.unmap(unit_va(unit), stride_), "cuMemUnmap (a unit)"));
    mapped_slot_[unit] = -1;
    pending_[unit] = 0;
    return Status::ok();
  }

  const int device_;
  const int64_t timeout_ms_;
  VmmApi api_;
  CUmemAllocationProp prop_{};
  CUmemAccessDesc access_{};
  size_t stride_ = 0;  // a slot's bytes rounded up to the granularity; every unit's range too
  CUdeviceptr slots_base_ = 0;
  std::vector<CUmemGenericAllocationHandle> handles_;  // per slot
  std::vector<uint8_t> slot_mapped_;
  CUdeviceptr units_base_ = 0;
  size_t units_total_ = 0;
  std::vector<uint8_t> has_segment_;
  std::vector<size_t> unit_index_;  // a unit's range among those with a segment
  std::vector<int> mapped_slot_;    // per unit: the slot its range shows, or -1
  std::vector<uint8_t> pending_;    // released, its range still mapped until take_down
  std::vector<cudaEvent_t> released_;
};

}  // namespace

Status create_device_mapped_window(int device, int64_t timeout_ms, const MappedWindowSpec& spec,
                                   std::unique_ptr<MappedWindow>* window) {
  auto made = std::make_unique<DeviceMappedWindow>(device, timeout_ms);
  ZRT_RETURN_IF_ERROR(made->init(spec));
  *window = std::move(made);
  return Status::ok();
}

}  // namespace zrt
