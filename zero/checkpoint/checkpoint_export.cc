// zrt_partition_export_full: the full parameters in one safetensors file, in bounded memory.
//
// The tensors' offsets are known before any data moves (names and sizes are), so rank 0 writes
// the header, then fills the file out of order, one segment at a time: every rank all-gathers
// the segment's f32 master slices (a bucket in stages 1/2, a unit in stage 3; stage 0 ranks hold
// everything already), and rank 0 converts each of its parameter pieces to the export dtype and
// writes it at its place. So no rank ever holds more than the largest segment, never the model.
// Frozen parameters come from rank 0's replicated store.
#include <algorithm>
#include <vector>

#include "collectives/collectives.h"
#include "zero/checkpoint/agreement.h"
#include "zero/checkpoint/checkpoint.h"
#include "zero/checkpoint/file_io.h"
#include "zero/checkpoint/safetensors.h"
#include "zero/comm/communicator.h"
#include "lib/core/dtype.h"
#include "engine/engine.h"
#include "zero/partition/element_ops.h"
#include "zero/partition/partition_manager.h"

namespace zrt {
namespace {

constexpr size_t kBounceElements = size_t{1} << 20;

class ExportWriter {
 public:
  ExportWriter(const PartitionManager& pm, zrt_dtype_t dtype) : pm_(pm), dtype_(dtype) {}

  Status open(const std::string& path) {
    const auto& specs = pm_.param_specs();
    std::vector<std::string> units, names;
    for (const ParamSpec& spec : specs) {
      units.push_back(pm_.unit_specs()[static_cast<size_t>(spec.unit)].name);
      names.push_back(spec.name);
    }
    const std::vector<std::string> keys = export_tensor_names(units, names);
    for (size_t p = 0; p < specs.size(); ++p) {
      SafetensorsTensor tensor{keys[p], dtype_, specs[p].numel, 0, 0, std::nullopt};
      if (specs[p].shaped) tensor.shape.emplace(specs[p].dims.begin(), specs[p].dims.end());
      file_.tensors.push_back(std::move(tensor));
    }
    file_.metadata["format"] = "pt";
    file_.metadata["zrt_step"] = std::to_string(pm_.step_count());
    std::string header;
    ZRT_RETURN_IF_ERROR(safetensors_build(&file_, &header));
    ZRT_RETURN_IF_ERROR(out_.open(path));
    return out_.write_at(0, header.data(), header.size());
  }

  // Elements [offset, offset + count) of param, given in `from` dtype.
  Status write(int param, uint64_t offset, const void* data, zrt_dtype_t from, uint64_t count) {
    const size_t in_size = dtype_size(from), out_size = dtype_size(dtype_);
    const char* in = static_cast<const char*>(data);
    const SafetensorsTensor& t = file_.tensors[static_cast<size_t>(param)];
    if (bounce_.empty()) bounce_.resize(kBounceElements * out_size);
    for (uint64_t done = 0; done < count;) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(kBounceElements, count - done));
      ops_->convert(from, in + done * in_size, dtype_, bounce_.data(), n);
      ZRT_RETURN_IF_ERROR(out_.write_at(file_.data_start + t.begin + (offset + done) * out_size,
                                        bounce_.data(), n * out_size));
      done += n;
    }
    return Status::ok();
  }

  Status commit() { return out_.commit(); }

 private:
  const PartitionManager& pm_;
  zrt_dtype_t dtype_;
  SafetensorsFile file_;
  DurableWriter out_;
  std::unique_ptr<ElementOps> ops_ = create_host_element_ops();
  std::vector<char> bounce_;
};

Status gather_segment(Communicator& comm, const PartitionManager& pm, const Segment& seg,
                      std::vector<float>* buffer) {
  buffer->resize(seg.numel);
  CollectiveArgs args;
  args.kind = ZRT_COLL_ALL_GATHER;
  args.sendbuf = pm.master_shard() + seg.shard_offset;
  args.recvbuf = buffer->data();
  args.count = seg.slice;
  args.dtype = ZRT_F32;
  return comm.run_internal(args, "gathering a segment of master weights for export");
}

}  // namespace

Status export_full(PartitionManager& pm, const std::string& path, zrt_dtype_t dtype) {
  Communicator& comm = pm.communicator();
  const int rank = comm.rank();
  Status local = pm.checkpoint_quiesce("zrt_partition_export_full");
  if (local.is_ok() && dtype != ZRT_F32 && dtype != ZRT_F16 && dtype != ZRT_BF16) {
    local = Status::invalid_argument("dtype {} is not f32, f16 or bf16", dtype_name(dtype));
  }
  // All ranks must run the same gathers: agree on starting first.
  std::vector<RankReport> reports;
  const uint64_t none[3] = {0, 0, 0};
  ZRT_RETURN_IF_ERROR(exchange_reports(comm, local, none, &reports));
  ZRT_RETURN_IF_ERROR(verdict(reports).with_context(fmt::format("exporting {}", path)));

  ExportWriter writer(pm, dtype);
  Status written = rank == 0 ? writer.open(path) : Status::ok();
  const Layout& layout = pm.layout();
  const bool gathered = layout.shards() == 1;  // stage 0: every rank holds the whole master
  std::vector<float> buffer;
  for (const Segment& seg : layout.segments()) {
    const float* data = pm.master_shard() + seg.shard_offset;
    if (!gathered) {
      ZRT_RETURN_IF_ERROR(gather_segment(comm, pm, seg, &buffer));
      data = buffer.data();
    }
    for (const SegmentPiece& piece : seg.pieces) {
      if (rank != 0 || !written.is_ok()) break;
      written = writer.write(piece.param, piece.param_offset, data + piece.segment_offset, ZRT_F32,
                             piece.count);
    }
  }
  if (rank == 0 && written.is_ok()) {
    const zrt_dtype_t pdt = pm.options().param_dtype;
    for (size_t p = 0; p < layout.params().size() && written.is_ok(); ++p) {
      const ParamLocation& loc = layout.params()[p];
      if (loc.place != ParamPlace::kFrozen) continue;
      written = writer.write(static_cast<int>(p), 0,
                             pm.frozen_store() + loc.view_offset * dtype_size(pdt), pdt, loc.numel);
    }
  }
  if (rank == 0 && written.is_ok()) written = writer.commit();
  ZRT_RETURN_IF_ERROR(exchange_reports(comm, written, none, &reports));
  return verdict(reports).with_context(fmt::format("exporting {}", path));
}

}  // namespace zrt
