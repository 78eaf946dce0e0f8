#include "lib/core/status.h"

#include <cstring>

namespace zrt {

Status Status::system_error(const std::string& what, int err) {
  char buffer[256];
  // GNU strerror_r may return a static string instead of filling the buffer.
  const char* text = strerror_r(err, buffer, sizeof(buffer));
  return Status(ZRT_SYSTEM_ERROR, fmt::format("{}: {} (errno {})", what, text, err));
}

}  // namespace zrt
