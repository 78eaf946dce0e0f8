// Logging: ZRT_LOG=error|warn|info|debug|trace, to stderr, each line prefixed with host, pid and
// rank (NCCL_DEBUG's shape). The logger is the only process-wide mutable state in zrt.
#pragma once

#include <string_view>

#include <fmt/format.h>

namespace zrt {

enum class LogLevel { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3, kTrace = 4 };

// The level read from ZRT_LOG at first use (warn when unset or not accepted).
LogLevel log_level();
bool log_enabled(LogLevel level);

// The rank shown in this thread's log lines (-1 = unknown). Threads a communicator owns set it.
void log_set_thread_rank(int rank);

void log_write(LogLevel level, std::string_view message);

template <typename... Args>
void log(LogLevel level, fmt::format_string<Args...> format, Args&&... args) {
  if (!log_enabled(level)) return;
  log_write(level, fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace zrt

// The level is checked before the arguments are evaluated: a disabled line costs one load, not
// the strings its arguments would build (a task's describe() on every small collective).
#define ZRT_LOG_AT(level, ...)                                     \
  do {                                                             \
    if (::zrt::log_enabled(level)) ::zrt::log(level, __VA_ARGS__); \
  } while (false)
#define ZRT_LOG_ERROR(...) ZRT_LOG_AT(::zrt::LogLevel::kError, __VA_ARGS__)
#define ZRT_LOG_WARN(...) ZRT_LOG_AT(::zrt::LogLevel::kWarn, __VA_ARGS__)
#define ZRT_LOG_INFO(...) ZRT_LOG_AT(::zrt::LogLevel::kInfo, __VA_ARGS__)
#define ZRT_LOG_DEBUG(...) ZRT_LOG_AT(::zrt::LogLevel::kDebug, __VA_ARGS__)
#define ZRT_LOG_TRACE(...) ZRT_LOG_AT(::zrt::LogLevel::kTrace, __VA_ARGS__)
