/* zrt-gpu-probe: whether this machine has a CUDA device zrt can use, through the C API alone.
 * run-gpu-checks.sh asks it first: without a device every GPU check is skipped with the reason
 * printed here (the CUDA runtime's own words). It also says which NCCL was loaded at run time,
 * since the bundle takes NCCL from the machine it runs on.
 *
 * Prints "nccl: VERSION" (or "nccl: REASON"), then "cuda: N device(s)" or "cuda: REASON".
 * Exit status: 0 a device is usable, 2 none is (ZRT_UNSUPPORTED), 1 any other error. */
#include <stdio.h>

#include "zrt/zrt.h"

int main(void) {
  int version = 0;
  if (zrt_nccl_version(&version) == ZRT_SUCCESS) {
    printf("nccl: %d.%d.%d\n", version / 10000, version / 100 % 100, version % 100);
  } else {
    printf("nccl: %s\n", zrt_last_error());
  }
  int count = 0;
  const zrt_status_t status = zrt_cuda_device_count(&count);
  if (status == ZRT_SUCCESS) {
    printf("cuda: %d device(s)\n", count);
    return 0;
  }
  printf("cuda: %s: %s\n", zrt_status_string(status), zrt_last_error());
  return status == ZRT_UNSUPPORTED ? 2 : 1;
}
