#include "zero/partition/arena.h"

#include <cstring>
#include <iterator>
#include <string>

#include "transports/transport.h"

namespace zrt {
namespace {

class HostArenaBackend final : public ArenaBackend {
 public:
  explicit HostArenaBackend(Transport& transport) : transport_(transport) {}
  Status allocate(size_t bytes, void** block) override {
    ZRT_RETURN_IF_ERROR(transport_.alloc_registered(bytes, block));
    std::memset(*block, 0, bytes);
    return Status::ok();
  }
  void free(void* block) override { transport_.free_registered(block); }

 private:
  Transport& transport_;
};

}  // namespace

std::unique_ptr<ArenaBackend> create_host_arena_backend(Transport& transport) {
  return std::make_unique<HostArenaBackend>(transport);
}

Arena::~Arena() {
  if (block_ != nullptr) backend_->free(block_);
}

size_t Arena::grow() {
  if (entry_count_ == entry_capacity_) {
    const size_t capacity = entry_capacity_ == 0 ? 32 : entry_capacity_ * 2;
    auto grown = std::make_unique<Entry[]>(capacity);
    for (size_t i = 0; i < entry_count_; ++i) grown[i] = entries_[i];
    entries_ = std::move(grown);
    entry_capacity_ = capacity;
  }
  return entry_count_++;
}

size_t Arena::plan(size_t bytes, MemoryCategory category) {
  const size_t handle = grow();
  entries_[handle] = Entry{total_, bytes, category, false};
  total_ += (bytes + kAlignment - 1) / kAlignment * kAlignment;
  return handle;
}

void Arena::count_external(size_t bytes, MemoryCategory category) {
  entries_[grow()] = Entry{0, bytes, category, true};
}

// "parameter shard 1024, gradients 4096, ..." for the categories that hold bytes: what an
// admission refusal (lib/core/memory_probe.h) tells the user to shrink.
std::string Arena::describe_categories() const {
  static constexpr const char* kNames[] = {
      "full parameters", "parameter shard",     "gradients",
      "gradient shard",  "master weights",      "optimizer state",
      "buckets",         "gather window",       "gradient staging",
      "step backup",     "secondary parameters"};
  static_assert(std::size(kNames) == static_cast<size_t>(MemoryCategory::kCount));
  size_t bytes[static_cast<size_t>(MemoryCategory::kCount)] = {};
  for (size_t i = 0; i < entry_count_; ++i) {
    bytes[static_cast<size_t>(entries_[i].category)] += entries_[i].bytes;
  }
  std::string text;
  for (size_t c = 0; c < std::size(kNames); ++c) {
    if (bytes[c] == 0) continue;
    if (!text.empty()) text += ", ";
    text += fmt::format("{} {}", kNames[c], bytes[c]);
  }
  return text;
}

Status Arena::commit() {
  if (block_ != nullptr) return Status(ZRT_INTERNAL_ERROR, "arena committed twice");
  const size_t bytes = total_ == 0 ? kAlignment : total_;
  Status status = backend_->allocate(bytes, &block_);
  if (!status.is_ok()) {
    block_ = nullptr;
    return status.with_context(
        fmt::format("allocating the {}-byte partition arena ({})", bytes, describe_categories()));
  }
  return Status::ok();
}

void* Arena::address(size_t handle) const {
  if (entries_[handle].bytes == 0 || entries_[handle].external) return nullptr;
  return static_cast<char*>(block_) + entries_[handle].offset;
}

void Arena::measure(MemoryFigures* f) const {
  uint64_t sums[static_cast<int>(MemoryCategory::kCount)] = {};
  for (size_t i = 0; i < entry_count_; ++i) {
    sums[static_cast<int>(entries_[i].category)] += entries_[i].bytes;
  }
  f->full_params = sums[static_cast<int>(MemoryCategory::kFullParams)];
  f->param_shard = sums[static_cast<int>(MemoryCategory::kParamShard)];
  f->gradients = sums[static_cast<int>(MemoryCategory::kGradients)];
  f->grad_shard = sums[static_cast<int>(MemoryCategory::kGradShard)];
  f->master = sums[static_cast<int>(MemoryCategory::kMaster)];
  f->optimizer_state = sums[static_cast<int>(MemoryCategory::kOptimizerState)];
  f->buckets = sums[static_cast<int>(MemoryCategory::kBuckets)];
  f->gather_window = sums[static_cast<int>(MemoryCategory::kGatherWindow)];
  f->grad_staging = sums[static_cast<int>(MemoryCategory::kGradStaging)];
  f->step_backup = sums[static_cast<int>(MemoryCategory::kStepBackup)];
  f->param_secondary = sums[static_cast<int>(MemoryCategory::kParamSecondary)];
  f->host_model_state = 0;  // one arena is one side; PartitionResources::measure joins two
  f->host_total = 0;
  complete_memory_figures(f);
}

}  // namespace zrt
