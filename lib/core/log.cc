#include "lib/core/log.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

namespace zrt {
namespace {

LogLevel parse_level(const char* text) {
  if (text == nullptr) return LogLevel::kWarn;
  std::string value(text);
  for (auto& c : value) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (value == "error") return LogLevel::kError;
  if (value == "warn" || value == "warning") return LogLevel::kWarn;
  if (value == "info") return LogLevel::kInfo;
  if (value == "debug") return LogLevel::kDebug;
  if (value == "trace") return LogLevel::kTrace;
  std::fprintf(stderr, "zrt: ZRT_LOG=%s is not one of error|warn|info|debug|trace; using warn\n",
               text);
  return LogLevel::kWarn;
}

struct Logger {
  LogLevel level = parse_level(std::getenv("ZRT_LOG"));
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
    case LogLevel::kError: return "ERROR";
    case LogLevel::kWarn: return "WARN";
    case LogLevel::kInfo: return "INFO";
    case LogLevel::kDebug: return "DEBUG";
    case LogLevel::kTrace: return "TRACE";
  }
  return "?";
}

}  // namespace

LogLevel log_level() { return logger().level; }
bool log_enabled(LogLevel level) { return static_cast<int>(level) <= static_cast<int>(logger().level); }
void log_set_thread_rank(int rank) { thread_rank = rank; }

void log_write(LogLevel level, std::string_view message) {
  Logger& log = logger();
  std::string line = fmt::format("{}:{}:{} zrt {} {}\n", log.host, getpid(),
                                 thread_rank >= 0 ? fmt::format("r{}", thread_rank) : "r?",
                                 level_name(level), message);
  std::lock_guard<std::mutex> lock(log.write_mutex);
  std::fwrite(line.data(), 1, line.size(), stderr);
}

}  // namespace zrt
