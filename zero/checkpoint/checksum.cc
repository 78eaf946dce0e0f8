#include "zero/checkpoint/checksum.h"

#include <xxhash.h>

#include <fmt/format.h>

#include <new>

namespace zrt {

Checksum::Checksum() : state_(XXH3_createState()) {
  if (state_ == nullptr) throw std::bad_alloc();
  reset();
}

Checksum::~Checksum() {
  XXH3_freeState(state_);
}

void Checksum::reset() {
  XXH3_64bits_reset(state_);
}

void Checksum::update(const void* data, size_t bytes) {
  if (bytes > 0) XXH3_64bits_update(state_, data, bytes);
}

uint64_t Checksum::digest() const {
  return XXH3_64bits_digest(state_);
}

uint64_t checksum_of(const void* data, size_t bytes) {
  return XXH3_64bits(data, bytes);
}

std::string checksum_to_hex(uint64_t value) {
  return fmt::format("{:016x}", value);
}

bool checksum_from_hex(std::string_view text, uint64_t* value) {
  if (text.size() != 16) return false;
  uint64_t result = 0;
  for (char c : text) {
    int digit = 0;
    if (c >= '0' && c <= '9') {
      digit = c - '0';
    } else if (c >= 'a' && c <= 'f') {
      digit = c - 'a' + 10;
    } else {
      return false;
    }
    result = (result << 4) | static_cast<uint64_t>(digit);
  }
  *value = result;
  return true;
}

}  // namespace zrt
