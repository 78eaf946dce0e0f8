// The AVX-512 optimizer variant (16 f32 lanes; F, BW and VL, plus F16C). Built with
// -mavx512f -mavx512bw -mavx512vl -mavx2 -mfma -mf16c and -ffp-contract=off; only called after
// the dispatcher has seen those features. AVX512_BF16's vcvtneps2bf16 is not used: it flushes
// subnormals to zero, which the other variants do not.
#include <array>
#include <cstddef>
#include <cstdint>

#include <immintrin.h>

#include "kernels/reduce/reduce_kernels.h"
#include "kernels/optim/optim_kernels.h"

namespace zrt::optim_avx512 {
namespace {

struct Simd {
  using F = __m512;
  static constexpr size_t kLanes = 16;

  static F load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, F v) { _mm512_storeu_ps(p, v); }
  static F set1(float x) { return _mm512_set1_ps(x); }
  static F add(F x, F y) { return _mm512_add_ps(x, y); }
  static F mul(F x, F y) { return _mm512_mul_ps(x, y); }
  static F div(F x, F y) { return _mm512_div_ps(x, y); }
  static F sqrt(F x) { return _mm512_sqrt_ps(x); }
  static F fma(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
  // As Scalar::sign: +-1 where x is nonzero, x itself (zeros, NaN) elsewhere.
  static F sign(F x) {
    const F zero = _mm512_setzero_ps();
    F r = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, zero, _CMP_GT_OQ), x, _mm512_set1_ps(1.0f));
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, zero, _CMP_LT_OQ), r, _mm512_set1_ps(-1.0f));
  }
  static void store_bf16(uint16_t* p, F v) {
    const __m512i x = _mm512_castps_si512(v);
    const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1));
    const __m512i rounded = _mm512_srli_epi32(
        _mm512_add_epi32(x, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7fff))), 16);
    const __m512i quiet = _mm512_or_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(0x40));
    const __m512i result =
        _mm512_mask_blend_epi32(_mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), rounded, quiet);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtepi32_epi16(result));
  }
  static void store_f16(uint16_t* p, F v) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p),
                        _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
};

}  // namespace
}  // namespace zrt::optim_avx512

#define ZRT_OPTIM_NAMESPACE optim_avx512
#define ZRT_OPTIM_NAME "avx512"
#include "kernels/optim/optim_body.inc"

namespace zrt::optim {
const KernelTable& avx512_optim_table() {
  return optim_avx512::kTable;
}
}  // namespace zrt::optim
