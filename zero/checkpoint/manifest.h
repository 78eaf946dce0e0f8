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
//
// The manifest's checksum (required: a manifest without one, as zrt wrote before it had them, is
// refused and must be re-saved) is XXH3 of its canonical text (the JSON without the
// "manifest_checksum" key, dumped compactly), so a changed value anywhere is refused after the
// structural checks (whose messages are more precise) and before anything is used; formatting
// does not matter. Each shard file ends with an identity record (shard_identity) naming the
// step, the rank and, for every piece, the parameter (by name), the range it holds; the loader
// compares it with the manifest, so a shard from another save or another rank is refused even
// where its size would fit.
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
  // The identity record at [identity_offset, identity_offset + identity_bytes); 0 bytes = none
  // (a manifest built without one, as tools and tests do; every save writes one).
  uint64_t identity_offset = 0;
  uint64_t identity_bytes = 0;
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
// The same in two verdicts, for a loader whose own checks name a fault more precisely (another
// model): the structure's (returned; *manifest is set only when it passed) and the checksum's
// (*checksum). The loader must refuse the manifest unless both pass.
Status parse_manifest_structure(std::string_view bytes, const std::string& origin,
                                Manifest* manifest, Status* checksum);

// The identity record of `file` in a checkpoint of `step` whose parameters are `params`
// (fixed little-endian layout: magic, step, rank, piece counts, then per piece the XXH3 of the
// parameter's name, its index, first element and count).
std::string shard_identity(const ManifestFile& file, int64_t step,
                           const std::vector<ManifestParam>& params);
// Appends the identity record to a file record (after its sections; bytes grows).
void add_shard_identity(ManifestFile* file, int64_t step, const std::vector<ManifestParam>& params);
// Compares a record read from the file with the manifest's; the error names `path` and the
// first field that differs.
Status check_shard_identity(const std::string& found, const ManifestFile& file, int64_t step,
                            const std::vector<ManifestParam>& params, const std::string& path);

// Where a section's pieces come from.
const std::vector<ManifestPiece>& section_pieces(const ManifestFile& file, SectionKind kind);

}  // namespace zrt
