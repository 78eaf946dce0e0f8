// Device questions that need no communicator (zrt_cuda_device_count, zrt_nccl_version), answered
// by the NCCL layer when zrt was built with it and ZRT_UNSUPPORTED, saying why, otherwise.
#pragma once

#include "lib/core/status.h"

namespace zrt {

Status device_count(int* count);              // CUDA devices this process can use
Status device_library_version(int* version);  // NCCL's version code

}  // namespace zrt
