// The per-variant kernel tables behind reduce_kernels.h. Each variant (generic, AVX2, AVX-512) is
// compiled in its own static library with its own -m flags from one shared body
// (kernel_body.inc), so every variant has the same scalar definitions and differs only in the
// vector width of its hot loops. The dispatcher (reduce_kernels.cc) picks one table at first
// use; tests and benchmarks reach each table directly to compare variants bit for bit.
#pragma once

#include <cstddef>

#include "kernels/reduce/reduce_kernels.h"

namespace zrt::reduce_internal {

enum class Variant { kGeneric, kAvx2, kAvx512 };

// Outputs of at least this many bytes, written to a buffer that aliases no input, use
// non-temporal stores: such a result is larger than the caches can hold anyway, so writing
// around them saves the read-for-ownership of every output line. See bench_reduce_kernels.cc.
inline constexpr size_t kDefaultStreamMinBytes = size_t{16} << 20;

struct KernelOptions {
  size_t stream_min_bytes = kDefaultStreamMinBytes;  // SIZE_MAX: never stream
};

// Arguments are already validated (known dtypes, scales 1.0 where required, non-null buffers
// when count > 0); the public wrappers in reduce_kernels.cc do that.
struct KernelTable {
  const char* name;
  void (*reduce)(zrt_dtype_t dtype, ReduceOp op, const void* a, const void* b, void* out,
                 size_t count, double a_scale, double b_scale, const KernelOptions& options);
  void (*scale)(zrt_dtype_t dtype, const void* in, void* out, size_t count, double factor,
                const KernelOptions& options);
  void (*convert)(zrt_dtype_t from, const void* in, zrt_dtype_t to, void* out, size_t count,
                  const KernelOptions& options);
  void (*sum_squares)(zrt_dtype_t dtype, const void* in, size_t count, double* sum_squares,
                      bool* has_nonfinite);
};

const char* variant_name(Variant variant);

// Whether this CPU (and OS) can run the variant, and whether this build contains it.
bool variant_supported(Variant variant);

// The table of a variant, or nullptr when !variant_supported(variant).
const KernelTable* kernel_table(Variant variant);

// The table the dispatcher chose (cpuid, then ZRT_SIMD); chosen once, at first use.
const KernelTable& active_kernel_table();

// Defined by each variant library.
const KernelTable& generic_kernel_table();
#if defined(__x86_64__)
const KernelTable& avx2_kernel_table();
const KernelTable& avx512_kernel_table();
#endif

}  // namespace zrt::reduce_internal
