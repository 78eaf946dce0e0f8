// The C API of sharded checkpoints: argument checks over zero/checkpoint.
#include <memory>
#include <string>

#include "zero/api/api_common.h"
#include "zero/api/partition_handle.h"
#include "zero/checkpoint/checkpoint.h"
#include "zero/partition/partition_manager.h"

namespace {

zrt::Status check_partition(const zrt_partition* pm) {
  return zrt::api::check_partition_handle(pm);
}

zrt::Status check_path(const char* path, const char* arg) {
  ZRT_RETURN_IF_ERROR(zrt::api::check_not_null(path, arg));
  if (*path == '\0') return zrt::Status::invalid_argument("{} is empty", arg);
  return zrt::Status::ok();
}

}  // namespace

extern "C" {

zrt_status_t zrt_partition_save(zrt_partition_t pm, const char* dir) {
  ZRT_API_BODY("zrt_partition_save", {
    ZRT_RETURN_IF_ERROR(check_partition(pm));
    ZRT_RETURN_IF_ERROR(check_path(dir, "dir"));
    return zrt::save_checkpoint(*pm->impl, dir);
  });
}

zrt_status_t zrt_partition_load(zrt_partition_t pm, const char* dir) {
  ZRT_API_BODY("zrt_partition_load", {
    ZRT_RETURN_IF_ERROR(check_partition(pm));
    ZRT_RETURN_IF_ERROR(check_path(dir, "dir"));
    return zrt::load_checkpoint(*pm->impl, dir);
  });
}

zrt_status_t zrt_partition_export_full(zrt_partition_t pm, const char* path, zrt_dtype_t dtype) {
  ZRT_API_BODY("zrt_partition_export_full", {
    ZRT_RETURN_IF_ERROR(check_partition(pm));
    ZRT_RETURN_IF_ERROR(check_path(path, "path"));
    return zrt::export_full(*pm->impl, path, dtype);
  });
}

zrt_status_t zrt_partition_get_step(zrt_partition_t pm, int64_t* step) {
  ZRT_API_BODY("zrt_partition_get_step", {
    ZRT_RETURN_IF_ERROR(check_partition(pm));
    ZRT_RETURN_IF_ERROR(zrt::api::check_not_null(step, "step"));
    if (!pm->impl->is_finalized()) {
      return zrt::Status::invalid_usage("call zrt_partition_finalize first");
    }
    *step = pm->impl->step_count();
    return zrt::Status::ok();
  });
}

}  // extern "C"
