// Which elements each rank writes into its shard file, derived from the layout alone, so rank 0
// can describe every file of the manifest without asking the others. Rank r writes its shard's
// pieces (when the stage shards, S = N); at stage 0, where every rank holds everything, the
// ranks split the one shard evenly so the writing still runs in parallel. The replicated frozen
// parameters are split evenly the same way.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "zero/checkpoint/manifest.h"
#include "zero/partition/layout.h"

namespace zrt {

// Elements [param_offset, param_offset + count) of `param`, at element `source_offset` of the
// local shard (trainable) or of the frozen store (frozen).
struct WritePiece {
  int param = 0;
  uint64_t param_offset = 0;
  uint64_t source_offset = 0;
  uint64_t count = 0;
};

struct RankContents {
  std::vector<WritePiece> trainable;
  std::vector<WritePiece> frozen;
};

RankContents rank_contents(const Layout& layout, int rank, int world);

// The file record for those contents: sections master, state 0..slots-1, param (when
// param_dtype is not f32), frozen (when there are frozen pieces), packed in that order. Bytes
// and checksum are left for the writer to fill.
ManifestFile describe_rank_file(const RankContents& contents, zrt_dtype_t param_dtype, int slots,
                                const std::string& name, int rank);

// "shard-<tag>-r00003-of-00004.bin"; the tag differs per save so a new save never overwrites a
// file the previous manifest names.
std::string shard_file_name(const std::string& tag, int rank, int world);
// Shard files and temporaries of any save (what garbage collection may remove).
bool is_checkpoint_data_file(const std::string& name);

}  // namespace zrt
