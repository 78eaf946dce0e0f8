// The portable optimizer variant: the scalar operation set for every element, compiled for
// the target's baseline ISA (fma is the C library's correctly rounded fmaf there).
#include <array>
#include <cstddef>
#include <cstdint>

#include "kernels/reduce/reduce_kernels.h"
#include "kernels/optim/optim_kernels.h"

#define ZRT_OPTIM_NAMESPACE optim_generic
#define ZRT_OPTIM_NAME "generic"
#define ZRT_OPTIM_SCALAR_ONLY 1
#include "kernels/optim/optim_body.inc"

namespace zrt::optim {
const KernelTable& generic_optim_table() {
  return optim_generic::kTable;
}
}  // namespace zrt::optim
