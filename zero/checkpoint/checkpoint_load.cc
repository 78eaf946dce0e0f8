// zrt_partition_load: see checkpoint.h. Everything is read and verified into staging buffers
// first; the manager's state changes only after every rank has succeeded.
#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <vector>

#include <fmt/ranges.h>

#include "zero/checkpoint/agreement.h"
#include "zero/checkpoint/checkpoint.h"
#include "zero/checkpoint/file_io.h"
#include "zero/checkpoint/manifest.h"
#include "zero/comm/communicator.h"
#include "lib/core/dtype.h"
#include "lib/core/log.h"
#include "zero/partition/partition_manager.h"

namespace zrt {
namespace {

constexpr size_t kBounceBytes = size_t{8} << 20;

// A run of one parameter's elements stored in one file, `element` elements into the file's
// packed trainable (or frozen) order.
struct SavedRun {
  uint32_t file = 0;
  uint64_t param_offset = 0;
  uint64_t count = 0;
  uint64_t element = 0;
};

// Bytes [offset, offset + bytes) of one file go to dst; param/range say what they are.
struct ReadRange {
  uint64_t offset = 0;
  uint64_t bytes = 0;
  char* dst = nullptr;
  uint32_t param = 0;
  uint64_t param_offset = 0;
  uint64_t count = 0;
};

// Zero-filled staging memory, returned to the OS after the load. Fresh pages cost about 11 us per
// 4 KiB to fault in here (docs/ARCHITECTURE.md#measured-costs) and dominate a load from the page
// cache; MAP_POPULATE faults them in one kernel pass, which is cheaper than one fault per page
// during the reads. (2 MiB transparent huge pages were slower still here: the kernel compacts
// memory to find them.)
class StagingBuffer {
 public:
  StagingBuffer() = default;
  ~StagingBuffer() {
    if (data_ != nullptr) ::munmap(data_, bytes_);
  }
  StagingBuffer(const StagingBuffer&) = delete;
  StagingBuffer& operator=(const StagingBuffer&) = delete;

  Status allocate(size_t bytes) {
    if (bytes == 0) return Status::ok();
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    if (p == MAP_FAILED) {
      return Status(ZRT_OUT_OF_MEMORY, fmt::format("staging {} bytes for the checkpoint: {}", bytes,
                                                   std::strerror(errno)));
    }
    data_ = static_cast<char*>(p);
    bytes_ = bytes;
    return Status::ok();
  }
  char* data() const { return data_; }
  float* floats() const { return reinterpret_cast<float*>(data_); }

 private:
  char* data_ = nullptr;
  size_t bytes_ = 0;
};

struct Staging {
  StagingBuffer master;
  std::vector<StagingBuffer> states;
  StagingBuffer frozen;
};

std::string param_label(const Manifest& m, uint32_t param) {
  return fmt::format("parameter \"{}\" (#{})", m.params[param].name, param);
}

std::string file_contents_label(const Manifest& m, const ManifestFile& file) {
  const auto& pieces = file.trainable.empty() ? file.frozen : file.trainable;
  if (pieces.empty()) return "no parameter elements";
  const ManifestPiece& first = pieces.front();
  std::string text = fmt::format("{} elements [{}, {})", param_label(m, first.param),
                                 first.param_offset, first.param_offset + first.count);
  const size_t more = file.trainable.size() + file.frozen.size() - 1;
  if (more > 0) text += fmt::format(" and {} more piece(s)", more);
  return text;
}

// The model the manifest describes must be this manager's.
Status check_same_model(const Manifest& m, const PartitionManager& pm, const std::string& origin) {
  const auto& specs = pm.param_specs();
  if (m.params.size() != specs.size()) {
    return Status::invalid_argument(
        "{}: the checkpoint is for a different model: it has {} parameters, this model {}", origin,
        m.params.size(), specs.size());
  }
  for (size_t p = 0; p < specs.size(); ++p) {
    const ManifestParam& saved = m.params[p];
    const bool frozen = (specs[p].flags & ZRT_PARAM_FROZEN) != 0;
    if (saved.name != specs[p].name || saved.numel != specs[p].numel || saved.frozen != frozen) {
      return Status::invalid_argument(
          "{}: the checkpoint is for a different model: parameter #{} is \"{}\" ({} elements{}) "
          "there but \"{}\" ({} elements{}) here",
          origin, p, saved.name, saved.numel, saved.frozen ? ", frozen" : "", specs[p].name,
          specs[p].numel, frozen ? ", frozen" : "");
    }
    // Shapes are compared where both sides know one: a manifest from before shapes, or a
    // parameter registered without one, matches on numel alone.
    const std::vector<uint64_t> registered(specs[p].dims.begin(), specs[p].dims.end());
    if (specs[p].shaped && saved.shape && *saved.shape != registered) {
      return Status::invalid_argument(
          "{}: parameter #{} \"{}\" was saved with shape [{}] but is registered with shape [{}] "
          "(same {} elements); register it with the saved shape, or reshape the checkpoint",
          origin, p, saved.name, fmt::join(*saved.shape, ", "), fmt::join(registered, ", "),
          saved.numel);
    }
  }
  const size_t slots = pm.state_shards().size();
  if (static_cast<size_t>(m.optimizer_slots) != slots) {
    return Status::invalid_argument(
        "{}: the checkpoint has {} optimizer state slots, this manager {}", origin,
        m.optimizer_slots, slots);
  }
  return Status::ok();
}

const ManifestSection* find_section(const ManifestFile& file, SectionKind kind, int slot) {
  for (const ManifestSection& s : file.sections) {
    if (s.kind == kind && (kind != SectionKind::kState || s.slot == slot)) return &s;
  }
  return nullptr;
}

// Per parameter, the saved runs in element order (the manifest guarantees they tile it).
std::vector<std::vector<SavedRun>> index_runs(const Manifest& m, bool frozen) {
  std::vector<std::vector<SavedRun>> runs(m.params.size());
  for (size_t f = 0; f < m.files.size(); ++f) {
    uint64_t element = 0;
    for (const ManifestPiece& piece : frozen ? m.files[f].frozen : m.files[f].trainable) {
      runs[piece.param].push_back(
          {static_cast<uint32_t>(f), piece.param_offset, piece.count, element});
      element += piece.count;
    }
  }
  for (auto& list : runs) {
    std::sort(list.begin(), list.end(),
              [](const SavedRun& a, const SavedRun& b) { return a.param_offset < b.param_offset; });
  }
  return runs;
}

// Calls fn(run, first element, count) for the runs overlapping [offset, offset + count).
template <typename Fn>
void for_overlaps(const std::vector<SavedRun>& runs, uint64_t offset, uint64_t count, Fn fn) {
  auto it = std::upper_bound(
      runs.begin(), runs.end(), offset,
      [](uint64_t value, const SavedRun& run) { return value < run.param_offset; });
  if (it != runs.begin()) --it;
  const uint64_t end = offset + count;
  for (; it != runs.end() && it->param_offset < end; ++it) {
    const uint64_t lo = std::max(offset, it->param_offset);
    const uint64_t hi = std::min(end, it->param_offset + it->count);
    if (lo < hi) fn(*it, lo, hi - lo);
  }
}

// Which bytes of which files this rank needs, and where they go.
std::vector<std::vector<ReadRange>> plan_reads(const Manifest& m, const PartitionManager& pm,
                                               int rank, int world, Staging* staging) {
  std::vector<std::vector<ReadRange>> plan(m.files.size());
  const Layout& layout = pm.layout();
  const bool sharded = layout.shards() == world;
  const auto runs = index_runs(m, false);
  std::vector<char*> targets = {staging->master.data()};
  for (const StagingBuffer& state : staging->states) targets.push_back(state.data());
  for (const ShardPiece& piece : layout.shard_pieces(sharded ? rank : 0)) {
    for_overlaps(
        runs[piece.param], piece.param_offset, piece.count,
        [&](const SavedRun& run, uint64_t first, uint64_t count) {
          const ManifestFile& file = m.files[run.file];
          const uint64_t element = run.element + (first - run.param_offset);
          const uint64_t dst = piece.shard_offset + (first - piece.param_offset);
          for (size_t t = 0; t < targets.size(); ++t) {
            const ManifestSection* s =
                t == 0 ? find_section(file, SectionKind::kMaster, 0)
                       : find_section(file, SectionKind::kState, static_cast<int>(t - 1));
            plan[run.file].push_back({s->offset + element * sizeof(float), count * sizeof(float),
                                      targets[t] + dst * sizeof(float),
                                      static_cast<uint32_t>(piece.param), first, count});
          }
        });
  }
  const auto frozen_runs = index_runs(m, true);
  const size_t fsize = dtype_size(m.param_dtype);
  for (size_t p = 0; p < layout.params().size(); ++p) {
    const ParamLocation& loc = layout.params()[p];
    if (loc.place != ParamPlace::kFrozen) continue;
    for (const SavedRun& run : frozen_runs[p]) {
      const ManifestSection* s = find_section(m.files[run.file], SectionKind::kFrozen, 0);
      plan[run.file].push_back(
          {s->offset + run.element * fsize, run.count * fsize,
           staging->frozen.data() + (loc.view_offset + run.param_offset) * fsize,
           static_cast<uint32_t>(p), run.param_offset, run.count});
    }
  }
  return plan;
}

// Reads one file's ranges; when `verify`, streams the whole file through the checksum too.
Status read_file(const Manifest& m, size_t index, const std::string& dir,
                 std::vector<ReadRange>& ranges, bool verify, std::vector<char>* bounce) {
  const ManifestFile& entry = m.files[index];
  const std::string path = dir + "/" + entry.name;
  ReadFile file;
  const Status opened = file.open(path);
  if (!opened.is_ok()) {
    return Status(opened.code(),
                  fmt::format("checkpoint file {} (rank {}'s shard, holding {}): {}", path,
                              entry.rank, file_contents_label(m, entry), opened.message()));
  }
  std::sort(ranges.begin(), ranges.end(),
            [](const ReadRange& a, const ReadRange& b) { return a.offset < b.offset; });
  if (file.size() != entry.bytes) {
    std::string lost;
    for (const ReadRange& r : ranges) {
      if (r.offset + r.bytes > file.size()) {
        lost = fmt::format("; {} elements [{}, {}) lie past its end", param_label(m, r.param),
                           r.param_offset, r.param_offset + r.count);
        break;
      }
    }
    if (lost.empty() && entry.identity_bytes != 0 &&
        entry.identity_offset + entry.identity_bytes > file.size()) {
      lost = fmt::format("; its identity record (bytes [{}, {})) lies past its end; it holds {}",
                         entry.identity_offset, entry.identity_offset + entry.identity_bytes,
                         file_contents_label(m, entry));
    }
    if (lost.empty()) lost = fmt::format("; it holds {}", file_contents_label(m, entry));
    return Status::invalid_argument(
        "checkpoint file {} is {}: {} bytes, the manifest says {}{}", path,
        file.size() < entry.bytes ? "truncated" : "the wrong size", file.size(), entry.bytes, lost);
  }
  if (!verify) {
    for (const ReadRange& r : ranges) ZRT_RETURN_IF_ERROR(file.read_at(r.offset, r.dst, r.bytes));
    return Status::ok();
  }
  // One pass in file order: the ranges land in staging directly, the gaps go through the
  // bounce buffer, and every byte goes through the checksum.
  Checksum checksum;
  uint64_t pos = 0;
  auto skip_to = [&](uint64_t end) -> Status {
    while (pos < end) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(bounce->size(), end - pos));
      ZRT_RETURN_IF_ERROR(file.read_at(pos, bounce->data(), n));
      checksum.update(bounce->data(), n);
      pos += n;
    }
    return Status::ok();
  };
  for (const ReadRange& r : ranges) {
    ZRT_RETURN_IF_ERROR(skip_to(r.offset));
    ZRT_RETURN_IF_ERROR(file.read_at(r.offset, r.dst, r.bytes));
    checksum.update(r.dst, r.bytes);
    pos = r.offset + r.bytes;
  }
  ZRT_RETURN_IF_ERROR(skip_to(file.size()));
  if (checksum.digest() != entry.checksum) {
    return Status::invalid_argument(
        "checkpoint file {} is corrupted: its {} checksum is {}, the manifest says {}; it holds {}",
        path, kChecksumAlgorithm, checksum_to_hex(checksum.digest()),
        checksum_to_hex(entry.checksum), file_contents_label(m, entry));
  }
  if (entry.identity_bytes != 0) {
    std::string identity(static_cast<size_t>(entry.identity_bytes), '\0');
    ZRT_RETURN_IF_ERROR(file.read_at(entry.identity_offset, identity.data(), identity.size()));
    ZRT_RETURN_IF_ERROR(check_shard_identity(identity, entry, m.step, m.params, path));
  }
  return Status::ok();
}

// Everything this rank does before the ranks agree.
Status stage_checkpoint(PartitionManager& pm, const std::string& dir, Manifest* manifest,
                        Staging* staging) {
  ZRT_RETURN_IF_ERROR(
      pm.checkpoint_quiesce("zrt_partition_load", PartitionManager::CheckpointAccess::kReplace));
  const std::string origin = dir + "/" + kManifestName;
  std::string text;
  const Status read = read_small_file(origin, size_t{1} << 30, &text);
  if (!read.is_ok()) {
    return Status(read.code(), fmt::format("no checkpoint in {}: {}", dir, read.message()));
  }
  Status checksum;
  ZRT_RETURN_IF_ERROR(parse_manifest_structure(text, origin, manifest, &checksum));
  const Manifest& m = *manifest;
  const Status same = check_same_model(m, pm, origin);
  if (!same.is_ok()) {
    if (checksum.is_ok()) return same;
    return Status(same.code(), same.message() +
                                   " (and the manifest's checksum does not match its content: it "
                                   "was corrupted or edited)");
  }
  ZRT_RETURN_IF_ERROR(checksum);
  const Layout& layout = pm.layout();
  const size_t shard_bytes = layout.shard_numel() * sizeof(float);
  ZRT_RETURN_IF_ERROR(staging->master.allocate(shard_bytes));
  staging->states = std::vector<StagingBuffer>(pm.state_shards().size());
  for (StagingBuffer& state : staging->states) ZRT_RETURN_IF_ERROR(state.allocate(shard_bytes));
  ZRT_RETURN_IF_ERROR(staging->frozen.allocate(layout.frozen_numel() * dtype_size(m.param_dtype)));
  const int rank = pm.communicator().rank(), world = pm.communicator().size();
  auto plan = plan_reads(m, pm, rank, world, staging);
  std::vector<char> bounce(kBounceBytes);
  for (size_t f = 0; f < m.files.size(); ++f) {
    const bool verify = static_cast<int>(f % static_cast<size_t>(world)) == rank;
    if (!verify && plan[f].empty()) continue;
    ZRT_RETURN_IF_ERROR(read_file(m, f, dir, plan[f], verify, &bounce));
  }
  return Status::ok();
}

}  // namespace

Status load_checkpoint(PartitionManager& pm, const std::string& dir) {
  Communicator& comm = pm.communicator();
  Manifest manifest;
  Staging staging;
  const auto start = std::chrono::steady_clock::now();
  const Status local = stage_checkpoint(pm, dir, &manifest, &staging);
  const auto staged = std::chrono::steady_clock::now();
  std::vector<RankReport> reports;
  const uint64_t values[3] = {static_cast<uint64_t>(manifest.step), 0, 0};
  ZRT_RETURN_IF_ERROR(exchange_reports(comm, local, values, &reports));
  ZRT_RETURN_IF_ERROR(verdict(reports).with_context(fmt::format("loading checkpoint {}", dir)));
  std::vector<const float*> states;
  for (const StagingBuffer& state : staging.states) states.push_back(state.floats());
  ZRT_RETURN_IF_ERROR(pm.restore_checkpoint(staging.master.floats(), states, staging.frozen.data(),
                                            manifest.param_dtype, manifest.step));
  // The parameters are published as after a step; wait for that, so the load returns with them
  // in place and a failure of the publishing gather is reported here.
  ZRT_RETURN_IF_ERROR(
      pm.checkpoint_quiesce("zrt_partition_load", PartitionManager::CheckpointAccess::kReplace));
  const auto done = std::chrono::steady_clock::now();
  ZRT_LOG_INFO(
      "checkpoint: loaded step {} from {} (saved by {} ranks at stage {}): read+verify {:.3f} s, "
      "agree+commit {:.3f} s",
      manifest.step, dir, manifest.world_size, manifest.stage,
      std::chrono::duration<double>(staged - start).count(),
      std::chrono::duration<double>(done - staged).count());
  return Status::ok();
}

}  // namespace zrt
