// Checksum: the per-file digest of checkpoints (XXH3, 64 bits: it hashes at the memory's read
// rate on one core, so verifying a shard costs far less than reading it; measured:
// docs/ARCHITECTURE.md#measured-costs). Streaming, so a file is hashed as it is written or read,
// in pieces of any size.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

struct XXH3_state_s;

namespace zrt {

// The algorithm's name as the manifest records it.
inline constexpr const char* kChecksumAlgorithm = "xxh3-64";

class Checksum {
 public:
  Checksum();
  ~Checksum();
  Checksum(const Checksum&) = delete;
  Checksum& operator=(const Checksum&) = delete;

  void reset();
  void update(const void* data, size_t bytes);
  uint64_t digest() const;

 private:
  XXH3_state_s* state_;
};

// One-shot digest.
uint64_t checksum_of(const void* data, size_t bytes);

// 16 lower-case hex digits, and back (false for anything else).
std::string checksum_to_hex(uint64_t value);
bool checksum_from_hex(std::string_view text, uint64_t* value);

}  // namespace zrt
