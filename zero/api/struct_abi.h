// The ABI rule of zrt.h's growable structs, in one place: a struct starts with its size (config
// structs then magic and version) and grows only at its end; zrt accepts a caller's struct of any
// size from the end of that header on, reads a config's fields that the size covers (the rest
// keep their defaults) and writes only the first `size` bytes of a query struct. Entry points
// widen the caller's struct into a whole one before the layers below see it, so those layers
// never meet a short struct.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstring>

#include "lib/core/status.h"
#include "zrt/zrt.h"

namespace zrt::api {

// The bytes of a config struct's header: size, magic and version.
inline constexpr size_t kConfigHeaderEnd = sizeof(size_t) + 2 * sizeof(uint32_t);
// The bytes of a query struct's header: its size.
inline constexpr size_t kQueryHeaderEnd = sizeof(size_t);

// Whether a caller's struct of `caller_size` bytes holds `member` of `type` whole.
#define ZRT_API_COVERS(caller_size, type, member) \
  ((caller_size) >= offsetof(type, member) + sizeof(static_cast<type*>(nullptr)->member))

// The size field every growable struct starts with (zrt_oob_t calls it struct_size).
template <typename T>
size_t struct_size(const T* value) {
  size_t size = 0;
  std::memcpy(&size, value, sizeof(size));
  return size;
}

// Refuses a size below the header or (for inputs) above what this library knows.
template <typename T>
Status check_input_size(const T* value, const char* field, size_t header_end, const char* init) {
  const size_t size = struct_size(value);
  if (size < header_end || size > sizeof(T)) {
    return Status::invalid_argument(
        "{} is {}; expected {} to {} bytes (initialise the struct with {})", field, size,
        header_end, sizeof(T), init);
  }
  return Status::ok();
}

// Refuses a query struct whose size does not even hold the size field.
template <typename T>
Status check_query_size(const T* out, const char* arg) {
  if (out == nullptr) return Status::invalid_argument("{} is NULL", arg);
  const size_t size = struct_size(out);
  if (size < kQueryHeaderEnd) {
    return Status::invalid_argument("{}->size is {}; set it to sizeof the struct", arg, size);
  }
  return Status::ok();
}

// Copies `full` into the caller's *out, only the first out->size bytes and never the first
// `keep` bytes (the caller's own header: its size, and a config's magic and version).
template <typename T>
void write_prefix(const T& full, T* out, size_t keep) {
  const size_t end = std::min(struct_size(out), sizeof(T));
  if (end <= keep) return;
  std::memcpy(reinterpret_cast<char*>(out) + keep, reinterpret_cast<const char*>(&full) + keep,
              end - keep);
}

// The zrt_..._init functions: `defaults` (the INIT macro's value) into the first `size` bytes
// of *out, whose size field then says how much of the struct this library filled.
template <typename T>
Status init_prefix(T* out, size_t size, const T& defaults, size_t header_end, const char* arg) {
  if (out == nullptr) return Status::invalid_argument("{} is NULL", arg);
  if (size < header_end) {
    return Status::invalid_argument("size is {}; the struct's header alone has {} bytes", size,
                                    header_end);
  }
  const size_t known = std::min(size, sizeof(T));
  std::memset(static_cast<void*>(out), 0, size);
  std::memcpy(static_cast<void*>(out), &defaults, known);
  std::memcpy(static_cast<void*>(out), &known, sizeof(known));
  return Status::ok();
}

}  // namespace zrt::api
