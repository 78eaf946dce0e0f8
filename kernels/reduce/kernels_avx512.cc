// The AVX-512 variant (16 f32 lanes; F, BW and VL, plus F16C). Built with -mavx512f -mavx512bw
// -mavx512vl -mavx2 -mfma -mf16c; only called after the dispatcher has seen those features.
// AVX512_BF16's vcvtneps2bf16 is deliberately not used: it flushes subnormals to zero, which
// the other variants do not.
#include <cstddef>
#include <cstdint>

#include <immintrin.h>

#include "kernels/reduce/kernel_variants.h"
#include "lib/core/dtype.h"

namespace zrt::reduce_avx512 {
namespace {

struct Simd {
  using F = __m512;
  static constexpr size_t kLanes = 16;

  static F load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, F v) { _mm512_storeu_ps(p, v); }
  static void stream(float* p, F v) { _mm512_stream_ps(p, v); }  // p is 64-byte aligned
  static void fence() { _mm_sfence(); }

  static F set1(float x) { return _mm512_set1_ps(x); }
  static F add(F x, F y) { return _mm512_add_ps(x, y); }
  static F mul(F x, F y) { return _mm512_mul_ps(x, y); }
  // x's NaN, made quiet, wherever x is NaN (see nan_from in kernel_body.inc).
  static F nan_from(F result, F x) {
    __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    return _mm512_castsi512_ps(_mm512_mask_or_epi32(
        _mm512_castps_si512(result), nan, _mm512_castps_si512(x), _mm512_set1_epi32(0x400000)));
  }
  // As in the AVX2 variant: min/max give y when either is NaN; put x back where x is NaN.
  static F min(F x, F y) {
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), _mm512_min_ps(x, y), x);
  }
  static F max(F x, F y) {
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), _mm512_max_ps(x, y), x);
  }

  static F load_bf16(const uint16_t* p) {
    __m512i wide = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16));
  }
  static __m256i to_bf16(F v) {
    __m512i x = _mm512_castps_si512(v);
    __m512i odd = _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1));
    __m512i rounded = _mm512_srli_epi32(
        _mm512_add_epi32(x, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7fff))), 16);
    __m512i quiet = _mm512_or_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(0x40));
    __m512i result =
        _mm512_mask_blend_epi32(_mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), rounded, quiet);
    return _mm512_cvtepi32_epi16(result);
  }
  static void store_bf16(uint16_t* p, F v) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), to_bf16(v));
  }
  static void stream_bf16(uint16_t* p, F v) {
    _mm256_stream_si256(reinterpret_cast<__m256i*>(p), to_bf16(v));
  }

  static F load_f16(const uint16_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static __m256i to_f16(F v) {
    return _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  static void store_f16(uint16_t* p, F v) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), to_f16(v));
  }
  static void stream_f16(uint16_t* p, F v) {
    _mm256_stream_si256(reinterpret_cast<__m256i*>(p), to_f16(v));
  }

  static F load_f64(const double* p) {
    __m256 lo = _mm512_cvtpd_ps(_mm512_loadu_pd(p));
    __m256 hi = _mm512_cvtpd_ps(_mm512_loadu_pd(p + 8));
    return _mm512_castpd_ps(
        _mm512_insertf64x4(_mm512_castpd256_pd512(_mm256_castps_pd(lo)), _mm256_castps_pd(hi), 1));
  }
  static void store_f64(double* p, F v) {
    _mm512_storeu_pd(p, _mm512_cvtps_pd(_mm512_castps512_ps256(v)));
    _mm512_storeu_pd(
        p + 8, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1))));
  }
};

}  // namespace
}  // namespace zrt::reduce_avx512

#define ZRT_KERNEL_NAMESPACE reduce_avx512
#define ZRT_KERNEL_NAME "avx512"
#define ZRT_KERNEL_SIMD 1
#include "kernels/reduce/kernel_body.inc"

namespace zrt::reduce_internal {
const KernelTable& avx512_kernel_table() {
  return reduce_avx512::kKernelTable;
}
}  // namespace zrt::reduce_internal
