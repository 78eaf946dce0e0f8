// The C API of the fused optimizers: the pool handle, the config struct's ABI (widened to a
// whole struct with the kind's defaults before kernels/optim sees it), and the four
// zrt_optimizer_fn entry points over zrt::optim::fused_step.
#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstring>
#include <memory>

#include "zero/api/api_common.h"
#include "zero/api/optimizer_callback.h"
#include "zero/api/struct_abi.h"
#include "lib/core/settings.h"
#include "kernels/optim/fused_step.h"
#include "kernels/optim/optim_dispatch.h"
#include "kernels/optim/thread_pool.h"

namespace {

constexpr uint32_t kPoolMagic = 0x7a724f50;
constexpr uint32_t kDeadPoolMagic = 0xdeadbeef;

}  // namespace

// Owns the threads and the kernel table chosen when it was made; `busy` refuses a second call
// while one runs.
struct zrt_optimizer_pool {
  uint32_t magic = kPoolMagic;
  std::unique_ptr<zrt::optim::ThreadPool> threads;
  const zrt::optim::KernelTable* table = nullptr;
  std::atomic<bool> busy{false};
};

namespace {

using zrt::Status;
using zrt::optim::Kind;

Status check_pool(const zrt_optimizer_pool* pool, const char* arg) {
  if (pool == nullptr) return Status::invalid_argument("{} is NULL", arg);
  if (pool->magic != kPoolMagic) {
    return Status::invalid_argument("{} is not a live zrt_optimizer_pool_t", arg);
  }
  return Status::ok();
}

// The caller's config over the kind's defaults, for the fields its size covers.
Status widen_config(Kind kind, const void* user_data, zrt_optimizer_config_t* whole) {
  if (user_data == nullptr) {
    return Status::invalid_argument(
        "config (the user_data of zrt_partition_step) is NULL; pass a zrt_optimizer_config_t*");
  }
  const auto* config = static_cast<const zrt_optimizer_config_t*>(user_data);
  ZRT_RETURN_IF_ERROR(
      zrt::api::check_input_size(config, "config->size", zrt::api::kConfigHeaderEnd,
                                 "ZRT_OPTIMIZER_CONFIG_INIT or zrt_optimizer_config_init"));
  if (config->magic != ZRT_CONFIG_MAGIC) {
    return Status::invalid_argument(
        "config->magic is {:#x}, not ZRT_CONFIG_MAGIC; initialise it with "
        "ZRT_OPTIMIZER_CONFIG_INIT or zrt_optimizer_config_init",
        config->magic);
  }
  *whole = zrt::optim::default_config(kind);
  std::memcpy(static_cast<void*>(whole), config, zrt::api::struct_size(config));
  if (static_cast<int>(whole->kind) != static_cast<int>(kind)) {
    return Status::invalid_argument(
        "config->kind is {}, but this is zrt_optimizer_{}: pass the function of the config's "
        "kind",
        static_cast<int>(whole->kind), zrt::optim::kind_name(kind));
  }
  return Status::ok();
}

// The framework's args (any size from the first version's on) as a whole struct.
Status widen_args(const zrt_optimizer_args_t* args, zrt_optimizer_args_t* whole) {
  if (args == nullptr) return Status::invalid_argument("args is NULL");
  const size_t size = zrt::api::struct_size(args);
  if (!ZRT_API_COVERS(size, zrt_optimizer_args_t, step)) {
    return Status::invalid_argument("args->size is {}; it must cover step (at least {} bytes)",
                                    size, offsetof(zrt_optimizer_args_t, step) + sizeof(int64_t));
  }
  *whole = zrt_optimizer_args_t{};
  std::memcpy(static_cast<void*>(whole), args, std::min(size, sizeof(zrt_optimizer_args_t)));
  return Status::ok();
}

Status run_optimizer(Kind kind, const zrt_optimizer_args_t* caller_args, void* user_data) {
  zrt_optimizer_config_t config;
  ZRT_RETURN_IF_ERROR(widen_config(kind, user_data, &config));
  zrt_optimizer_args_t args;
  ZRT_RETURN_IF_ERROR(widen_args(caller_args, &args));
  zrt_optimizer_pool* pool = config.pool;
  if (pool == nullptr) {
    return zrt::optim::fused_step(kind, config, args, zrt::optim::default_optim_table(), nullptr);
  }
  ZRT_RETURN_IF_ERROR(check_pool(pool, "config->pool"));
  if (pool->busy.exchange(true)) {
    return Status::invalid_usage(
        "config->pool is running another optimizer call; a pool serves one call at a time");
  }
  // Released however the call ends (an allocation failure throws through here).
  struct Release {
    std::atomic<bool>& busy;
    ~Release() { busy.store(false); }
  } release{pool->busy};
  return zrt::optim::fused_step(kind, config, args, *pool->table, pool->threads.get());
}

}  // namespace

namespace zrt::api {

StepTransaction::Callback optimizer_callback(zrt_optimizer_fn fn, void* user_data) {
  StepTransaction::Callback callback;
  callback.fn = fn;
  callback.user_data = user_data;
  Kind kind;
  if (fn == zrt_optimizer_adamw) {
    kind = Kind::kAdamW;
  } else if (fn == zrt_optimizer_adam) {
    kind = Kind::kAdam;
  } else if (fn == zrt_optimizer_sgd) {
    kind = Kind::kSgd;
  } else if (fn == zrt_optimizer_lion) {
    kind = Kind::kLion;
  } else {
    return callback;
  }
  // fused_step checks config, arguments and outputs before its first write.
  callback.writes_only_on_success = true;
  zrt_optimizer_config_t config;
  callback.ready = widen_config(kind, user_data, &config);
  if (callback.ready.is_ok()) callback.ready = zrt::optim::check_config(kind, config);
  if (callback.ready.is_ok() && config.pool != nullptr) {
    callback.ready = check_pool(config.pool, "config->pool");
  }
  if (!callback.ready.is_ok()) {
    callback.ready = callback.ready.with_context(
        fmt::format("zrt_optimizer_{}'s config", zrt::optim::kind_name(kind)));
  }
  return callback;
}

}  // namespace zrt::api

extern "C" {

zrt_status_t zrt_optimizer_config_init(zrt_optimizer_config_t* config, size_t size,
                                       zrt_optimizer_kind_t kind) {
  ZRT_API_BODY("zrt_optimizer_config_init", {
    const int k = static_cast<int>(kind);
    if (k < 0 || k >= zrt::optim::kKindCount) {
      return Status::invalid_argument("kind is {}; expected a zrt_optimizer_kind_t (0 to {})", k,
                                      zrt::optim::kKindCount - 1);
    }
    return zrt::api::init_prefix(config, size, zrt::optim::default_config(static_cast<Kind>(k)),
                                 zrt::api::kConfigHeaderEnd, "config");
  });
}

zrt_status_t zrt_optimizer_pool_create(int threads, zrt_optimizer_pool_t* pool) {
  ZRT_API_BODY("zrt_optimizer_pool_create", {
    ZRT_RETURN_IF_ERROR(zrt::api::check_not_null(pool, "pool"));
    if (threads < 0 || threads > zrt::optim::kMaxPoolThreads) {
      return Status::invalid_argument(
          "threads is {}; expected 0 (one per CPU of the affinity "
          "mask) to {}",
          threads, zrt::optim::kMaxPoolThreads);
    }
    // Everything that can be refused is checked before a thread starts.
    zrt::Settings settings;
    ZRT_RETURN_IF_ERROR(zrt::Settings::load(&settings));
    const zrt::optim::KernelTable* table = nullptr;
    ZRT_RETURN_IF_ERROR(zrt::optim::choose_optim_table(settings, &table));
    const int count = threads == 0 ? zrt::optim::affinity_cpu_count() : threads;
    auto made = std::make_unique<zrt_optimizer_pool>();
    made->table = table;
    ZRT_RETURN_IF_ERROR(zrt::optim::ThreadPool::create(count, &made->threads));
    *pool = made.release();
    return Status::ok();
  });
}

zrt_status_t zrt_optimizer_pool_threads(zrt_optimizer_pool_t pool, int* threads) {
  ZRT_API_BODY("zrt_optimizer_pool_threads", {
    ZRT_RETURN_IF_ERROR(check_pool(pool, "pool"));
    ZRT_RETURN_IF_ERROR(zrt::api::check_not_null(threads, "threads"));
    *threads = pool->threads->threads();
    return Status::ok();
  });
}

zrt_status_t zrt_optimizer_pool_destroy(zrt_optimizer_pool_t pool) {
  ZRT_API_BODY("zrt_optimizer_pool_destroy", {
    if (pool == nullptr) return Status::ok();
    ZRT_RETURN_IF_ERROR(check_pool(pool, "pool"));
    if (pool->busy.load()) {
      return Status::invalid_usage("pool is running an optimizer call; destroy it after");
    }
    pool->magic = kDeadPoolMagic;
    delete pool;
    return Status::ok();
  });
}

zrt_status_t zrt_optimizer_adamw(const zrt_optimizer_args_t* args, void* config) {
  ZRT_API_BODY("zrt_optimizer_adamw", { return run_optimizer(Kind::kAdamW, args, config); });
}

zrt_status_t zrt_optimizer_adam(const zrt_optimizer_args_t* args, void* config) {
  ZRT_API_BODY("zrt_optimizer_adam", { return run_optimizer(Kind::kAdam, args, config); });
}

zrt_status_t zrt_optimizer_sgd(const zrt_optimizer_args_t* args, void* config) {
  ZRT_API_BODY("zrt_optimizer_sgd", { return run_optimizer(Kind::kSgd, args, config); });
}

zrt_status_t zrt_optimizer_lion(const zrt_optimizer_args_t* args, void* config) {
  ZRT_API_BODY("zrt_optimizer_lion", { return run_optimizer(Kind::kLion, args, config); });
}

}  // extern "C"
