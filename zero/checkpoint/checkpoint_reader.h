// Offline access to a checkpoint folder, without ranks or a partition manager: what zrt-ckpt
// uses to inspect, verify and consolidate a checkpoint.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "zero/checkpoint/manifest.h"
#include "lib/core/status.h"

namespace zrt {

class ElementOps;

class CheckpointReader {
 public:
  CheckpointReader();
  ~CheckpointReader();

  // Reads and validates dir/manifest.json.
  Status open(const std::string& dir);
  const Manifest& manifest() const { return manifest_; }
  const std::string& dir() const { return dir_; }

  // Streams file `index` through the checksum; *actual gets the digest. Errors name the file
  // when it is missing, truncated or does not match the manifest's checksum.
  Status verify_file(size_t index, uint64_t* actual) const;

  // Elements [offset, offset + count) of `param` (from the f32 master for trainable
  // parameters, from the frozen section for frozen ones), converted to `dtype`, into out.
  Status read_param(uint32_t param, uint64_t offset, uint64_t count, zrt_dtype_t dtype,
                    void* out) const;

 private:
  std::string dir_;
  Manifest manifest_;
  struct Run {
    uint32_t file;
    uint64_t param_offset, count, element;
  };
  std::vector<std::vector<Run>> runs_;  // per parameter, in element order
  std::unique_ptr<ElementOps> ops_;
};

// Verifies every file, then writes the full parameters in `dtype` (f32, f16, bf16) to one
// safetensors file at `out` (temporary name, fsync, rename), a bounded chunk at a time. The
// tensor names and metadata are those of zrt_partition_export_full, so both give the same file.
Status consolidate_checkpoint(const std::string& dir, const std::string& out, zrt_dtype_t dtype);

}  // namespace zrt
