#include "tools/zrt-run/line_relay.h"

#include <unistd.h>

#include <cerrno>

namespace zrt {

void LineRelay::feed(std::string_view bytes) {
  while (!bytes.empty()) {
    const size_t newline = bytes.find('\n');
    if (newline == std::string_view::npos) {
      pending_.append(bytes);
      while (pending_.size() >= kMaxLineBytes) {
        emit(std::string_view(pending_).substr(0, kMaxLineBytes));
        pending_.erase(0, kMaxLineBytes);
      }
      return;
    }
    if (pending_.empty()) {
      emit(bytes.substr(0, newline));
    } else {
      pending_.append(bytes.substr(0, newline));
      emit(pending_);
      pending_.clear();
    }
    bytes.remove_prefix(newline + 1);
  }
}

void LineRelay::finish() {
  if (pending_.empty()) return;
  emit(pending_);
  pending_.clear();
}

void LineRelay::emit(std::string_view line) {
  std::string out;
  out.reserve(prefix_.size() + line.size() + 1);
  out.append(prefix_).append(line).push_back('\n');
  size_t written = 0;
  while (written < out.size()) {
    const ssize_t n = write(fd_, out.data() + written, out.size() - written);
    if (n < 0) {
      if (errno == EINTR) continue;
      return;  // our own stdout is gone (a closed pipe): nothing sensible left to do with it
    }
    written += static_cast<size_t>(n);
  }
}

}  // namespace zrt
