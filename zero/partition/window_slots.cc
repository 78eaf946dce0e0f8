#include "zero/partition/window_slots.h"

#include <utility>

namespace zrt {

WindowSlots::WindowSlots(int slots, std::vector<uint64_t> unit_bytes)
    : slots_(static_cast<size_t>(slots)),
      unit_bytes_(std::move(unit_bytes)),
      slot_of_(unit_bytes_.size(), -1),
      next_slot_(unit_bytes_.size(), -1) {}

uint64_t WindowSlots::live_bytes() const {
  uint64_t live = 0;
  for (const Slot& s : slots_) live += s.unit >= 0 ? unit_bytes_[s.unit] : 0;
  return live;
}

int WindowSlots::occupied() const {
  int units = 0;
  for (const Slot& s : slots_) units += s.unit >= 0;
  return units;
}

int WindowSlots::find_free() const {
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (slots_[i].unit < 0) return static_cast<int>(i);
  }
  return -1;
}

int WindowSlots::evictable() const {
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (slots_[i].prefetched) return static_cast<int>(i);
  }
  return -1;
}

bool WindowSlots::prefetch_fits(uint64_t bytes, uint64_t prefetch_cap, uint64_t live_cap) const {
  if (prefetch_cap > 0 && prefetched_bytes_ + bytes > prefetch_cap) return false;
  if (live_cap > 0 && live_bytes() + bytes > live_cap) return false;
  return true;
}

void WindowSlots::occupy(int unit, int slot, bool prefetch, bool again) {
  slots_[slot].unit = unit;
  slots_[slot].prefetched = prefetch;
  (again ? next_slot_ : slot_of_)[unit] = slot;
  if (prefetch) prefetched_bytes_ += unit_bytes_[unit];
}

void WindowSlots::claim(int slot) {
  Slot& s = slots_[slot];
  if (!s.prefetched) return;
  prefetched_bytes_ -= unit_bytes_[s.unit];
  s.prefetched = false;
}

void WindowSlots::drop(int slot) {
  Slot& victim = slots_[slot];
  if (victim.prefetched) prefetched_bytes_ -= unit_bytes_[victim.unit];
  if (next_slot_[victim.unit] == slot) {
    next_slot_[victim.unit] = -1;
  } else {
    slot_of_[victim.unit] = -1;
  }
  victim.unit = -1;
  victim.prefetched = false;
}

void WindowSlots::release(int unit) {
  const int slot = slot_of_[unit];
  if (slot < 0) return;
  slots_[slot].unit = -1;
  slots_[slot].prefetched = false;
  slot_of_[unit] = next_slot_[unit];  // a second copy gathered ahead, or -1
  next_slot_[unit] = -1;
}

void WindowSlots::forget(const std::vector<uint8_t>& fetched) {
  for (size_t i = 0; i < slots_.size(); ++i) {
    const Slot& slot = slots_[i];
    if (slot.unit >= 0 && (slot.prefetched || !fetched[slot.unit])) drop(static_cast<int>(i));
  }
}

}  // namespace zrt
