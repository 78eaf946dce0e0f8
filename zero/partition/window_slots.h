// WindowSlots: which unit each slot of the stage 3 gather window holds, and the byte budgets
// that decide whether one more gather fits. A fetched unit has one slot (slot_of); a unit the
// expected order fetches again right after (the last unit of forward is the first of
// backward) may also have its second copy gathered ahead (second_slot), which release makes its
// copy. Pure bookkeeping: the gathers and their events are the window's (gather_window.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace zrt {

class WindowSlots {
 public:
  // `unit_bytes`: the bytes of each unit's gather (0 for a unit without a segment).
  WindowSlots(int slots, std::vector<uint64_t> unit_bytes);

  int size() const { return static_cast<int>(slots_.size()); }
  int unit_in(int slot) const { return slots_[slot].unit; }  // -1: free
  bool prefetched(int slot) const { return slots_[slot].prefetched; }
  int slot_of(int unit) const { return slot_of_[unit]; }        // -1: not in the window
  int second_slot(int unit) const { return next_slot_[unit]; }  // -1: no second copy
  uint64_t unit_bytes(int unit) const { return unit_bytes_[unit]; }
  uint64_t prefetched_bytes() const { return prefetched_bytes_; }  // gathered ahead, not fetched
  uint64_t live_bytes() const;                                     // every occupied slot
  int occupied() const;

  int find_free() const;  // lowest free slot, or -1
  int evictable() const;  // lowest slot holding a unit gathered ahead and not fetched, or -1

  // Whether gathering `bytes` more ahead stays within the caps (0: no cap).
  bool prefetch_fits(uint64_t bytes, uint64_t prefetch_cap, uint64_t live_cap) const;

  // `unit` is being gathered into the free `slot`: ahead of its fetch (`prefetch`), and as its
  // second copy (`again`).
  void occupy(int unit, int slot, bool prefetch, bool again);
  // A fetch found its unit in `slot`: no longer a prefetch.
  void claim(int slot);
  // Forgets a slot's unit (a prefetch, or a copy not fetched).
  void drop(int slot);
  // A fetched unit is released: its slot is free, and its second copy, if any, becomes its copy.
  void release(int unit);
  // Drops every copy that `fetched` does not mark fetched, and every prefetch.
  void forget(const std::vector<uint8_t>& fetched);

 private:
  struct Slot {
    int unit = -1;
    bool prefetched = false;  // gathered ahead and not fetched yet
  };
  std::vector<Slot> slots_;
  std::vector<uint64_t> unit_bytes_;
  std::vector<int> slot_of_;
  std::vector<int> next_slot_;
  uint64_t prefetched_bytes_ = 0;
};

}  // namespace zrt
