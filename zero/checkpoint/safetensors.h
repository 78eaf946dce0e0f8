// The consolidated export format: safetensors (huggingface/safetensors), which many tools read.
// Layout: an 8-byte little-endian header length H, H bytes of JSON (padded with spaces to a
// multiple of 8) mapping each tensor name to {"dtype", "shape", "data_offsets": [begin, end]}
// plus a "__metadata__" object of strings, then the tensors' bytes back to back, offsets
// relative to the end of the header.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "lib/core/status.h"
#include "zrt/zrt.h"

namespace zrt {

struct SafetensorsTensor {
  std::string name;
  zrt_dtype_t dtype = ZRT_F32;
  uint64_t numel = 0;
  uint64_t begin = 0;  // data offsets, relative to the data start
  uint64_t end = 0;
  std::optional<std::vector<uint64_t>> shape = std::nullopt;  // product numel; none = [numel]
};

struct SafetensorsFile {
  std::vector<SafetensorsTensor> tensors;  // in data order
  std::map<std::string, std::string> metadata;
  uint64_t data_start = 0;  // 8 + H
};

// Lays out `tensors` (name, dtype, numel; offsets filled in, in order) and returns the header
// bytes (length prefix included). Names must be unique.
Status safetensors_build(SafetensorsFile* file, std::string* header);

// Parses a header (the first bytes of a file, at least 8 + H of them); checks offsets tile the
// data. For the tool and the tests.
Status safetensors_parse(std::string_view bytes, const std::string& origin, SafetensorsFile* file);

// Tensor names from parameter (unit, name) pairs: "unit.name" (just "name" when it already
// starts with "unit."), made unique with ".<index>".
std::vector<std::string> export_tensor_names(const std::vector<std::string>& units,
                                             const std::vector<std::string>& names);

}  // namespace zrt
