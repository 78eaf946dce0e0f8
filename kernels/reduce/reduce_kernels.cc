// The dispatcher: picks a kernel variant once (cpuid, then ZRT_SIMD) and validates arguments
// before any kernel runs, so a bad call logs a message and leaves out untouched.
#include "kernels/reduce/reduce_kernels.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include <climits>
#include <cstdint>
#include <cstring>

#include "kernels/reduce/kernel_variants.h"
#include "lib/core/dtype.h"
#include "lib/core/log.h"

namespace zrt {
namespace reduce_internal {
namespace {

constexpr Variant kAllVariants[] = {Variant::kAvx512, Variant::kAvx2, Variant::kGeneric};

bool parse_variant(const char* text, Variant* variant) {
  for (Variant v : kAllVariants) {
    if (strcmp(text, variant_name(v)) == 0) {
      *variant = v;
      return true;
    }
  }
  return false;
}

Variant best_variant() {
  for (Variant v : kAllVariants) {
    if (variant_supported(v)) return v;
  }
  return Variant::kGeneric;
}

// ZRT_SIMD's forced variant, or false for auto. Read here once per process (the kernel table is
// chosen once); a bad value is the communicator's error (check_simd_setting), so it is ignored.
bool forced_variant(const std::string& name, Variant* variant) {
  return name != "auto" && parse_variant(name.c_str(), variant);
}

const KernelTable& choose_table() {
  Variant chosen = best_variant();
  SettingValue value;
  Variant wanted;
  if (load_setting(SettingId::kSimd, &value).is_ok() && forced_variant(value.text, &wanted) &&
      variant_supported(wanted)) {
    chosen = wanted;
  }
  ZRT_LOG_DEBUG("reduction kernels: {} variant", variant_name(chosen));
  return *kernel_table(chosen);
}

}  // namespace

const char* variant_name(Variant variant) {
  switch (variant) {
    case Variant::kGeneric:
      return "generic";
    case Variant::kAvx2:
      return "avx2";
    case Variant::kAvx512:
      return "avx512";
  }
  return "?";
}

#if defined(__x86_64__) && defined(__GNUC__)
// F16C from cpuid leaf 1 (ECX bit 29): clang 14's __builtin_cpu_supports does not know "f16c".
bool cpu_has_f16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0) return false;
  return (ecx & (1u << 29)) != 0;
}
#endif

bool variant_supported(Variant variant) {
  switch (variant) {
    case Variant::kGeneric:
      return true;
#if defined(__x86_64__) && defined(__GNUC__)
    case Variant::kAvx2:
      __builtin_cpu_init();
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_has_f16c();
    case Variant::kAvx512:
      return variant_supported(Variant::kAvx2) && __builtin_cpu_supports("avx512f") &&
             __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
#else
    default:
      return false;  // this build has no x86 variants
#endif
  }
  return false;
}

const KernelTable* kernel_table(Variant variant) {
  if (!variant_supported(variant)) return nullptr;
  switch (variant) {
    case Variant::kGeneric:
      return &generic_kernel_table();
#if defined(__x86_64__)
    case Variant::kAvx2:
      return &avx2_kernel_table();
    case Variant::kAvx512:
      return &avx512_kernel_table();
#else
    default:
      return nullptr;
#endif
  }
  return nullptr;
}

const KernelTable& active_kernel_table() {
  // Chosen once; the table itself is immutable.
  static const KernelTable& table = choose_table();
  return table;
}

}  // namespace reduce_internal

namespace {

// The most elements reduced without the kernels (reduced_few).
constexpr size_t kFewElements = 8;

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kProd:
      return "prod";
    case ReduceOp::kMin:
      return "min";
    case ReduceOp::kMax:
      return "max";
  }
  return "?";
}

bool valid_op(ReduceOp op) {
  return op == ReduceOp::kSum || op == ReduceOp::kProd || op == ReduceOp::kMin ||
         op == ReduceOp::kMax;
}

Status check_buffers(const char* call, size_t count, std::initializer_list<const void*> buffers) {
  if (count == 0) return Status::ok();
  for (const void* buffer : buffers) {
    if (buffer == nullptr) {
      return Status::invalid_argument("{}: NULL buffer with count {}", call, count);
    }
  }
  return Status::ok();
}

void log_refusal(const Status& status) {
  ZRT_LOG_ERROR("{} (output left unchanged)", status.message());
}

}  // namespace

Status check_reduce_args(zrt_dtype_t dtype, ReduceOp op, double a_scale, double b_scale) {
  ZRT_RETURN_IF_ERROR(check_dtype(dtype, "reduce_elements dtype"));
  if (!valid_op(op)) {
    return Status::invalid_argument("reduce_elements: unknown op {}", static_cast<int>(op));
  }
  const bool unit_scales = a_scale == 1.0 && b_scale == 1.0;
  if (!unit_scales && (op != ReduceOp::kSum || !dtype_is_floating(dtype))) {
    return Status::invalid_argument(
        "reduce_elements: scales ({}, {}) need op sum on a floating dtype, not {} on {}", a_scale,
        b_scale, reduce_op_name(op), dtype_name(dtype));
  }
  return Status::ok();
}

Status check_scale_args(zrt_dtype_t dtype) {
  ZRT_RETURN_IF_ERROR(check_dtype(dtype, "scale_elements dtype"));
  if (!dtype_is_floating(dtype)) {
    return Status::invalid_argument("scale_elements: dtype {} is not floating", dtype_name(dtype));
  }
  return Status::ok();
}

Status check_convert_args(zrt_dtype_t from, zrt_dtype_t to) {
  ZRT_RETURN_IF_ERROR(check_dtype(from, "convert_elements from"));
  ZRT_RETURN_IF_ERROR(check_dtype(to, "convert_elements to"));
  if (from != to && (!dtype_is_floating(from) || !dtype_is_floating(to))) {
    return Status::invalid_argument("convert_elements: {} -> {}: only f32/f64/f16/bf16 convert",
                                    dtype_name(from), dtype_name(to));
  }
  return Status::ok();
}

// A sum of a few elements without scales (a vote, a norm, an 8-byte all-reduce): the kernel
// table's dispatch and its vector prologue cost more than the additions (a visible share of an
// 8-byte all-reduce's time; measured: docs/ARCHITECTURE.md#measured-costs). The same IEEE
// additions elementwise give the kernels' bits; integers add modulo 2^n as the vector units do.
namespace {

template <typename T, typename Wide = T>
void sum_few(const void* a, const void* b, void* out, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    T x;
    T y;
    std::memcpy(&x, static_cast<const char*>(a) + i * sizeof(T), sizeof(T));
    std::memcpy(&y, static_cast<const char*>(b) + i * sizeof(T), sizeof(T));
    const T sum = static_cast<T>(static_cast<Wide>(x) + static_cast<Wide>(y));
    std::memcpy(static_cast<char*>(out) + i * sizeof(T), &sum, sizeof(T));
  }
}

bool reduced_few(zrt_dtype_t dtype, ReduceOp op, const void* a, const void* b, void* out,
                 size_t count, double a_scale, double b_scale) {
  if (op != ReduceOp::kSum || a_scale != 1.0 || b_scale != 1.0 || count > kFewElements ||
      a == nullptr || b == nullptr || out == nullptr) {
    return false;
  }
  switch (dtype) {
    case ZRT_F32:
      sum_few<float>(a, b, out, count);
      return true;
    case ZRT_F64:
      sum_few<double>(a, b, out, count);
      return true;
    case ZRT_I32:
      sum_few<int32_t, uint32_t>(a, b, out, count);
      return true;
    case ZRT_I64:
      sum_few<int64_t, uint64_t>(a, b, out, count);
      return true;
    default:
      return false;
  }
}

}  // namespace

void reduce_elements(zrt_dtype_t dtype, ReduceOp op, const void* a, const void* b, void* out,
                     size_t count, double a_scale, double b_scale, bool stream_output) {
  if (reduced_few(dtype, op, a, b, out, count, a_scale, b_scale)) return;
  Status status = check_reduce_args(dtype, op, a_scale, b_scale);
  if (status.is_ok()) status = check_buffers("reduce_elements", count, {a, b, out});
  if (!status.is_ok()) return log_refusal(status);
  reduce_internal::KernelOptions options;
  if (stream_output) options.stream_min_bytes = 0;
  reduce_internal::active_kernel_table().reduce(dtype, op, a, b, out, count, a_scale, b_scale,
                                                options);
}

void scale_elements(zrt_dtype_t dtype, const void* in, void* out, size_t count, double factor) {
  Status status = check_scale_args(dtype);
  if (status.is_ok()) status = check_buffers("scale_elements", count, {in, out});
  if (!status.is_ok()) return log_refusal(status);
  reduce_internal::active_kernel_table().scale(dtype, in, out, count, factor,
                                               reduce_internal::KernelOptions{});
}

void convert_elements(zrt_dtype_t from, const void* in, zrt_dtype_t to, void* out, size_t count) {
  Status status = check_convert_args(from, to);
  if (status.is_ok()) status = check_buffers("convert_elements", count, {in, out});
  if (!status.is_ok()) return log_refusal(status);
  reduce_internal::active_kernel_table().convert(from, in, to, out, count,
                                                 reduce_internal::KernelOptions{});
}

void sum_squares_and_nonfinite(zrt_dtype_t dtype, const void* in, size_t count, double* sum_squares,
                               bool* has_nonfinite) {
  Status status = check_dtype(dtype, "sum_squares_and_nonfinite dtype");
  if (status.is_ok()) status = check_buffers("sum_squares_and_nonfinite", count, {in});
  if (status.is_ok() && (sum_squares == nullptr || has_nonfinite == nullptr)) {
    status = Status::invalid_argument("sum_squares_and_nonfinite: NULL output");
  }
  if (!status.is_ok()) return log_refusal(status);
  reduce_internal::active_kernel_table().sum_squares(dtype, in, count, sum_squares, has_nonfinite);
}

const char* reduce_kernels_variant() {
  return reduce_internal::active_kernel_table().name;
}

Status check_simd_setting(const Settings& settings) {
  using namespace reduce_internal;
  const std::string& name = settings.text(SettingId::kSimd);
  Variant wanted;
  if (!forced_variant(name, &wanted) || variant_supported(wanted)) return Status::ok();
  std::string runs;
  for (Variant v : kAllVariants) {
    if (variant_supported(v)) runs += fmt::format(", {}", variant_name(v));
  }
  return Status::invalid_argument(
      "ZRT_SIMD='{}': this CPU or build cannot run it; it accepts auto{}", name, runs);
}

}  // namespace zrt
