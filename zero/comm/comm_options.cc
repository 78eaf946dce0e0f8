// resolve_comm_options: the caller's zrt_comm_config_t (checked field by field) plus the settings
// registry, loaded once per communicator.
#include <algorithm>
#include <cstddef>

#include "kernels/reduce/reduce_kernels.h"
#include "zero/comm/communicator.h"
#include "lib/core/settings.h"

namespace zrt {
namespace {

constexpr size_t kMaxNameLength = 64;

// The config struct as the first header version knew it: every caller has at least this much.
constexpr size_t kMinConfigSize = offsetof(zrt_comm_config_t, name) + sizeof(const char*);

}  // namespace

Status resolve_comm_options(const zrt_comm_config_t* config, CommOptions* options) {
  if (options == nullptr) return Status::invalid_argument("options is NULL");
  CommOptions resolved;
  int64_t timeout_ms = 0;
  if (config != nullptr) {
    if (config->size < kMinConfigSize) {
      return Status::invalid_argument(
          "config->size is {}, smaller than any zrt_comm_config_t ({}); initialise the struct "
          "with ZRT_COMM_CONFIG_INIT",
          config->size, kMinConfigSize);
    }
    if (config->magic != ZRT_CONFIG_MAGIC) {
      return Status::invalid_argument(
          "config->magic is {:#x}, expected ZRT_CONFIG_MAGIC ({:#x}); initialise the struct with "
          "ZRT_COMM_CONFIG_INIT",
          config->magic, ZRT_CONFIG_MAGIC);
    }
    if (config->version == 0) {
      return Status::invalid_argument(
          "config->version is 0; initialise the struct with ZRT_COMM_CONFIG_INIT");
    }
    if (config->timeout_ms < 0) {
      return Status::invalid_argument(
          "config->timeout_ms is {}; must be >= 0 (0 = ZRT_TIMEOUT from the environment, else "
          "60 s)",
          config->timeout_ms);
    }
    // A huge timeout means "wait forever"; clamped, no deadline arithmetic can overflow.
    timeout_ms = std::min<int64_t>(config->timeout_ms, ZRT_TIMEOUT_MAX_MS);
    if (config->name != nullptr) {
      const std::string name(config->name);
      if (name.empty() || name.size() > kMaxNameLength) {
        return Status::invalid_argument("config->name '{}' must have 1 to {} characters", name,
                                        kMaxNameLength);
      }
      resolved.name = name;
    }
  }
  ZRT_RETURN_IF_ERROR(Settings::load(&resolved.settings));
  ZRT_RETURN_IF_ERROR(check_simd_setting(resolved.settings));
  log_settings_once(resolved.settings);
  resolved.timeout_ms =
      timeout_ms != 0 ? timeout_ms : resolved.settings.integer(SettingId::kTimeout);
  resolved.windows = resolved.settings.flag(SettingId::kWindows);
  *options = std::move(resolved);
  return Status::ok();
}

}  // namespace zrt
