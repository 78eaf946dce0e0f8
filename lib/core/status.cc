#include "lib/core/status.h"

#include <cstring>

namespace zrt {

const std::string& Status::empty_message() {
  static const std::string empty;
  return empty;
}

Status Status::system_error(const std::string& what, int err) {
  char buffer[256];
  // GNU strerror_r may return a static string instead of filling the buffer.
  const char* text = strerror_r(err, buffer, sizeof(buffer));
  return Status(ZRT_SYSTEM_ERROR, fmt::format("{}: {} (errno {})", what, text, err));
}

const char* status_code_name(int code) {
  switch (code) {
    case ZRT_SUCCESS:
      return "ZRT_SUCCESS";
    case ZRT_IN_PROGRESS:
      return "ZRT_IN_PROGRESS";
    case ZRT_INVALID_ARGUMENT:
      return "ZRT_INVALID_ARGUMENT";
    case ZRT_INVALID_USAGE:
      return "ZRT_INVALID_USAGE";
    case ZRT_SYSTEM_ERROR:
      return "ZRT_SYSTEM_ERROR";
    case ZRT_REMOTE_ERROR:
      return "ZRT_REMOTE_ERROR";
    case ZRT_TIMEOUT:
      return "ZRT_TIMEOUT";
    case ZRT_UNSUPPORTED:
      return "ZRT_UNSUPPORTED";
    case ZRT_OUT_OF_MEMORY:
      return "ZRT_OUT_OF_MEMORY";
    case ZRT_INTERNAL_ERROR:
      return "ZRT_INTERNAL_ERROR";
    case ZRT_CALLBACK_ERROR:
      return "ZRT_CALLBACK_ERROR";
    default:
      return "ZRT_UNKNOWN_STATUS";
  }
}

}  // namespace zrt
