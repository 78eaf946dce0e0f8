#include "tools/common/progress.h"

#include <unistd.h>

#include <fmt/format.h>

namespace zrt::tools {

ProgressLine::ProgressLine(std::FILE* stream, bool enabled, std::chrono::milliseconds delay)
    : stream_(stream),
      enabled_(enabled && stream != nullptr && isatty(fileno(stream)) == 1),
      delay_(delay),
      start_(std::chrono::steady_clock::now()),
      last_draw_(start_) {}

ProgressLine::~ProgressLine() {
  finish();
}

void ProgressLine::update(size_t done, size_t total, const std::string& label) {
  if (!enabled_) return;
  auto now = std::chrono::steady_clock::now();
  if (now - start_ < delay_) return;
  // Redrawing more than a few times a second costs terminal time and reads as flicker.
  if (drawn_ && now - last_draw_ < std::chrono::milliseconds(200) && done < total) return;
  double seconds = std::chrono::duration<double>(now - start_).count();
  std::string text = format_progress(done, total, label, seconds);
  fmt::print(stream_, "\r\033[K{}", text);
  std::fflush(stream_);
  drawn_ = true;
  last_draw_ = now;
}

void ProgressLine::finish() {
  if (!drawn_) return;
  fmt::print(stream_, "\r\033[K");
  std::fflush(stream_);
  drawn_ = false;
}

std::string format_progress(size_t done, size_t total, const std::string& label, double seconds,
                            size_t bar_width) {
  double fraction = total == 0 ? 1.0 : static_cast<double>(done) / static_cast<double>(total);
  if (fraction > 1.0) fraction = 1.0;
  size_t filled = static_cast<size_t>(fraction * static_cast<double>(bar_width));
  std::string bar(filled, '=');
  if (filled < bar_width) bar += '>';
  bar.resize(bar_width, ' ');
  return fmt::format("[{}] {:3.0f}%  {}/{}  {}  {:.1f} s", bar, fraction * 100.0, done, total,
                     label, seconds);
}

}  // namespace zrt::tools
