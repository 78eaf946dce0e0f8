// The host ElementOps (the interface is engine/element_ops.h): the vectorised kernels of
// kernels/reduce, complete when they return.
#pragma once

#include <memory>

#include "engine/element_ops.h"

namespace zrt {

std::unique_ptr<ElementOps> create_host_element_ops();

}  // namespace zrt
