/* Compiles zrt.h as strict C99 and uses a few of its pieces, so the header stays C-clean. */
#include <stdio.h>
#include <string.h>

#include "zrt/zrt.h"

int main(void) {
  zrt_comm_config_t config = ZRT_COMM_CONFIG_INIT;
  int version = 0;
  size_t bytes = 0;
  if (config.size != sizeof(zrt_comm_config_t) || config.magic != ZRT_CONFIG_MAGIC) return 1;
  if (zrt_get_version(&version) != ZRT_SUCCESS || version != ZRT_VERSION_CODE) return 2;
  if (zrt_dtype_size(ZRT_BF16, &bytes) != ZRT_SUCCESS || bytes != 2) return 3;
  if (zrt_dtype_size((zrt_dtype_t)99, &bytes) != ZRT_INVALID_ARGUMENT) return 4;
  if (strstr(zrt_last_error(), "dtype") == NULL) return 5;
  printf("zrt %d from C99: ok\n", version);
  return 0;
}
