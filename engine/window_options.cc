// resolve_window_geometry: the window inbox's slot count and size, from EngineOptions or the
// settings registry (ZRT_WINDOW_SLOTS, ZRT_WINDOW_SLOT_KIB), for tuning on a given machine.

#include "lib/core/settings.h"
#include "engine/engine.h"
#include "engine/stream_resources.h"

namespace zrt {
Status resolve_window_geometry(EngineOptions* options) {
  // The registry's defaults and ranges for ZRT_WINDOW_SLOTS / ZRT_WINDOW_SLOT_KIB are these
  // constants (tests/core checks them); the checks below still hold a caller's own values.
  if (options->window_slots == -1) {
    SettingValue slots;
    ZRT_RETURN_IF_ERROR(load_setting(SettingId::kWindowSlots, &slots));
    options->window_slots = static_cast<int>(slots.integer);
  }
  if (options->window_slot_bytes == 0) {
    SettingValue kib;
    ZRT_RETURN_IF_ERROR(load_setting(SettingId::kWindowSlotKib, &kib));
    options->window_slot_bytes = static_cast<size_t>(kib.integer) << 10;
  }
  if (options->window_slots < 2 || options->window_slots > kWindowMaxSlots) {
    return Status::invalid_argument("window_slots {} is not in [2, {}]", options->window_slots,
                                    kWindowMaxSlots);
  }
  if (options->window_slot_bytes < kWindowMinSlotBytes ||
      options->window_slot_bytes > kWindowMaxSlotBytes ||
      options->window_slot_bytes % kWindowMinSlotBytes != 0) {
    return Status::invalid_argument("window_slot_bytes {} is not a multiple of {} in [{}, {}]",
                                    options->window_slot_bytes, kWindowMinSlotBytes,
                                    kWindowMinSlotBytes, kWindowMaxSlotBytes);
  }
  return Status::ok();
}

}  // namespace zrt
