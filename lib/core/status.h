// Status: the error value every internal function returns (LevelDB's Status, with zrt's codes).
// The function that first detects an error builds the message; callers add context only when
// it names something the original message could not know (which peer, which call).
#pragma once

#include <memory>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "zrt/zrt.h"

namespace zrt {

// Success is a null pointer, as in LevelDB: constructing, moving, testing and destroying one is
// a word's work. With a code and a string in every Status, the ok values that every call passes
// up its layers were a measurable part of an 8-byte all-reduce (perf).
class [[nodiscard]] Status {
 public:
  Status() = default;  // success
  Status(zrt_status_t code, std::string message)
      : state_(code == ZRT_SUCCESS && message.empty() ? nullptr
                                                      : new State{code, std::move(message)}) {}
  Status(const Status& other) : state_(other.state_ ? new State(*other.state_) : nullptr) {}
  Status(Status&& other) noexcept = default;
  Status& operator=(const Status& other) {
    if (this != &other) state_.reset(other.state_ ? new State(*other.state_) : nullptr);
    return *this;
  }
  Status& operator=(Status&& other) noexcept = default;
  ~Status() = default;

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

  bool is_ok() const { return state_ == nullptr || state_->code == ZRT_SUCCESS; }
  explicit operator bool() const = delete;  // force is_ok(): "if (status)" reads ambiguously
  zrt_status_t code() const { return state_ ? state_->code : ZRT_SUCCESS; }
  const std::string& message() const { return state_ ? state_->message : empty_message(); }

  // "context: message", keeping the code. For adding the caller's view of a failure.
  Status with_context(const std::string& context) const {
    if (is_ok()) return *this;
    return Status(state_->code, context + ": " + state_->message);
  }

 private:
  struct State {
    zrt_status_t code;
    std::string message;
  };
  static const std::string& empty_message();

  std::unique_ptr<State> state_;
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
