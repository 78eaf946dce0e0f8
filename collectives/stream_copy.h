// stream_copy: memcpy with non-temporal stores, for results larger than the caches that a
// collective writes one chunk at a time (glibc's memcpy streams only above its own size
// threshold, far above a chunk). Streaming skips the read-for-ownership of every output line, a
// third of the DRAM traffic of a copy, and leaves the caches to the staging slots that are read
// again. The stores are fenced before return, so the copy is complete and ordered like a memcpy.
#pragma once

#include <cstddef>

namespace zrt {

// dst and src must not overlap. Any alignment; bytes may be 0.
void stream_copy(void* dst, const void* src, size_t bytes);

}  // namespace zrt
