// The C API of the partition managers: argument checks and handle plumbing over
// zrt::PartitionManager (zero/partition).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "zero/api/api_common.h"
#include "zero/api/optimizer_callback.h"
#include "zero/api/partition_handle.h"
#include "zero/api/partition_trace.h"
#include "zero/api/struct_abi.h"
#include "zero/checkpoint/directory_lock.h"
#include "zero/partition/config.h"
#include "zero/partition/memory_model.h"
#include "zero/partition/partition_manager.h"

namespace {

zrt::Status check_pm(const zrt_partition* pm) {
  return zrt::api::check_partition_handle(pm);
}

// The partition config's fields beyond the caller's size are defaulted by zero/partition, which
// reads them field by field; here only the bounds of the size.
zrt::Status check_config(const zrt_partition_config_t* config) {
  if (config == nullptr) return zrt::Status::ok();
  return zrt::api::check_input_size(config, "config->size", zrt::api::kConfigHeaderEnd,
                                    "ZRT_PARTITION_CONFIG_INIT or zrt_partition_config_init");
}

}  // namespace

extern "C" {

zrt_status_t zrt_partition_config_init(zrt_partition_config_t* config, size_t size) {
  ZRT_API_BODY("zrt_partition_config_init", {
    const zrt_partition_config_t defaults = ZRT_PARTITION_CONFIG_INIT;
    return zrt::api::init_prefix(config, size, defaults, zrt::api::kConfigHeaderEnd, "config");
  });
}

zrt_status_t zrt_partition_config_load(const char* path, zrt_partition_config_t* config) {
  ZRT_API_BODY("zrt_partition_config_load", {
    ZRT_RETURN_IF_ERROR(zrt::api::check_not_null(path, "path"));
    ZRT_RETURN_IF_ERROR(zrt::api::check_not_null(config, "config"));
    ZRT_RETURN_IF_ERROR(check_config(config));
    zrt::PartitionOptions options;
    ZRT_RETURN_IF_ERROR(zrt::partition_options_from_config(config, &options));
    ZRT_RETURN_IF_ERROR(zrt::partition_options_load_json_file(path, &options));
    zrt_partition_config_t full = ZRT_PARTITION_CONFIG_INIT;
    zrt::partition_options_to_config(options, &full);
    zrt::api::write_prefix(full, config, zrt::api::kConfigHeaderEnd);
    return zrt::Status::ok();
  });
}

zrt_status_t zrt_partition_create(zrt_comm_t comm, const zrt_partition_config_t* config,
                                  zrt_partition_t* pm) {
  ZRT_API_BODY("zrt_partition_create", {
    ZRT_RETURN_IF_ERROR(zrt::api::check_comm(comm, "comm"));
    ZRT_RETURN_IF_ERROR(zrt::api::check_not_null(pm, "pm"));
    ZRT_RETURN_IF_ERROR(check_config(config));
    zrt::PartitionOptions options;
    ZRT_RETURN_IF_ERROR(zrt::partition_options_from_config(config, &options));
    // ZRT_MEM_CUDA: the communicator's NCCL side now (collective; a rank without a usable
    // device fails every rank with the CUDA runtime's reason), not halfway through finalize.
    std::shared_ptr<zrt::DeviceContext> device;
    if (options.mem_kind == ZRT_MEM_CUDA) {
      ZRT_RETURN_IF_ERROR(
          zrt::api::device_context_for(comm, &device)
              .with_context("config.mem_kind = ZRT_MEM_CUDA: partition buffers in device memory"));
    } else if (options.mem_kind != ZRT_MEM_HOST) {
      return zrt::Status(ZRT_UNSUPPORTED,
                         "config.mem_kind: only ZRT_MEM_HOST and ZRT_MEM_CUDA are supported");
    }
    auto handle = std::make_unique<zrt_partition>();
    handle->comm = comm;
    handle->impl = std::make_unique<zrt::PartitionManager>(*comm->impl, options);
    handle->impl->set_device_context(std::move(device));
    *pm = handle.release();
    return zrt::Status::ok();
  });
}

zrt_status_t zrt_partition_destroy(zrt_partition_t pm) {
  ZRT_API_BODY("zrt_partition_destroy", {
    if (pm == nullptr) return zrt::Status::ok();
    ZRT_RETURN_IF_ERROR(check_pm(pm));
    zrt::Status status = pm->impl->destroy();
    // Its checkpoint folders are free for other jobs again (zero/checkpoint/directory_lock.h).
    zrt::release_checkpoint_directory_locks(pm->impl.get());
    pm->impl.reset();
    pm->magic = kDeadMagic;
    delete pm;
    return status;
  });
}

zrt_status_t zrt_partition_add_unit(zrt_partition_t pm, const char* name, int* unit) {
  ZRT_API_BODY("zrt_partition_add_unit", {
    ZRT_RETURN_IF_ERROR(check_pm(pm));
    ZRT_RETURN_IF_ERROR(zrt::api::check_not_null(unit, "unit"));
    return pm->impl->add_unit(name != nullptr ? name : "", unit);
  });
}

zrt_status_t zrt_partition_add_param(zrt_partition_t pm, int unit, const char* name, size_t numel,
                                     uint32_t flags, int* param) {
  ZRT_API_BODY("zrt_partition_add_param", {
    ZRT_RETURN_IF_ERROR(check_pm(pm));
    ZRT_RETURN_IF_ERROR(zrt::api::check_not_null(param, "param"));
    return pm->impl->add_param(unit, name != nullptr ? name : "", numel, flags, param);
  });
}

zrt_status_t zrt_partition_add_param_shaped(zrt_partition_t pm, int unit, const char* name,
                                            int ndim, const int64_t* dims, zrt_dtype_t dtype,
                                            uint32_t flags, int* param) {
  ZRT_API_BODY("zrt_partition_add_param_shaped", {
    ZRT_RETURN_IF_ERROR(check_pm(pm));
    ZRT_RETURN_IF_ERROR(zrt::api::check_not_null(param, "param"));
    return pm->impl->add_param_shaped(unit, name != nullptr ? name : "", ndim, dims, dtype, flags,
                                      param);
  });
}

zrt_status_t zrt_partition_finalize(zrt_partition_t pm) {
  ZRT_API_BODY("zrt_partition_finalize", {
    ZRT_RETURN_IF_ERROR(check_pm(pm));
    return pm->impl->finalize();
  });
}

zrt_status_t zrt_partition_load_param(zrt_partition_t pm, int param, const void* values,
                                      zrt_dtype_t dtype) {
  ZRT_API_BODY("zrt_partition_load_param", {
    ZRT_RETURN_IF_ERROR(check_pm(pm));
    return pm->impl->load_param(param, values, dtype);
  });
}

zrt_status_t zrt_partition_set_optimizer_slots(zrt_partition_t pm, int optimizer_slots) {
  ZRT_API_BODY("zrt_partition_set_optimizer_slots", {
    ZRT_RETURN_IF_ERROR(check_pm(pm));
    return pm->impl->set_optimizer_slots(optimizer_slots);
  });
}

zrt_status_t zrt_partition_param_info(zrt_partition_t pm, int param, zrt_param_info_t* info) {
  ZRT_API_BODY("zrt_partition_param_info", {
    ZRT_RETURN_IF_ERROR(check_pm(pm));
    ZRT_RETURN_IF_ERROR(zrt::api::check_query_size(info, "info"));
    zrt_param_info_t full{};
    full.size = sizeof(full);
    ZRT_RETURN_IF_ERROR(pm->impl->param_info(param, &full));
    zrt::api::write_prefix(full, info, zrt::api::kQueryHeaderEnd);
    return zrt::Status::ok();
  });
}

zrt_status_t zrt_partition_shard_pieces(zrt_partition_t pm, const zrt_shard_piece_t** pieces,
                                        size_t* count) {
  ZRT_API_BODY("zrt_partition_shard_pieces", {
    ZRT_RETURN_IF_ERROR(check_pm(pm));
    ZRT_RETURN_IF_ERROR(zrt::api::check_not_null(pieces, "pieces"));
    ZRT_RETURN_IF_ERROR(zrt::api::check_not_null(count, "count"));
    return pm->impl->shard_pieces(pieces, count);
  });
}

zrt_status_t zrt_partition_fetch(zrt_partition_t pm, int unit) {
  ZRT_API_BODY("zrt_partition_fetch", {
    ZRT_RETURN_IF_ERROR(check_pm(pm));
    return zrt::api::traced_partition_call(pm, "fetch", unit,
                                           [&] { return pm->impl->fetch(unit); });
  });
}

zrt_status_t zrt_partition_release(zrt_partition_t pm, int unit) {
  ZRT_API_BODY("zrt_partition_release", {
    ZRT_RETURN_IF_ERROR(check_pm(pm));
    return zrt::api::traced_partition_call(pm, "release", unit,
                                           [&] { return pm->impl->release(unit); });
  });
}

zrt_status_t zrt_partition_param_data(zrt_partition_t pm, int param, void** data) {
  ZRT_API_BODY("zrt_partition_param_data", {
    ZRT_RETURN_IF_ERROR(check_pm(pm));
    ZRT_RETURN_IF_ERROR(zrt::api::check_not_null(data, "data"));
    return pm->impl->param_data(param, data);
  });
}

zrt_status_t zrt_partition_wait_params(zrt_partition_t pm) {
  ZRT_API_BODY("zrt_partition_wait_params", {
    ZRT_RETURN_IF_ERROR(check_pm(pm));
    return pm->impl->wait_params();
  });
}

zrt_status_t zrt_partition_grad_data(zrt_partition_t pm, int param, void** grad) {
  ZRT_API_BODY("zrt_partition_grad_data", {
    ZRT_RETURN_IF_ERROR(check_pm(pm));
    ZRT_RETURN_IF_ERROR(zrt::api::check_not_null(grad, "grad"));
    return pm->impl->grad_data(param, grad);
  });
}

zrt_status_t zrt_partition_set_sync(zrt_partition_t pm, int sync) {
  ZRT_API_BODY("zrt_partition_set_sync", {
    ZRT_RETURN_IF_ERROR(check_pm(pm));
    return pm->impl->set_sync(sync != 0);
  });
}

zrt_status_t zrt_partition_grad_ready(zrt_partition_t pm, int unit) {
  ZRT_API_BODY("zrt_partition_grad_ready", {
    ZRT_RETURN_IF_ERROR(check_pm(pm));
    return zrt::api::traced_partition_call(pm, "grad_ready", unit,
                                           [&] { return pm->impl->grad_ready(unit); });
  });
}

zrt_status_t zrt_partition_grad_norm(zrt_partition_t pm, double* norm, int* has_nonfinite) {
  ZRT_API_BODY("zrt_partition_grad_norm", {
    ZRT_RETURN_IF_ERROR(check_pm(pm));
    bool nonfinite = false;
    double value = 0;
    ZRT_RETURN_IF_ERROR(zrt::api::traced_partition_call(pm, "grad_norm", -1, [&] {
      return pm->impl->grad_norm(norm != nullptr ? &value : nullptr,
                                 has_nonfinite != nullptr ? &nonfinite : nullptr);
    }));
    if (norm != nullptr) *norm = value;
    if (has_nonfinite != nullptr) *has_nonfinite = nonfinite ? 1 : 0;
    return zrt::Status::ok();
  });
}

zrt_status_t zrt_partition_step(zrt_partition_t pm, zrt_optimizer_fn optimizer, void* user_data) {
  ZRT_API_BODY("zrt_partition_step", {
    ZRT_RETURN_IF_ERROR(check_pm(pm));
    return zrt::api::traced_partition_call(pm, "step", -1, [&] {
      return pm->impl->step(zrt::api::optimizer_callback(optimizer, user_data));
    });
  });
}

zrt_status_t zrt_partition_step_in_backward(zrt_partition_t pm, zrt_optimizer_fn optimizer,
                                            void* user_data) {
  ZRT_API_BODY("zrt_partition_step_in_backward", {
    ZRT_RETURN_IF_ERROR(check_pm(pm));
    return zrt::api::traced_partition_call(pm, "step_in_backward", -1, [&] {
      return pm->impl->step_in_backward(optimizer, user_data);
    });
  });
}

zrt_status_t zrt_partition_memory(zrt_partition_t pm, zrt_partition_memory_t* memory) {
  ZRT_API_BODY("zrt_partition_memory", {
    ZRT_RETURN_IF_ERROR(check_pm(pm));
    ZRT_RETURN_IF_ERROR(zrt::api::check_query_size(memory, "memory"));
    zrt::MemoryFigures figures;
    ZRT_RETURN_IF_ERROR(pm->impl->memory(&figures));
    zrt_partition_memory_t full{};
    full.size = sizeof(full);
    zrt::memory_figures_to_c(figures, &full);
    zrt::api::write_prefix(full, memory, zrt::api::kQueryHeaderEnd);
    return zrt::Status::ok();
  });
}

zrt_status_t zrt_partition_stats(zrt_partition_t pm, zrt_partition_stats_t* stats) {
  ZRT_API_BODY("zrt_partition_stats", {
    ZRT_RETURN_IF_ERROR(check_pm(pm));
    ZRT_RETURN_IF_ERROR(zrt::api::check_query_size(stats, "stats"));
    zrt::WindowStats s;
    ZRT_RETURN_IF_ERROR(pm->impl->window_stats(&s));
    zrt_partition_stats_t full{};
    full.size = sizeof(full);
    full.fetches = s.fetches;
    full.gathers = s.gathers;
    full.prefetches = s.prefetches;
    full.prefetch_hits = s.prefetch_hits;
    full.evictions = s.evictions;
    full.max_gathered_units = s.max_gathered_units;
    full.max_gathered_bytes = s.max_gathered_bytes;
    full.order_recorded = s.order_recorded ? 1 : 0;
    full.order_invalidated = s.order_invalidated ? 1 : 0;
    zrt::api::write_prefix(full, stats, zrt::api::kQueryHeaderEnd);
    return zrt::Status::ok();
  });
}

zrt_status_t zrt_partition_traffic(zrt_partition_t pm, zrt_partition_traffic_t* traffic) {
  ZRT_API_BODY("zrt_partition_traffic", {
    ZRT_RETURN_IF_ERROR(check_pm(pm));
    ZRT_RETURN_IF_ERROR(zrt::api::check_query_size(traffic, "traffic"));
    zrt_partition_traffic_t full{};
    full.size = sizeof(full);
    ZRT_RETURN_IF_ERROR(pm->impl->traffic(&full));
    zrt::api::write_prefix(full, traffic, zrt::api::kQueryHeaderEnd);
    return zrt::Status::ok();
  });
}

}  // extern "C"
