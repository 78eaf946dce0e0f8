// zrt_comm_*, zrt_op_* and zrt_comm_stats*: the C layer over zrt::Communicator. A zrt_comm
// handle owns the communicator and every stream/event handle made on it.
#include <cstddef>
#include <memory>
#include <mutex>

#include "zero/api/api_common.h"
#include "zero/api/struct_abi.h"
#include "lib/bootstrap/bootstrap.h"
#include "zero/comm/communicator.h"

using zrt::Status;
using zrt::api::check_comm;
using zrt::api::check_not_null;

namespace {

// Wraps a live communicator in a new handle whose default stream is the engine's.
zrt_comm* make_handle(std::unique_ptr<zrt::Communicator> impl) {
  auto* handle = new zrt_comm();
  handle->impl = std::move(impl);
  handle->default_stream.comm = handle;
  handle->default_stream.impl = &handle->impl->default_stream();
  return handle;
}

// The caller's config widened to a whole struct, so zero/comm never meets a short one; *use is
// NULL (the defaults) when config is.
Status read_comm_config(const zrt_comm_config_t* config, zrt_comm_config_t* full,
                        const zrt_comm_config_t** use) {
  *use = nullptr;
  if (config == nullptr) return Status::ok();
  ZRT_RETURN_IF_ERROR(zrt::api::check_input_size(config, "config->size", zrt::api::kConfigHeaderEnd,
                                                 "ZRT_COMM_CONFIG_INIT or zrt_comm_config_init"));
  const size_t size = config->size;
  *full = ZRT_COMM_CONFIG_INIT;
  full->magic = config->magic;
  full->version = config->version;
  if (ZRT_API_COVERS(size, zrt_comm_config_t, timeout_ms)) full->timeout_ms = config->timeout_ms;
  if (ZRT_API_COVERS(size, zrt_comm_config_t, name)) full->name = config->name;
  *use = full;
  return Status::ok();
}

// The caller's oob widened to a whole struct (absent fields keep ZRT_OOB_INIT's values).
Status read_oob(const zrt_oob_t* oob, zrt_oob_t* full) {
  ZRT_RETURN_IF_ERROR(check_not_null(oob, "oob"));
  ZRT_RETURN_IF_ERROR(zrt::api::check_input_size(oob, "oob->struct_size", zrt::api::kQueryHeaderEnd,
                                                 "ZRT_OOB_INIT or zrt_oob_init"));
  const size_t size = oob->struct_size;
  *full = ZRT_OOB_INIT;
  if (ZRT_API_COVERS(size, zrt_oob_t, allgather)) full->allgather = oob->allgather;
  if (ZRT_API_COVERS(size, zrt_oob_t, test)) full->test = oob->test;
  if (ZRT_API_COVERS(size, zrt_oob_t, free)) full->free = oob->free;
  if (ZRT_API_COVERS(size, zrt_oob_t, user_data)) full->user_data = oob->user_data;
  if (ZRT_API_COVERS(size, zrt_oob_t, rank)) full->rank = oob->rank;
  if (ZRT_API_COVERS(size, zrt_oob_t, size)) full->size = oob->size;
  if (ZRT_API_COVERS(size, zrt_oob_t, local_rank)) full->local_rank = oob->local_rank;
  if (ZRT_API_COVERS(size, zrt_oob_t, local_size)) full->local_size = oob->local_size;
  return Status::ok();
}

Status check_oob(const zrt_oob_t* oob) {
  ZRT_RETURN_IF_ERROR(
      check_not_null(reinterpret_cast<const void*>(oob->allgather), "oob->allgather"));
  ZRT_RETURN_IF_ERROR(check_not_null(reinterpret_cast<const void*>(oob->test), "oob->test"));
  ZRT_RETURN_IF_ERROR(check_not_null(reinterpret_cast<const void*>(oob->free), "oob->free"));
  if (oob->size < 1) return Status::invalid_argument("oob->size is {}; must be >= 1", oob->size);
  if (oob->rank < 0 || oob->rank >= oob->size) {
    return Status::invalid_argument("oob->rank {} is not in [0, oob->size = {})", oob->rank,
                                    oob->size);
  }
  if (oob->local_size != -1 && (oob->local_size < 1 || oob->local_size > oob->size)) {
    return Status::invalid_argument("oob->local_size {} is not -1 or in [1, {}]", oob->local_size,
                                    oob->size);
  }
  if (oob->local_rank != -1 &&
      (oob->local_rank < 0 || (oob->local_size != -1 && oob->local_rank >= oob->local_size))) {
    return Status::invalid_argument("oob->local_rank {} is not -1 or in [0, oob->local_size)",
                                    oob->local_rank);
  }
  if ((oob->local_rank == -1) != (oob->local_size == -1)) {
    return Status::invalid_argument(
        "oob->local_rank ({}) and oob->local_size ({}) must both be -1 or both be set",
        oob->local_rank, oob->local_size);
  }
  return Status::ok();
}

// Frees every stream and event handle of `comm` (waiting for their work), then the device side.
// Returns the first error.
Status free_handles(zrt_comm* comm) {
  Status first;
  auto keep_first = [&first](const Status& status) {
    if (first.is_ok() && !status.is_ok()) first = status;
  };
  std::vector<std::unique_ptr<zrt_stream>> streams;
  std::vector<std::unique_ptr<zrt_event>> events;
  {
    std::lock_guard<std::mutex> lock(comm->handles_mutex);
    streams.swap(comm->streams);
    events.swap(comm->events);
  }
  for (auto& event : events) {
    if (event->owned != nullptr) {
      event->owned.reset();
    } else if (event->impl != nullptr) {
      keep_first(comm->impl->engine().destroy_event(event->impl));
    }
    event->magic = kDeadMagic;
    event->impl = nullptr;
  }
  for (auto& stream : streams) {
    if (stream->owned != nullptr) {
      keep_first(stream->impl->synchronize());
      stream->owned.reset();
    } else if (stream->impl != nullptr) {
      keep_first(comm->impl->engine().destroy_stream(stream->impl));
    }
    stream->magic = kDeadMagic;
    stream->impl = nullptr;
  }
  comm->impl->release_device();
  return first;
}

}  // namespace

extern "C" {

zrt_status_t zrt_comm_config_init(zrt_comm_config_t* config, size_t size) {
  ZRT_API_BODY("zrt_comm_config_init", {
    const zrt_comm_config_t defaults = ZRT_COMM_CONFIG_INIT;
    return zrt::api::init_prefix(config, size, defaults, zrt::api::kConfigHeaderEnd, "config");
  });
}

zrt_status_t zrt_oob_init(zrt_oob_t* oob, size_t size) {
  ZRT_API_BODY("zrt_oob_init", {
    const zrt_oob_t defaults = ZRT_OOB_INIT;
    return zrt::api::init_prefix(oob, size, defaults, zrt::api::kQueryHeaderEnd, "oob");
  });
}

zrt_status_t zrt_comm_init_env(const zrt_comm_config_t* config, zrt_comm_t* comm) {
  ZRT_API_BODY("zrt_comm_init_env", {
    ZRT_RETURN_IF_ERROR(check_not_null(comm, "comm"));
    zrt_comm_config_t full;
    const zrt_comm_config_t* use = nullptr;
    ZRT_RETURN_IF_ERROR(read_comm_config(config, &full, &use));
    zrt::CommOptions options;
    ZRT_RETURN_IF_ERROR(zrt::resolve_comm_options(use, &options));
    zrt::EnvRanks ranks;
    ZRT_RETURN_IF_ERROR(zrt::read_env_ranks(options.settings.launcher(), &ranks));
    std::unique_ptr<zrt::Bootstrap> bootstrap;
    ZRT_RETURN_IF_ERROR(zrt::create_store_bootstrap(ranks, options.timeout_ms, &bootstrap));
    std::unique_ptr<zrt::Communicator> impl;
    ZRT_RETURN_IF_ERROR(zrt::Communicator::create(*bootstrap, options, &impl));
    *comm = make_handle(std::move(impl));
    return Status::ok();
  });
}

zrt_status_t zrt_comm_init_oob(const zrt_oob_t* oob, const zrt_comm_config_t* config,
                               zrt_comm_t* comm) {
  ZRT_API_BODY("zrt_comm_init_oob", {
    zrt_oob_t full_oob;
    ZRT_RETURN_IF_ERROR(read_oob(oob, &full_oob));
    ZRT_RETURN_IF_ERROR(check_oob(&full_oob));
    ZRT_RETURN_IF_ERROR(check_not_null(comm, "comm"));
    zrt_comm_config_t full_config;
    const zrt_comm_config_t* use = nullptr;
    ZRT_RETURN_IF_ERROR(read_comm_config(config, &full_config, &use));
    zrt::CommOptions options;
    ZRT_RETURN_IF_ERROR(zrt::resolve_comm_options(use, &options));
    std::unique_ptr<zrt::Bootstrap> bootstrap;
    ZRT_RETURN_IF_ERROR(zrt::create_oob_bootstrap(full_oob, options.timeout_ms, &bootstrap));
    std::unique_ptr<zrt::Communicator> impl;
    ZRT_RETURN_IF_ERROR(zrt::Communicator::create(*bootstrap, options, &impl));
    *comm = make_handle(std::move(impl));
    return Status::ok();
  });
}

zrt_status_t zrt_comm_rank(zrt_comm_t comm, int* rank) {
  ZRT_API_BODY("zrt_comm_rank", {
    ZRT_RETURN_IF_ERROR(check_comm(comm, "comm"));
    ZRT_RETURN_IF_ERROR(check_not_null(rank, "rank"));
    *rank = comm->impl->rank();
    return Status::ok();
  });
}

zrt_status_t zrt_comm_size(zrt_comm_t comm, int* size) {
  ZRT_API_BODY("zrt_comm_size", {
    ZRT_RETURN_IF_ERROR(check_comm(comm, "comm"));
    ZRT_RETURN_IF_ERROR(check_not_null(size, "size"));
    *size = comm->impl->size();
    return Status::ok();
  });
}

zrt_status_t zrt_comm_local_rank(zrt_comm_t comm, int* local_rank) {
  ZRT_API_BODY("zrt_comm_local_rank", {
    ZRT_RETURN_IF_ERROR(check_comm(comm, "comm"));
    ZRT_RETURN_IF_ERROR(check_not_null(local_rank, "local_rank"));
    *local_rank = comm->impl->local_rank();
    return Status::ok();
  });
}

zrt_status_t zrt_comm_local_size(zrt_comm_t comm, int* local_size) {
  ZRT_API_BODY("zrt_comm_local_size", {
    ZRT_RETURN_IF_ERROR(check_comm(comm, "comm"));
    ZRT_RETURN_IF_ERROR(check_not_null(local_size, "local_size"));
    *local_size = comm->impl->local_size();
    return Status::ok();
  });
}

zrt_status_t zrt_comm_split(zrt_comm_t comm, int color, int key, const zrt_comm_config_t* config,
                            zrt_comm_t* newcomm) {
  ZRT_API_BODY("zrt_comm_split", {
    ZRT_RETURN_IF_ERROR(check_comm(comm, "comm"));
    ZRT_RETURN_IF_ERROR(check_not_null(newcomm, "newcomm"));
    if (color < ZRT_SPLIT_NOCOLOR) {
      return Status::invalid_argument(
          "color {} is negative (only ZRT_SPLIT_NOCOLOR = -1 is allowed)", color);
    }
    zrt_comm_config_t full;
    const zrt_comm_config_t* use = nullptr;
    ZRT_RETURN_IF_ERROR(read_comm_config(config, &full, &use));
    zrt::CommOptions options = comm->impl->options();
    if (use != nullptr) ZRT_RETURN_IF_ERROR(zrt::resolve_comm_options(use, &options));
    std::unique_ptr<zrt::Communicator> impl;
    ZRT_RETURN_IF_ERROR(comm->impl->split(color, key, options, &impl));
    zrt_comm* child = impl != nullptr ? make_handle(std::move(impl)) : nullptr;
    // Collective over the parent on every rank, NOCOLOR ones included (child NULL there).
    Status status =
        comm->impl->split_device(color, key, child != nullptr ? child->impl.get() : nullptr);
    if (!status.is_ok()) {
      if (child != nullptr) {
        (void)free_handles(child);
        child->impl->abort(status);
        delete child;
      }
      return status;
    }
    *newcomm = child;
    return Status::ok();
  });
}

zrt_status_t zrt_comm_destroy(zrt_comm_t comm) {
  ZRT_API_BODY("zrt_comm_destroy", {
    if (comm == nullptr) return Status::ok();
    ZRT_RETURN_IF_ERROR(check_comm(comm, "comm"));
    Status first = free_handles(comm);
    Status status = comm->impl->destroy();
    if (first.is_ok()) first = status;
    comm->magic = kDeadMagic;
    comm->default_stream.magic = kDeadMagic;
    comm->default_stream.impl = nullptr;
    delete comm;
    return first;
  });
}

zrt_status_t zrt_comm_abort(zrt_comm_t comm) {
  ZRT_API_BODY("zrt_comm_abort", {
    ZRT_RETURN_IF_ERROR(check_comm(comm, "comm"));
    const Status reason(ZRT_REMOTE_ERROR, "communicator aborted");
    // The NCCL side too (Communicator::abort), or kernels waiting on a dead peer would keep the
    // device busy.
    comm->impl->abort(reason);
    return Status::ok();
  });
}

zrt_status_t zrt_comm_get_error(zrt_comm_t comm) {
  ZRT_API_BODY("zrt_comm_get_error", {
    ZRT_RETURN_IF_ERROR(check_comm(comm, "comm"));
    ZRT_RETURN_IF_ERROR(comm->impl->error());
    return comm->impl->device_error().with_context("the communicator's NCCL side");
  });
}

zrt_status_t zrt_op_create_premul_sum(zrt_comm_t comm, double scalar, zrt_op_t* op) {
  ZRT_API_BODY("zrt_op_create_premul_sum", {
    ZRT_RETURN_IF_ERROR(check_comm(comm, "comm"));
    ZRT_RETURN_IF_ERROR(check_not_null(op, "op"));
    return comm->impl->create_premul_op(scalar, op);
  });
}

zrt_status_t zrt_op_destroy(zrt_comm_t comm, zrt_op_t op) {
  ZRT_API_BODY("zrt_op_destroy", {
    ZRT_RETURN_IF_ERROR(check_comm(comm, "comm"));
    return comm->impl->destroy_op(op);
  });
}

zrt_status_t zrt_mem_alloc(zrt_comm_t comm, size_t bytes, void** buffer) {
  ZRT_API_BODY("zrt_mem_alloc", {
    ZRT_RETURN_IF_ERROR(check_comm(comm, "comm"));
    ZRT_RETURN_IF_ERROR(check_not_null(buffer, "buffer"));
    return comm->impl->user_memory().alloc(bytes, buffer);
  });
}

zrt_status_t zrt_mem_free(zrt_comm_t comm, void* buffer) {
  ZRT_API_BODY("zrt_mem_free", {
    ZRT_RETURN_IF_ERROR(check_comm(comm, "comm"));
    return comm->impl->user_memory().free(buffer);
  });
}

zrt_status_t zrt_mem_held(zrt_comm_t comm, size_t* bytes) {
  ZRT_API_BODY("zrt_mem_held", {
    ZRT_RETURN_IF_ERROR(check_comm(comm, "comm"));
    ZRT_RETURN_IF_ERROR(check_not_null(bytes, "bytes"));
    *bytes = comm->impl->user_memory().held();
    return Status::ok();
  });
}

zrt_status_t zrt_comm_stats(zrt_comm_t comm, zrt_comm_stats_t* stats) {
  ZRT_API_BODY("zrt_comm_stats", {
    ZRT_RETURN_IF_ERROR(check_comm(comm, "comm"));
    ZRT_RETURN_IF_ERROR(check_not_null(stats, "stats"));
    // Every version of the struct starts with size and `user`: a caller built against an older,
    // shorter one gets the prefix its size covers (struct_abi.h).
    if (!ZRT_API_COVERS(stats->size, zrt_comm_stats_t, user)) {
      return Status::invalid_argument(
          "stats->size is {}, expected at least {} (set it to sizeof(zrt_comm_stats_t))",
          stats->size, offsetof(zrt_comm_stats_t, user) + sizeof(zrt_coll_counters_t));
    }
    zrt_comm_stats_t full{};
    comm->impl->engine().counters().snapshot(&full);
    zrt::api::write_prefix(full, stats, zrt::api::kQueryHeaderEnd);
    return Status::ok();
  });
}

zrt_status_t zrt_comm_stats_reset(zrt_comm_t comm) {
  ZRT_API_BODY("zrt_comm_stats_reset", {
    ZRT_RETURN_IF_ERROR(check_comm(comm, "comm"));
    comm->impl->engine().counters().reset();
    return Status::ok();
  });
}

zrt_status_t zrt_comm_dump_trace(zrt_comm_t comm, const char* dir) {
  ZRT_API_BODY("zrt_comm_dump_trace", {
    ZRT_RETURN_IF_ERROR(check_comm(comm, "comm"));
    return comm->impl->engine().dump_trace(dir != nullptr ? dir : "", "zrt_comm_dump_trace",
                                           nullptr);
  });
}

}  // extern "C"
