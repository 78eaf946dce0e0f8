// The portable variant: plain C++ loops, compiled for the baseline ISA of the target. Also the
// home of the public scalar f16/bf16 helpers, which are the reference every variant matches.
#include <cstddef>
#include <cstdint>

#include "kernels/reduce/kernel_variants.h"
#include "lib/core/dtype.h"

#define ZRT_KERNEL_NAMESPACE reduce_generic
#define ZRT_KERNEL_NAME "generic"
#include "kernels/reduce/kernel_body.inc"

namespace zrt {

namespace reduce_internal {
const KernelTable& generic_kernel_table() {
  return reduce_generic::kKernelTable;
}
}  // namespace reduce_internal

float f16_to_f32(uint16_t h) {
  return reduce_generic::f16_to_f32_bits(h);
}
uint16_t f32_to_f16(float f) {
  return reduce_generic::f32_to_f16_bits(f);
}
float bf16_to_f32(uint16_t h) {
  return reduce_generic::bf16_to_f32_bits(h);
}
uint16_t f32_to_bf16(float f) {
  return reduce_generic::f32_to_bf16_bits(f);
}

}  // namespace zrt
