// Sharded checkpoints of a PartitionManager (zrt_partition_save / load / export_full).
//
// A checkpoint is a folder: one shard file per rank of the saving run, and manifest.json
// (manifest.h) which maps every byte range of every shard file to a (parameter, element range).
//
// Save (collective): rank 0 picks a tag for this save; each rank writes its own shard file
// "shard-<tag>-r<r>-of-<N>.bin" (temporary name, fsync, rename, fsync of the folder) with its
// master, optimizer state and param-dtype sections, hashing as it writes; the ranks exchange
// sizes and checksums (the exchange doubles as the barrier); rank 0 then writes the manifest the
// same way, last, and only after it is durable removes the files of earlier saves. A crash at any
// point leaves the previous manifest and every file it names intact: loadable.
//
// Load (collective, any N, stage, bucket size): every rank reads the manifest, checks it against
// its own model (names, sizes, frozen flags, state slots), works out which byte ranges of which
// files hold the elements its shard now owns, and reads just those into staging buffers. Each
// file is also verified whole by exactly one rank (file i by rank i mod N), streaming its bytes
// through the checksum while extracting that rank's ranges. The ranks then agree on the outcome:
// only when every rank succeeded does each commit its staging into the manager (which then
// republishes its parameters as after a step); otherwise every rank returns the same error and
// nothing changed.
//
// Export (collective): the full parameters, a segment at a time (a bucket, or a stage 3 unit,
// gathered from the master shards), written by rank 0 into one safetensors file.
#pragma once

#include <string>

#include "lib/core/status.h"
#include "zrt/zrt.h"

namespace zrt {

class PartitionManager;

Status save_checkpoint(PartitionManager& pm, const std::string& dir);
Status load_checkpoint(PartitionManager& pm, const std::string& dir);
// dtype: ZRT_F32, ZRT_F16 or ZRT_BF16 (the tensors are converted from the f32 master).
Status export_full(PartitionManager& pm, const std::string& path, zrt_dtype_t dtype);

}  // namespace zrt
