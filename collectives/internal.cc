#include "collectives/internal.h"

#include "engine/engine.h"

namespace zrt {

Status run_internal_collective(Stream& stream, int rank, int size, CollectiveArgs args,
                               const std::string& what) {
  args.purpose = Purpose::kInternal;
  ZRT_RETURN_IF_ERROR(enqueue_collective(stream, rank, size, args).with_context(what));
  return stream.synchronize().with_context(what);
}

}  // namespace zrt
