// The C handles behind zrt.h's opaque types: thin structs over the C++ objects (LevelDB's C
// layer), each with a magic so that a stale or foreign pointer is refused rather than followed.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "zero/comm/communicator.h"
#include "engine/engine.h"
#include "zrt/zrt.h"

inline constexpr uint32_t kCommMagic = 0x7a72c033;
inline constexpr uint32_t kStreamMagic = 0x7a725354;
inline constexpr uint32_t kEventMagic = 0x7a724556;
inline constexpr uint32_t kDeadMagic = 0xdeadbeef;

struct zrt_comm;

struct zrt_stream {
  uint32_t magic = kStreamMagic;
  zrt_comm* comm = nullptr;
  zrt::Stream* impl = nullptr;
  // Set for streams the engine did not create (CUDA streams, c_api_cuda.cc): impl points into
  // it. Destroy such a stream by synchronizing impl and resetting `owned`, not through
  // engine().destroy_stream().
  std::unique_ptr<zrt::Stream> owned;
};

struct zrt_event {
  uint32_t magic = kEventMagic;
  zrt_comm* comm = nullptr;
  zrt::Event* impl = nullptr;
  // Set for events the engine did not create (CUDA events, zrt_event_create_cuda): impl points
  // into it; destroy by resetting `owned`, not through engine().destroy_event().
  std::unique_ptr<zrt::Event> owned;
};

// Owns the communicator and every stream/event handle made on it, so zrt_comm_destroy frees all.
struct zrt_comm {
  uint32_t magic = kCommMagic;
  std::unique_ptr<zrt::Communicator> impl;
  zrt_stream default_stream;  // what a NULL stream argument means
  std::mutex handles_mutex;
  std::vector<std::unique_ptr<zrt_stream>> streams;
  std::vector<std::unique_ptr<zrt_event>> events;
  // The device side (NCCL, device arena) belongs to impl (Communicator::device), shared with
  // every CUDA stream and event, so it outlives them whatever order the handles are freed in.
};
