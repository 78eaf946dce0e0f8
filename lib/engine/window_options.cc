// resolve_window_geometry: the window inbox's slot count and size, from EngineOptions or the
// environment (ZRT_WINDOW_SLOTS, ZRT_WINDOW_SLOT_KIB), for tuning on a given machine.
#include <cerrno>
#include <cstdlib>

#include "lib/engine/engine.h"
#include "lib/engine/stream_resources.h"

namespace zrt {
namespace {

// An unset or empty variable leaves *value alone.
Status read_env_integer(const char* name, long long* value) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return Status::ok();
  errno = 0;
  char* end = nullptr;
  const long long parsed = std::strtoll(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0') {
    return Status::invalid_argument("{}='{}' is not an integer", name, text);
  }
  *value = parsed;
  return Status::ok();
}

}  // namespace

Status resolve_window_geometry(EngineOptions* options) {
  if (options->window_slots == -1) {
    long long slots = kWindowSlots;
    ZRT_RETURN_IF_ERROR(read_env_integer("ZRT_WINDOW_SLOTS", &slots));
    if (slots < 2 || slots > kWindowMaxSlots) {
      return Status::invalid_argument("ZRT_WINDOW_SLOTS={} is not in [2, {}]", slots,
                                      kWindowMaxSlots);
    }
    options->window_slots = static_cast<int>(slots);
  }
  if (options->window_slot_bytes == 0) {
    long long kib = static_cast<long long>(kWindowSlotBytes >> 10);
    ZRT_RETURN_IF_ERROR(read_env_integer("ZRT_WINDOW_SLOT_KIB", &kib));
    const long long min_kib = static_cast<long long>(kWindowMinSlotBytes >> 10);
    const long long max_kib = static_cast<long long>(kWindowMaxSlotBytes >> 10);
    if (kib < min_kib || kib > max_kib || kib % 4 != 0) {
      return Status::invalid_argument("ZRT_WINDOW_SLOT_KIB={} is not a multiple of 4 in [{}, {}]",
                                      kib, min_kib, max_kib);
    }
    options->window_slot_bytes = static_cast<size_t>(kib) << 10;
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
