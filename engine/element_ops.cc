#include "engine/element_ops.h"

#include <utility>

#include "engine/engine.h"

namespace zrt {

Status ElementOps::run_on(Stream& stream, std::function<Status()> work, const char* name) {
  return stream.enqueue_host_function(std::move(work), name);
}

}  // namespace zrt
