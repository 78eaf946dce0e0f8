// Which optimizer kernel table runs: the same variant as the reduction kernels (cpuid, then
// ZRT_SIMD; kernels/reduce/kernel_variants.h), so one setting governs every SIMD kernel.
#pragma once

#include "kernels/reduce/kernel_variants.h"
#include "lib/core/settings.h"
#include "lib/core/status.h"
#include "kernels/optim/optim_kernels.h"

namespace zrt::optim {

// The table of a variant, or nullptr when this CPU or build cannot run it.
const KernelTable* optim_table(reduce_internal::Variant variant);

// The table `settings` ask for (ZRT_SIMD; auto: the best this CPU runs). A forced variant this
// CPU cannot run is ZRT_INVALID_ARGUMENT naming the variable (check_simd_setting).
Status choose_optim_table(const Settings& settings, const KernelTable** table);

// The table of the variant the reduction kernels chose for this process.
const KernelTable& default_optim_table();

}  // namespace zrt::optim
