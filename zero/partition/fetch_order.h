// FetchOrder: the order in which the gather window expects units to be fetched, so that it can
// gather the next ones ahead (gather_window.h). Until the first step ends it is the declared
// order, followed in the direction of the last fetches (forward, or backward once fetches go
// down); from then on it is the order recorded during that step, forward, backward and
// recomputation included. A fetch that departs from the recording ends it for good: the
// declared order is used again. Pure bookkeeping, no communication.
#pragma once

#include <cstddef>
#include <vector>

namespace zrt {

class FetchOrder {
 public:
  explicit FetchOrder(int units);

  // Notes a fetch of `unit`. Returns false when it departs from the recorded order (the
  // recording is then dropped); *expected is the unit the recording expected, or -1.
  bool note(int unit, int* expected);
  // The step ended: the first one ends the recording (true: it ended now). Rewinds.
  bool end_step();
  // Back to the start of the expected order (the next fetch is a step's first).
  void rewind();

  bool recorded() const { return recorded_; }

  // The units expected after a fetch of `unit` (-1: before the step's first fetch), in order.
  class Lookahead {
   public:
    // False when the expected order has no more units.
    bool next(int* unit);

   private:
    friend class FetchOrder;
    Lookahead(const FetchOrder& order, int unit)
        : order_(order), cursor_(order.position_), last_(unit) {}
    const FetchOrder& order_;
    size_t cursor_;
    int last_;
  };
  Lookahead ahead(int unit) const { return Lookahead(*this, unit); }

 private:
  int units_;
  bool recording_ = true;
  bool recorded_ = false;
  std::vector<int> order_;  // fetch order recorded during the first step
  size_t position_ = 0;     // fetches of this step that followed the recording
  int last_fetched_ = -1;
  int direction_ = 1;
};

}  // namespace zrt
