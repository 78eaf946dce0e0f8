#include "zero/partition/fetch_order.h"

namespace zrt {

FetchOrder::FetchOrder(int units) : units_(units) {
  order_.reserve(4 * static_cast<size_t>(units) + 16);
}

bool FetchOrder::note(int unit, int* expected) {
  bool followed = true;
  if (recording_) {
    order_.push_back(unit);
  } else if (recorded_) {
    if (position_ < order_.size() && order_[position_] == unit) {
      ++position_;
    } else {
      *expected = position_ < order_.size() ? order_[position_] : -1;
      recorded_ = false;
      followed = false;
    }
  }
  if (last_fetched_ >= 0 && unit != last_fetched_) direction_ = unit > last_fetched_ ? 1 : -1;
  last_fetched_ = unit;
  return followed;
}

bool FetchOrder::end_step() {
  const bool ended = recording_;
  if (recording_) {
    recording_ = false;
    recorded_ = !order_.empty();
  }
  rewind();
  return ended;
}

void FetchOrder::rewind() {
  position_ = 0;
  last_fetched_ = -1;
  direction_ = 1;
}

bool FetchOrder::Lookahead::next(int* unit) {
  if (order_.recorded_) {
    if (cursor_ >= order_.order_.size()) return false;
    *unit = order_.order_[cursor_++];
    return true;
  }
  last_ += order_.direction_;
  if (last_ < 0 || last_ >= order_.units_) return false;
  *unit = last_;
  return true;
}

}  // namespace zrt
