// The AVX2 + FMA + F16C variant (8 f32 lanes). Built with -mavx2 -mfma -mf16c; only called
// after the dispatcher has seen those features in cpuid. FMA is in the flags because the
// dispatch requires it, but -ffp-contract=off keeps the compiler from using it: the scaled sum
// must round like the generic variant's separate multiply and add.
#include <cstddef>
#include <cstdint>

#include <immintrin.h>

#include "kernels/reduce/kernel_variants.h"
#include "lib/core/dtype.h"

namespace zrt::reduce_avx2 {
namespace {

struct Simd {
  using F = __m256;
  static constexpr size_t kLanes = 8;

  static F load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, F v) { _mm256_storeu_ps(p, v); }
  static void stream(float* p, F v) { _mm256_stream_ps(p, v); }  // p is 32-byte aligned
  static void fence() { _mm_sfence(); }

  static F set1(float x) { return _mm256_set1_ps(x); }
  static F add(F x, F y) { return _mm256_add_ps(x, y); }
  static F mul(F x, F y) { return _mm256_mul_ps(x, y); }
  // x's NaN, made quiet, wherever x is NaN (see nan_from in kernel_body.inc).
  static F nan_from(F result, F x) {
    F quiet = _mm256_or_ps(x, _mm256_castsi256_ps(_mm256_set1_epi32(0x400000)));
    return _mm256_blendv_ps(result, quiet, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
  }
  // minps/maxps return the second operand when either is NaN; the blend puts x back when x
  // is the NaN, so a NaN input always propagates (x's when both are).
  static F min(F x, F y) {
    return _mm256_blendv_ps(_mm256_min_ps(x, y), x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
  }
  static F max(F x, F y) {
    return _mm256_blendv_ps(_mm256_max_ps(x, y), x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
  }

  static F load_bf16(const uint16_t* p) {
    __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
  }
  // Round to nearest even by integer arithmetic (as f32_to_bf16_bits); NaN -> quiet NaN.
  static __m128i to_bf16(F v) {
    __m256i x = _mm256_castps_si256(v);
    __m256i odd = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
    __m256i rounded = _mm256_srli_epi32(
        _mm256_add_epi32(x, _mm256_add_epi32(odd, _mm256_set1_epi32(0x7fff))), 16);
    __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(0x40));
    __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    __m256i result = _mm256_blendv_epi8(rounded, quiet, nan);
    return _mm_packus_epi32(_mm256_castsi256_si128(result), _mm256_extracti128_si256(result, 1));
  }
  static void store_bf16(uint16_t* p, F v) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), to_bf16(v));
  }
  static void stream_bf16(uint16_t* p, F v) {
    _mm_stream_si128(reinterpret_cast<__m128i*>(p), to_bf16(v));
  }

  static F load_f16(const uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static __m128i to_f16(F v) { return _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT); }
  static void store_f16(uint16_t* p, F v) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), to_f16(v));
  }
  static void stream_f16(uint16_t* p, F v) {
    _mm_stream_si128(reinterpret_cast<__m128i*>(p), to_f16(v));
  }

  static F load_f64(const double* p) {
    return _mm256_set_m128(_mm256_cvtpd_ps(_mm256_loadu_pd(p + 4)),
                           _mm256_cvtpd_ps(_mm256_loadu_pd(p)));
  }
  static void store_f64(double* p, F v) {
    _mm256_storeu_pd(p, _mm256_cvtps_pd(_mm256_castps256_ps128(v)));
    _mm256_storeu_pd(p + 4, _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)));
  }
};

}  // namespace
}  // namespace zrt::reduce_avx2

#define ZRT_KERNEL_NAMESPACE reduce_avx2
#define ZRT_KERNEL_NAME "avx2"
#define ZRT_KERNEL_SIMD 1
#include "kernels/reduce/kernel_body.inc"

namespace zrt::reduce_internal {
const KernelTable& avx2_kernel_table() {
  return reduce_avx2::kKernelTable;
}
}  // namespace zrt::reduce_internal
