// The AVX2 + FMA + F16C optimizer variant (8 f32 lanes). Built with -mavx2 -mfma -mf16c and
// -ffp-contract=off (every fused multiply-add is an explicit one); only called after the
// dispatcher has seen those features in cpuid.
#include <array>
#include <cstddef>
#include <cstdint>

#include <immintrin.h>

#include "kernels/reduce/reduce_kernels.h"
#include "kernels/optim/optim_kernels.h"

namespace zrt::optim_avx2 {
namespace {

struct Simd {
  using F = __m256;
  static constexpr size_t kLanes = 8;

  static F load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, F v) { _mm256_storeu_ps(p, v); }
  static F set1(float x) { return _mm256_set1_ps(x); }
  static F add(F x, F y) { return _mm256_add_ps(x, y); }
  static F mul(F x, F y) { return _mm256_mul_ps(x, y); }
  static F div(F x, F y) { return _mm256_div_ps(x, y); }
  static F sqrt(F x) { return _mm256_sqrt_ps(x); }
  static F fma(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
  // As Scalar::sign: +-1 where x is nonzero, x itself (zeros, NaN) elsewhere.
  static F sign(F x) {
    const F zero = _mm256_setzero_ps();
    F r = _mm256_blendv_ps(x, _mm256_set1_ps(1.0f), _mm256_cmp_ps(x, zero, _CMP_GT_OQ));
    return _mm256_blendv_ps(r, _mm256_set1_ps(-1.0f), _mm256_cmp_ps(x, zero, _CMP_LT_OQ));
  }
  // Round to nearest even by integer arithmetic (as bf16_of); NaN -> quiet NaN.
  static void store_bf16(uint16_t* p, F v) {
    const __m256i x = _mm256_castps_si256(v);
    const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
    const __m256i rounded = _mm256_srli_epi32(
        _mm256_add_epi32(x, _mm256_add_epi32(odd, _mm256_set1_epi32(0x7fff))), 16);
    const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(0x40));
    const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    const __m256i result = _mm256_blendv_epi8(rounded, quiet, nan);
    _mm_storeu_si128(
        reinterpret_cast<__m128i*>(p),
        _mm_packus_epi32(_mm256_castsi256_si128(result), _mm256_extracti128_si256(result, 1)));
  }
  static void store_f16(uint16_t* p, F v) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
  }
};

}  // namespace
}  // namespace zrt::optim_avx2

#define ZRT_OPTIM_NAMESPACE optim_avx2
#define ZRT_OPTIM_NAME "avx2"
#include "kernels/optim/optim_body.inc"

namespace zrt::optim {
const KernelTable& avx2_optim_table() {
  return optim_avx2::kTable;
}
}  // namespace zrt::optim
