// Arena: every long-lived buffer of a partition manager is carved, at finalize, out of one block
// obtained from a backend and touched once (first-touch costs ~11 us per 4 KiB page on this
// machine, docs/ARCHITECTURE.md#measured-costs), so nothing is allocated on the training path and
// memory does not fragment. Each carve is tagged with its category, which is how
// zrt_partition_memory measures what the manager holds. A device backend (ZRT_MEM_CUDA) only
// replaces the block allocation.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "lib/core/status.h"
#include "engine/arena_backend.h"
#include "zero/partition/memory_model.h"

namespace zrt {

class Transport;

enum class MemoryCategory : uint8_t {
  kFullParams,
  kParamShard,
  kGradients,
  kGradShard,
  kMaster,
  kOptimizerState,
  kBuckets,
  kGatherWindow,
  kGradStaging,
  kStepBackup,
  kParamSecondary,
  kCount
};

// Transport-registered host memory, so that peers can access buckets and windows directly.
std::unique_ptr<ArenaBackend> create_host_arena_backend(Transport& transport);

class Arena {
 public:
  static constexpr size_t kAlignment = 256;

  explicit Arena(std::unique_ptr<ArenaBackend> backend) : backend_(std::move(backend)) {}
  ~Arena();
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  // Plans a buffer of `bytes`; its address is known after commit(). Returns a handle index.
  size_t plan(size_t bytes, MemoryCategory category);
  // Counts `bytes` of `category` that live outside the block (the stage 3 gather window's own
  // mapping, mapped_window.h), so that measure() still reports them; nothing is carved.
  void count_external(size_t bytes, MemoryCategory category);
  // Allocates the block and fixes every planned buffer's address.
  Status commit();
  void* address(size_t handle) const;

  // Bytes carved per category (without alignment gaps), filled into figures' byte fields.
  void measure(MemoryFigures* figures) const;
  // Bytes per category that holds any, in words, for messages.
  std::string describe_categories() const;

 private:
  struct Entry {
    size_t offset = 0;
    size_t bytes = 0;
    MemoryCategory category = MemoryCategory::kFullParams;
    bool external = false;
  };
  std::unique_ptr<ArenaBackend> backend_;
  std::unique_ptr<Entry[]> entries_;
  size_t entry_count_ = 0;
  size_t entry_capacity_ = 0;
  size_t total_ = 0;
  void* block_ = nullptr;
  size_t grow();
};

}  // namespace zrt
