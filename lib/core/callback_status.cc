#include "lib/core/callback_status.h"

#include <string_view>
#include <utility>

namespace zrt {
namespace {
thread_local std::string callback_message;
thread_local bool callback_message_set = false;
}  // namespace

void set_callback_message(std::string message) {
  callback_message = std::move(message);
  callback_message_set = true;
}

void clear_callback_message() {
  callback_message.clear();
  callback_message_set = false;
}

bool is_known_status(int code) {
  return std::string_view(status_code_name(code)) != "ZRT_UNKNOWN_STATUS";
}

Status callback_result(int code, const std::string& callback) {
  const bool had_message = callback_message_set;
  std::string message = std::move(callback_message);
  clear_callback_message();
  if (code == ZRT_SUCCESS) return Status::ok();
  if (!is_known_status(code)) {
    return Status::error(ZRT_CALLBACK_ERROR,
                         "{} returned {}, which is not a zrt_status_t value (a binding whose "
                         "callback raised an exception returns whatever its default is; catch it "
                         "and return zrt_callback_error(message))",
                         callback, code);
  }
  const auto status = static_cast<zrt_status_t>(code);
  if (status == ZRT_CALLBACK_ERROR) {
    if (!had_message) {
      return Status::error(ZRT_CALLBACK_ERROR,
                           "{} failed (it returned ZRT_CALLBACK_ERROR without a message: return "
                           "zrt_callback_error(message) to pass one)",
                           callback);
    }
    return Status::error(ZRT_CALLBACK_ERROR, "{} failed: {}", callback, message);
  }
  if (had_message) {
    return Status::error(status, "{} returned {}: {}", callback, status_code_name(status), message);
  }
  return Status::error(status, "{} returned {}", callback, status_code_name(status));
}

}  // namespace zrt
