#include "lib/core/log.h"

#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>

#include "lib/core/settings.h"

namespace zrt {
namespace {

// An unaccepted ZRT_LOG leaves the default here: the error is reported when a communicator is
// created (lib/core/settings.h), not by the logger, which has no one to return it to.
LogLevel level_from_settings() {
  SettingValue value;
  if (!load_setting(SettingId::kLog, &value).is_ok()) return LogLevel::kWarn;
  const std::string& name = value.text;
  if (name == "error") return LogLevel::kError;
  if (name == "info") return LogLevel::kInfo;
  if (name == "debug") return LogLevel::kDebug;
  if (name == "trace") return LogLevel::kTrace;
  return LogLevel::kWarn;  // warn, warning
}

struct Logger {
  LogLevel level = level_from_settings();
  std::string host = [] {
    char name[256] = {};
    if (gethostname(name, sizeof(name) - 1) != 0) std::strcpy(name, "?");
    return std::string(name);
  }();
  std::mutex write_mutex;
};

Logger& logger() {
  static Logger instance;  // constructed on first use, thread-safe
  return instance;
}

thread_local int thread_rank = -1;

const char* level_name(LogLevel level) {
  switch (level) {
    case LogLevel::kError:
      return "ERROR";
    case LogLevel::kWarn:
      return "WARN";
    case LogLevel::kInfo:
      return "INFO";
    case LogLevel::kDebug:
      return "DEBUG";
    case LogLevel::kTrace:
      return "TRACE";
  }
  return "?";
}

}  // namespace

LogLevel log_level() {
  return logger().level;
}
bool log_enabled(LogLevel level) {
  return static_cast<int>(level) <= static_cast<int>(logger().level);
}
void log_set_thread_rank(int rank) {
  thread_rank = rank;
}

void log_write(LogLevel level, std::string_view message) {
  Logger& log = logger();
  std::string line = fmt::format("{}:{}:{} zrt {} {}\n", log.host, getpid(),
                                 thread_rank >= 0 ? fmt::format("r{}", thread_rank) : "r?",
                                 level_name(level), message);
  std::lock_guard<std::mutex> lock(log.write_mutex);
  std::fwrite(line.data(), 1, line.size(), stderr);
}

}  // namespace zrt
