// Status: the error value every internal function returns (LevelDB's Status, with zrt's codes).
// The function that first detects an error builds the message; callers add context only when
// it names something the original message could not know (which peer, which call).
#pragma once

#include <string>
#include <utility>

#include <fmt/format.h>

#include "zrt/zrt.h"

namespace zrt {

class [[nodiscard]] Status {
 public:
  Status() = default;  // success
  Status(zrt_status_t code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok() { return Status(); }

  template <typename... Args>
  static Status error(zrt_status_t code, fmt::format_string<Args...> format, Args&&... args) {
    return Status(code, fmt::format(format, std::forward<Args>(args)...));
  }
  template <typename... Args>
  static Status invalid_argument(fmt::format_string<Args...> format, Args&&... args) {
    return Status(ZRT_INVALID_ARGUMENT, fmt::format(format, std::forward<Args>(args)...));
  }
  template <typename... Args>
  static Status invalid_usage(fmt::format_string<Args...> format, Args&&... args) {
    return Status(ZRT_INVALID_USAGE, fmt::format(format, std::forward<Args>(args)...));
  }
  // errno-based failure: "what: strerror(err)".
  static Status system_error(const std::string& what, int err);

  bool is_ok() const { return code_ == ZRT_SUCCESS; }
  explicit operator bool() const = delete;  // force is_ok(): "if (status)" reads ambiguously
  zrt_status_t code() const { return code_; }
  const std::string& message() const { return message_; }

  // "context: message", keeping the code. For adding the caller's view of a failure.
  Status with_context(const std::string& context) const {
    if (is_ok()) return *this;
    return Status(code_, context + ": " + message_);
  }

 private:
  zrt_status_t code_ = ZRT_SUCCESS;
  std::string message_;
};

// The constant's name ("ZRT_TIMEOUT"), or "ZRT_UNKNOWN_STATUS" (zrt_status_string).
const char* status_code_name(int code);

}  // namespace zrt

// Propagates a failed Status to the caller.
#define ZRT_RETURN_IF_ERROR(expr)                         \
  do {                                                    \
    ::zrt::Status zrt_status_tmp_ = (expr);               \
    if (!zrt_status_tmp_.is_ok()) return zrt_status_tmp_; \
  } while (0)
