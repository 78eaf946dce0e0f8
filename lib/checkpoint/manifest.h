// The checkpoint manifest: the one file that makes a set of shard files a checkpoint.
//
// It describes every parameter by index, name, element count and whether it is frozen, and for
// every shard file its size, checksum and contents. A file holds sections (master, each
// optimizer state slot, the param-dtype copy when param_dtype is not f32, the frozen
// parameters), each a packed run of elements in one dtype; a section of kind master/state/param
// packs the file's `trainable` pieces in order, a frozen section its `frozen` pieces. A piece is
// (parameter, first element, count). So each byte range of each file maps to a (parameter,
// element range), whatever N, stage or bucket size wrote it, and a loader at another N finds
// the ranges it owns.
//
// parse_manifest is a pure function over bytes that trusts nothing: every count, offset and
// index is range-checked, sections must fit their file and not overlap, and the pieces of all
// files must tile every parameter exactly once (master and state), so a loader that passed it
// can index without further checks.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "lib/core/status.h"
#include "zrt/zrt.h"

namespace zrt {

inline constexpr int kManifestVersion = 1;
inline constexpr const char* kManifestFormat = "zrt-sharded-checkpoint";
inline constexpr const char* kManifestName = "manifest.json";

struct ManifestParam {
  std::string name;
  std::string unit;  // the unit's name (informational: units may be regrouped across runs)
  uint64_t numel = 0;
  bool frozen = false;
  // The registered shape, whose product is numel ([] for a scalar); absent in manifests written
  // before shapes (the key is optional, so the format version did not change).
  std::optional<std::vector<uint64_t>> shape = std::nullopt;
};

struct ManifestPiece {
  uint32_t param = 0;
  uint64_t param_offset = 0;
  uint64_t count = 0;
};

enum class SectionKind : uint8_t { kMaster, kState, kParam, kFrozen };
const char* section_kind_name(SectionKind kind);

struct ManifestSection {
  SectionKind kind = SectionKind::kMaster;
  int slot = 0;  // kState: the optimizer state slot
  zrt_dtype_t dtype = ZRT_F32;
  uint64_t offset = 0;  // bytes from the start of the file
  uint64_t bytes = 0;
};

struct ManifestFile {
  std::string name;  // relative to the checkpoint folder; a plain file name
  int rank = 0;      // the rank that wrote it
  uint64_t bytes = 0;
  uint64_t checksum = 0;
  std::vector<ManifestPiece> trainable;
  std::vector<ManifestPiece> frozen;
  std::vector<ManifestSection> sections;
};

struct Manifest {
  int version = kManifestVersion;
  int64_t step = 0;
  int world_size = 1;  // N at save time
  int stage = 0;       // at save time (informational)
  zrt_dtype_t param_dtype = ZRT_F32;
  int optimizer_slots = 0;
  std::vector<ManifestParam> params;
  std::vector<ManifestFile> files;
};

// JSON text of a manifest (compact, one line per file record).
std::string serialize_manifest(const Manifest& manifest);

// Parses and validates `bytes`; `origin` (the path) prefixes every error message. Errors are
// ZRT_INVALID_ARGUMENT and name the key, file or parameter at fault.
Status parse_manifest(std::string_view bytes, const std::string& origin, Manifest* manifest);

// Where a section's pieces come from.
const std::vector<ManifestPiece>& section_pieces(const ManifestFile& file, SectionKind kind);

}  // namespace zrt
