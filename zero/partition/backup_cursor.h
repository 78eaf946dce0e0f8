// BackupCursor: how much of the step backup is current (step_transaction.h). Master and the
// optimizer state slots are seen as one array of `total` elements; the backup is copied in
// shares of 1/units of it, one per fetch, and is current once the cursor reaches the end.
// Pure bookkeeping: the copies are the transaction's.
#pragma once

#include <algorithm>
#include <cstddef>

namespace zrt {

class BackupCursor {
 public:
  BackupCursor(size_t total, size_t units) : total_(total), units_(std::max<size_t>(1, units)) {}

  size_t total() const { return total_; }
  size_t cursor() const { return cursor_; }
  bool current() const { return cursor_ == total_; }
  // The end of the next share, starting at cursor().
  size_t share_end() const { return std::min(total_, cursor_ + (total_ + units_ - 1) / units_); }
  void advance_to(size_t end) { cursor_ = end; }
  void complete() { cursor_ = total_; }
  // Master or state changed: nothing of the backup is current.
  void invalidate() { cursor_ = 0; }

 private:
  size_t total_;
  size_t units_;
  size_t cursor_ = 0;
};

}  // namespace zrt
