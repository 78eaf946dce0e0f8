#include "kernels/optim/optim_dispatch.h"

#include <cstring>

#include "kernels/reduce/reduce_kernels.h"

namespace zrt::optim {

namespace {

using reduce_internal::Variant;

constexpr Variant kBestFirst[] = {Variant::kAvx512, Variant::kAvx2, Variant::kGeneric};

const KernelTable* table_named(const char* name) {
  for (Variant v : kBestFirst) {
    if (std::strcmp(reduce_internal::variant_name(v), name) == 0) return optim_table(v);
  }
  return nullptr;
}

}  // namespace

const KernelTable* optim_table(Variant variant) {
  if (!reduce_internal::variant_supported(variant)) return nullptr;
  switch (variant) {
    case Variant::kGeneric:
      return &generic_optim_table();
#if defined(__x86_64__)
    case Variant::kAvx2:
      return &avx2_optim_table();
    case Variant::kAvx512:
      return &avx512_optim_table();
#else
    default:
      return nullptr;
#endif
  }
  return nullptr;
}

Status choose_optim_table(const Settings& settings, const KernelTable** table) {
  ZRT_RETURN_IF_ERROR(check_simd_setting(settings));
  const KernelTable* chosen = table_named(settings.text(SettingId::kSimd).c_str());
  for (size_t i = 0; chosen == nullptr && i < std::size(kBestFirst); ++i) {
    chosen = optim_table(kBestFirst[i]);
  }
  *table = chosen;
  return Status::ok();
}

const KernelTable& default_optim_table() {
  const KernelTable* table = table_named(reduce_kernels_variant());
  return table != nullptr ? *table : generic_optim_table();
}

}  // namespace zrt::optim
