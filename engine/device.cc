#include "engine/device.h"

namespace zrt {

Status device_stream_handle(Stream& stream, void** native) {
  auto* device = dynamic_cast<DeviceStream*>(&stream);
  if (device == nullptr) {
    return Status::invalid_argument("stream {} is a {} stream, not a CUDA stream", stream.index(),
                                    stream.mem_kind() == ZRT_MEM_HOST ? "host" : "non-CUDA");
  }
  *native = device->native_handle();
  return Status::ok();
}

}  // namespace zrt
