#include "collectives/two_level_fingerprint.h"

#include "collectives/fingerprint_check.h"

namespace zrt {

Status start_two_level_fingerprint(TaskContext& context, CollTask& task, const HostGrid& grid,
                                   const BlockLayout& layout, size_t element_size,
                                   bool host_windows, bool* in_header) {
  // The longer blocks come first: every ring moves data when blocks 0 .. L-1 (host 0's) do.
  const bool every_cross_ring_moves =
      layout.base > 0 || layout.extra >= static_cast<size_t>(grid.local);
  *in_header =
      every_cross_ring_moves && layout.max_length() * element_size < kFingerprintHeaderMaxBytes;
  if (!*in_header) {
    return task.post_fingerprint_companion(context, ring_mod(context.rank - 1, context.size),
                                           ring_mod(context.rank + 1, context.size));
  }
  if (host_windows) return Status::ok();
  const int host = grid.host_of(context.rank);
  const int local = grid.local_of(context.rank);
  const int left = local > 0 ? grid.rank_of(host, local - 1) : -1;
  const int right = local + 1 < grid.local ? grid.rank_of(host, local + 1) : -1;
  return task.post_fingerprint_companion(context, left, right);
}

}  // namespace zrt
