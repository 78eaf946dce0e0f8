// A one-line progress indicator on stderr for sweeps that take more than a few seconds.
// It only draws on a terminal (a redirected stderr stays clean for logs), and only once the
// work has run past `delay` so that quick runs print nothing at all.
#pragma once

#include <chrono>
#include <cstdio>
#include <string>

namespace zrt::tools {

class ProgressLine {
 public:
  // enabled=false silences it (e.g. ranks other than 0); it is also silent when `stream` is not
  // a terminal.
  ProgressLine(std::FILE* stream, bool enabled,
               std::chrono::milliseconds delay = std::chrono::milliseconds(2000));
  ~ProgressLine();
  ProgressLine(const ProgressLine&) = delete;
  ProgressLine& operator=(const ProgressLine&) = delete;

  // `done` of `total` steps finished; `label` says what is running now.
  void update(size_t done, size_t total, const std::string& label);
  // Clears the line (call before printing results to the same terminal).
  void finish();

  bool active() const { return enabled_; }

 private:
  std::FILE* stream_;
  bool enabled_;
  bool drawn_ = false;
  std::chrono::milliseconds delay_;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_draw_;
};

// The text of a progress line (exposed for tests): "[=====>    ]  45%  12/27  label  3.1 s".
std::string format_progress(size_t done, size_t total, const std::string& label, double seconds,
                            size_t bar_width = 24);

}  // namespace zrt::tools
