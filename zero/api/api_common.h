// Helpers every C entry point uses: recording the per-thread last error, and checking handles
// and pointers with messages that name the function and the argument.
#pragma once

#include <exception>
#include <new>

#include "zero/api/handles.h"
#include "lib/core/status.h"
#include "zrt/zrt.h"

namespace zrt::api {

// Records `status` as this thread's last error (prefixed with the function name) and returns its
// code; clears the last error on success.
zrt_status_t finish(const char* function, const Status& status);
const char* last_error_cstr();

// Handle and pointer checks; each returns a Status whose message names `arg`.
Status check_comm(const zrt_comm* comm, const char* arg);
Status check_stream(const zrt_stream* stream, const char* arg);
Status check_event(const zrt_event* event, const char* arg);
Status check_not_null(const void* pointer, const char* arg);
// Makes the calling thread's log lines show comm's rank (every entry point that checks a live
// handle calls it, so a framework's training thread logs as "r3", not "r?").
void note_thread_rank(const zrt_comm* comm);

// The stream an entry point should use: the communicator's default stream for NULL; refuses a
// stream of another communicator.
Status resolve_stream(zrt_comm* comm, zrt_stream* stream, const char* arg, zrt::Stream** out);

// CUDA (c_api_cuda.cc; always built: without NCCL or without a usable device they return
// ZRT_UNSUPPORTED with the reason).
// zrt_stream_create(comm, ZRT_MEM_CUDA, ...) delegates here: creates a zrt-owned high-priority
// CUDA stream (initialising the communicator's NCCL side on first use, which is collective) and
// appends the handle to comm->streams.
Status create_cuda_stream(zrt_comm* comm, zrt_stream** out);
// The communicator's device context, initialising its NCCL side on first use (collective), for
// layers that make their own CUDA streams (a ZRT_MEM_CUDA partition manager).
Status device_context_for(zrt_comm* comm, std::shared_ptr<DeviceContext>* context);

}  // namespace zrt::api

// Wraps the body of a C entry point: a Status-returning lambda body, exceptions turned into
// ZRT_INTERNAL_ERROR / ZRT_OUT_OF_MEMORY so nothing escapes through the C boundary.
#define ZRT_API_BODY(function_name, ...)                                                     \
  do {                                                                                       \
    try {                                                                                    \
      ::zrt::Status zrt_api_status_ = [&]() -> ::zrt::Status { __VA_ARGS__ }();              \
      return ::zrt::api::finish(function_name, zrt_api_status_);                             \
    } catch (const std::bad_alloc&) {                                                        \
      return ::zrt::api::finish(function_name,                                               \
                                ::zrt::Status(ZRT_OUT_OF_MEMORY, "allocation failed"));      \
    } catch (const std::exception& e) {                                                      \
      return ::zrt::api::finish(function_name, ::zrt::Status(ZRT_INTERNAL_ERROR, e.what())); \
    }                                                                                        \
  } while (0)
