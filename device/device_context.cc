#include "device/device_context.h"

#include <cstring>
#include <vector>

#include "lib/core/log.h"
#include "device/cuda_event.h"
#include "device/cuda_status.h"
#include "device/cuda_stream.h"
#include "device/device_arena.h"
#include "device/device_element_ops.h"
#include "device/device_mapped_window.h"
#include "device/device_probe.h"
#include "device/nccl_comm.h"

namespace zrt {
namespace {

// Scratch for internal device work (the barrier's all-reduce word).
constexpr size_t kScratchBytes = 4096;

class NcclDeviceContext final : public DeviceContext {
 public:
  static Status make(std::unique_ptr<NcclComm> nccl, std::shared_ptr<DeviceContext>* context) {
    std::shared_ptr<DeviceArena> scratch;
    {
      std::unique_ptr<DeviceArena> arena;
      ZRT_RETURN_IF_ERROR(DeviceArena::create(nccl->device(), kScratchBytes,
                                              DeviceArena::Source::kCudaMalloc, &arena));
      scratch = std::move(arena);
    }
    auto made = std::make_shared<NcclDeviceContext>();
    made->resources_.barrier_scratch = nullptr;
    ZRT_RETURN_IF_ERROR(scratch->allocate(sizeof(int), 256, &made->resources_.barrier_scratch));
    made->resources_.scratch = std::move(scratch);
    made->resources_.nccl = std::move(nccl);
    *context = std::move(made);
    return Status::ok();
  }

  int device() const override { return resources_.nccl->device(); }
  int rank() const override { return resources_.nccl->rank(); }
  int size() const override { return resources_.nccl->size(); }

  Status create_stream(ProgressEngine& engine, int index, void* cuda_stream, bool wrap_external,
                       std::unique_ptr<Stream>* stream) override {
    ZRT_RETURN_IF_ERROR(resources_.nccl->health());
    std::unique_ptr<CudaStream> made;
    ZRT_RETURN_IF_ERROR(CudaStream::create(
        resources_, engine, index, static_cast<cudaStream_t>(cuda_stream), wrap_external, &made));
    *stream = std::move(made);
    return Status::ok();
  }

  Status create_event(ProgressEngine& engine, std::unique_ptr<Event>* event) override {
    std::unique_ptr<CudaEvent> made;
    ZRT_RETURN_IF_ERROR(
        CudaEvent::create(device(), resources_.nccl->options().timeout_ms, engine, &made));
    *event = std::move(made);
    return Status::ok();
  }

  Status create_arena_backend(std::unique_ptr<ArenaBackend>* backend) override {
    return create_device_arena_backend(device(), backend);
  }

  Status create_element_ops(std::unique_ptr<ElementOps>* ops) override {
    return create_device_element_ops(device(), ops);
  }

  Status create_pinned_host_backend(std::unique_ptr<ArenaBackend>* backend) override {
    return create_pinned_host_arena_backend(device(), backend);
  }

  Status create_mapped_window(const MappedWindowSpec& spec,
                              std::unique_ptr<MappedWindow>* window) override {
    return create_device_mapped_window(device(), resources_.nccl->options().timeout_ms, spec,
                                       window);
  }

  Status split(int color, int key, const DeviceContextOptions& child_options,
               std::shared_ptr<DeviceContext>* child) override {
    std::unique_ptr<NcclComm> comm;
    ZRT_RETURN_IF_ERROR(resources_.nccl->split(color, key, child_options.timeout_ms, &comm));
    if (comm == nullptr) return Status::ok();
    if (comm->rank() != child_options.rank || comm->size() != child_options.size) {
      return Status(
          ZRT_INTERNAL_ERROR,
          fmt::format("ncclCommSplit gave rank {} of {}, the host split rank {} of {}",
                      comm->rank(), comm->size(), child_options.rank, child_options.size));
    }
    return make(std::move(comm), child);
  }

  Status error() override { return resources_.nccl->health(); }
  void abort(const Status& reason) override { resources_.nccl->abort(reason); }

 private:
  CudaStreamResources resources_;
};

// What each rank contributes to the set-up all-gather.
struct SetupRecord {
  int32_t ready = 0;  // 1 = this rank has a device and (rank 0) an id
  int32_t device = -1;
  char reason[120] = {};  // why not ready (truncated)
  char id[kNcclUniqueIdBytes] = {};
};

Status pick_device(const DeviceContextOptions& options, int* device) {
  int count = 0;
  ZRT_RETURN_IF_ERROR(cuda_device_count(&count));
  if (options.device_from_local_rank) {
    *device = options.local_rank % count;
    return cuda_status(cudaSetDevice(*device), "cudaSetDevice(local rank)");
  }
  return cuda_status(cudaGetDevice(device), "cudaGetDevice");
}

}  // namespace

Status create_device_context(const DeviceContextOptions& options, const HostAllgather& allgather,
                             std::shared_ptr<DeviceContext>* context) {
  if (options.size < 1 || options.rank < 0 || options.rank >= options.size) {
    return Status::invalid_argument("rank {} / size {} out of range", options.rank, options.size);
  }
  SetupRecord mine;
  int device = -1;
  Status local = pick_device(options, &device);
  if (local.is_ok() && options.rank == 0) {
    NcclUniqueIdBytes id{};
    local = nccl_unique_id(&id);
    if (local.is_ok()) std::memcpy(mine.id, id.data(), kNcclUniqueIdBytes);
  }
  mine.ready = local.is_ok() ? 1 : 0;
  mine.device = device;
  if (!local.is_ok()) {
    std::strncpy(mine.reason, local.message().c_str(), sizeof(mine.reason) - 1);
  }

  // Every rank takes part even when it already failed, so that no peer is left waiting.
  std::vector<SetupRecord> all(static_cast<size_t>(options.size));
  ZRT_RETURN_IF_ERROR(allgather(&mine, all.data(), sizeof(SetupRecord))
                          .with_context("exchanging the NCCL unique id"));
  if (!local.is_ok()) return local;
  for (int r = 0; r < options.size; ++r) {
    if (all[static_cast<size_t>(r)].ready == 0) {
      return Status::error(ZRT_REMOTE_ERROR, "rank {} cannot use CUDA: {}", r,
                           all[static_cast<size_t>(r)].reason);
    }
  }

  NcclUniqueIdBytes id{};
  std::memcpy(id.data(), all[0].id, kNcclUniqueIdBytes);
  NcclCommOptions nccl_options;
  nccl_options.rank = options.rank;
  nccl_options.size = options.size;
  nccl_options.device = device;
  nccl_options.timeout_ms = options.timeout_ms;
  nccl_options.name = options.name;
  std::unique_ptr<NcclComm> nccl;
  ZRT_RETURN_IF_ERROR(NcclComm::init(id, nccl_options, &nccl));
  ZRT_LOG_INFO("'{}' rank {} of {}: NCCL on CUDA device {}", options.name, options.rank,
               options.size, device);
  return NcclDeviceContext::make(std::move(nccl), context);
}

}  // namespace zrt
