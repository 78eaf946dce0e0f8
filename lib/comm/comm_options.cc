// resolve_comm_options: the caller's zrt_comm_config_t (checked field by field) plus ZRT_TIMEOUT.
#include <cerrno>
#include <cmath>
#include <cstddef>
#include <cstdlib>

#include "lib/comm/communicator.h"

namespace zrt {
namespace {

constexpr int64_t kDefaultTimeoutMs = 60000;
constexpr size_t kMaxNameLength = 64;

// The config struct as the first header version knew it: every caller has at least this much.
constexpr size_t kMinConfigSize = offsetof(zrt_comm_config_t, name) + sizeof(const char*);

Status timeout_from_env(int64_t* timeout_ms) {
  const char* value = std::getenv("ZRT_TIMEOUT");
  if (value == nullptr || *value == '\0') {
    *timeout_ms = kDefaultTimeoutMs;
    return Status::ok();
  }
  errno = 0;
  char* end = nullptr;
  const double seconds = std::strtod(value, &end);
  if (errno != 0 || end == value || *end != '\0' || !std::isfinite(seconds) || seconds <= 0 ||
      seconds > 1e9) {
    return Status::invalid_argument(
        "ZRT_TIMEOUT='{}' is not a positive number of seconds (e.g. 60 or 0.5)", value);
  }
  *timeout_ms = std::max<int64_t>(1, static_cast<int64_t>(std::llround(seconds * 1000.0)));
  return Status::ok();
}

Status windows_from_env(bool* windows) {
  const char* value = std::getenv("ZRT_WINDOWS");
  if (value == nullptr || *value == '\0' || std::string(value) == "1") {
    *windows = true;
  } else if (std::string(value) == "0") {
    *windows = false;
  } else {
    return Status::invalid_argument("ZRT_WINDOWS='{}': expected 0 or 1", value);
  }
  return Status::ok();
}

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
    timeout_ms = config->timeout_ms;
    if (config->name != nullptr) {
      const std::string name(config->name);
      if (name.empty() || name.size() > kMaxNameLength) {
        return Status::invalid_argument("config->name '{}' must have 1 to {} characters", name,
                                        kMaxNameLength);
      }
      resolved.name = name;
    }
  }
  if (timeout_ms == 0) ZRT_RETURN_IF_ERROR(timeout_from_env(&timeout_ms));
  resolved.timeout_ms = timeout_ms;
  ZRT_RETURN_IF_ERROR(windows_from_env(&resolved.windows));
  *options = std::move(resolved);
  return Status::ok();
}

}  // namespace zrt
