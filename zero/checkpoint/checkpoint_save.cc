// zrt_partition_save: see checkpoint.h for the protocol and why it survives a crash.
#include <unistd.h>

#include <chrono>
#include <random>
#include <vector>

#include "zero/checkpoint/agreement.h"
#include "zero/checkpoint/checkpoint.h"
#include "zero/checkpoint/directory_lock.h"
#include "zero/checkpoint/file_io.h"
#include "zero/checkpoint/manifest.h"
#include "zero/checkpoint/shard_plan.h"
#include "zero/comm/communicator.h"
#include "lib/core/dtype.h"
#include "lib/core/log.h"
#include "zero/partition/partition_manager.h"

namespace zrt {
namespace {

// Bounded bounce buffer for the param-dtype section (stages 1/2 keep it inside the full
// parameters, not contiguous).
constexpr size_t kBounceBytes = size_t{4} << 20;

std::vector<ManifestParam> manifest_params(const PartitionManager& pm) {
  std::vector<ManifestParam> params;
  const auto& specs = pm.param_specs();
  const auto& units = pm.unit_specs();
  for (const ParamSpec& spec : specs) {
    params.push_back({spec.name, units[static_cast<size_t>(spec.unit)].name, spec.numel,
                      (spec.flags & ZRT_PARAM_FROZEN) != 0,
                      std::vector<uint64_t>(spec.dims.begin(), spec.dims.end())});
    // A parameter registered without a shape has none to record ([numel] is zrt's own view).
    if (!spec.shaped) params.back().shape.reset();
  }
  return params;
}

// The file record rank r's shard has, identity included; rank 0 describes every file with it
// and each rank writes its identity record from it, so both agree by construction.
ManifestFile rank_file_record(const PartitionManager& pm, const std::vector<ManifestParam>& params,
                              const std::string& tag, int rank, int world) {
  ManifestFile file = describe_rank_file(
      rank_contents(pm.layout(), rank, world), pm.options().param_dtype,
      static_cast<int>(pm.state_shards().size()), shard_file_name(tag, rank, world), rank);
  add_shard_identity(&file, pm.step_count(), params);
  return file;
}

Status write_rank_file(const PartitionManager& pm, const RankContents& contents,
                       const std::string& identity, const std::string& path, uint64_t* bytes,
                       uint64_t* checksum) {
  const zrt_dtype_t pdt = pm.options().param_dtype;
  DurableWriter out;
  ZRT_RETURN_IF_ERROR(out.open(path));
  auto write_f32 = [&](const float* base) -> Status {
    for (const WritePiece& piece : contents.trainable) {
      ZRT_RETURN_IF_ERROR(out.write(base + piece.source_offset, piece.count * sizeof(float)));
    }
    return Status::ok();
  };
  ZRT_RETURN_IF_ERROR(write_f32(pm.master_shard()));
  for (const float* state : pm.state_shards()) ZRT_RETURN_IF_ERROR(write_f32(state));
  const size_t psize = dtype_size(pdt);
  if (pdt != ZRT_F32) {
    std::vector<char> bounce(kBounceBytes);
    const size_t per_round = kBounceBytes / psize;
    for (const WritePiece& piece : contents.trainable) {
      for (uint64_t done = 0; done < piece.count;) {
        const size_t n = static_cast<size_t>(std::min<uint64_t>(per_round, piece.count - done));
        ZRT_RETURN_IF_ERROR(pm.read_param_shard(piece.source_offset + done, n, bounce.data()));
        ZRT_RETURN_IF_ERROR(out.write(bounce.data(), n * psize));
        done += n;
      }
    }
  }
  for (const WritePiece& piece : contents.frozen) {
    ZRT_RETURN_IF_ERROR(
        out.write(pm.frozen_store() + piece.source_offset * psize, piece.count * psize));
  }
  ZRT_RETURN_IF_ERROR(out.write(identity.data(), identity.size()));
  ZRT_RETURN_IF_ERROR(out.commit());
  *bytes = out.bytes();
  *checksum = out.checksum();
  return Status::ok();
}

uint64_t make_save_nonce() {
  std::random_device device;
  const uint64_t now =
      static_cast<uint64_t>(std::chrono::system_clock::now().time_since_epoch().count());
  return (now ^ (static_cast<uint64_t>(device()) << 32) ^ static_cast<uint64_t>(::getpid())) &
         0xffffffffffffull;
}

Manifest describe_checkpoint(const PartitionManager& pm, const std::string& tag,
                             const std::vector<RankReport>& reports, int world) {
  const PartitionOptions& options = pm.options();
  Manifest m;
  m.step = pm.step_count();
  m.world_size = world;
  m.stage = options.stage;
  m.param_dtype = options.param_dtype;
  m.optimizer_slots = static_cast<int>(pm.state_shards().size());
  m.params = manifest_params(pm);
  for (int r = 0; r < world; ++r) {
    ManifestFile file = rank_file_record(pm, m.params, tag, r, world);
    file.bytes = reports[static_cast<size_t>(r)].values[0];
    file.checksum = reports[static_cast<size_t>(r)].values[1];
    m.files.push_back(std::move(file));
  }
  return m;
}

// Rank 0, after the manifest is durable: files of earlier (or interrupted) saves go.
void collect_garbage(const std::string& dir, const Manifest& manifest) {
  std::vector<std::string> names;
  if (!list_directory(dir, &names).is_ok()) return;
  for (const std::string& name : names) {
    if (!is_checkpoint_data_file(name)) continue;
    bool live = false;
    for (const ManifestFile& file : manifest.files) live = live || file.name == name;
    if (!live && ::unlink((dir + "/" + name).c_str()) != 0) {
      ZRT_LOG_WARN("checkpoint: could not remove stale file {}/{}", dir, name);
    }
  }
}

}  // namespace

Status save_checkpoint(PartitionManager& pm, const std::string& dir) {
  Communicator& comm = pm.communicator();
  const int rank = comm.rank(), world = comm.size();
  // Round 1: every rank can save (between steps), and rank 0's tag for this save, which makes
  // its file names new so the previous manifest's files stay intact. Nothing is written unless
  // every rank can.
  Status ready = pm.checkpoint_quiesce("zrt_partition_save");
  // Up front, before any file is written: the folder must be this job's (directory_lock.h).
  if (ready.is_ok() && rank == 0) {
    ready = make_directories(dir);
    if (ready.is_ok()) ready = lock_checkpoint_directory(dir, &pm);
  }
  uint64_t values[3] = {rank == 0 ? make_save_nonce() : 0, 0, 0};
  std::vector<RankReport> reports;
  ZRT_RETURN_IF_ERROR(exchange_reports(comm, ready, values, &reports));
  ZRT_RETURN_IF_ERROR(verdict(reports).with_context(fmt::format("saving checkpoint {}", dir)));
  const std::string tag = fmt::format("{:08d}-{:012x}", pm.step_count(), reports[0].values[0]);
  const std::string name = shard_file_name(tag, rank, world);

  // Round 2: each rank's shard, durable, with its size and checksum.
  Status local = make_directories(dir);
  values[0] = values[1] = 0;
  if (local.is_ok()) {
    const RankContents contents = rank_contents(pm.layout(), rank, world);
    const std::vector<ManifestParam> params = manifest_params(pm);
    const std::string identity =
        shard_identity(rank_file_record(pm, params, tag, rank, world), pm.step_count(), params);
    local = write_rank_file(pm, contents, identity, dir + "/" + name, &values[0], &values[1]);
  }
  ZRT_RETURN_IF_ERROR(exchange_reports(comm, local, values, &reports));
  Status status = verdict(reports);
  if (!status.is_ok()) {
    // Another save or the next one collects what other ranks could not remove.
    if (local.is_ok()) ::unlink((dir + "/" + name).c_str());
    return status.with_context(fmt::format("saving checkpoint {}", dir));
  }

  // Round 3: every shard is durable; the manifest goes last.
  Status written;
  if (rank == 0) {
    const Manifest manifest = describe_checkpoint(pm, tag, reports, world);
    const std::string text = serialize_manifest(manifest);
    DurableWriter out;
    written = out.open(dir + "/" + kManifestName);
    if (written.is_ok()) written = out.write(text.data(), text.size());
    if (written.is_ok()) written = out.commit();
    if (written.is_ok()) collect_garbage(dir, manifest);
  }
  const uint64_t bytes = values[0];
  ZRT_RETURN_IF_ERROR(exchange_reports(comm, written, values, &reports));
  ZRT_RETURN_IF_ERROR(verdict(reports).with_context(fmt::format("saving checkpoint {}", dir)));
  ZRT_LOG_INFO("checkpoint: saved step {} to {} ({} bytes on this rank)", pm.step_count(), dir,
               bytes);
  return Status::ok();
}

}  // namespace zrt
