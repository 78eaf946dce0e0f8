// Relays one rank's output stream (read from a pipe) to the launcher's own stdout or stderr,
// line by line, each line prefixed with the rank. Whole lines go out in one write() so that
// lines of different ranks never interleave mid-line. A line longer than kMaxLineBytes is cut
// (and continued on the next prefixed line) so that a rank that never prints a newline cannot
// make the launcher buffer without bound.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace zrt {

class LineRelay {
 public:
  static constexpr size_t kMaxLineBytes = 64 * 1024;

  // prefix "" = copy the lines as they are.
  LineRelay(int output_fd, std::string prefix) : fd_(output_fd), prefix_(std::move(prefix)) {}

  // Forwards every complete line in `bytes`, keeps the rest for later.
  void feed(std::string_view bytes);
  // End of stream: forwards a last unterminated line, with a newline added.
  void finish();

 private:
  void emit(std::string_view line);  // line without its newline

  int fd_;
  std::string prefix_;
  std::string pending_;
};

}  // namespace zrt
