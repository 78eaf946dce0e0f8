#include "zero/checkpoint/checkpoint_reader.h"

#include <algorithm>

#include "zero/checkpoint/file_io.h"
#include "zero/checkpoint/safetensors.h"
#include "lib/core/dtype.h"
#include "zero/partition/element_ops.h"

namespace zrt {
namespace {

constexpr size_t kChunkBytes = size_t{8} << 20;

}  // namespace

CheckpointReader::CheckpointReader() : ops_(create_host_element_ops()) {}
CheckpointReader::~CheckpointReader() = default;

Status CheckpointReader::open(const std::string& dir) {
  dir_ = dir;
  const std::string origin = dir + "/" + kManifestName;
  std::string text;
  const Status read = read_small_file(origin, size_t{1} << 30, &text);
  if (!read.is_ok()) {
    return Status(read.code(), fmt::format("no checkpoint in {}: {}", dir, read.message()));
  }
  ZRT_RETURN_IF_ERROR(parse_manifest(text, origin, &manifest_));
  runs_.assign(manifest_.params.size(), {});
  for (size_t f = 0; f < manifest_.files.size(); ++f) {
    for (bool frozen : {false, true}) {
      uint64_t element = 0;
      const ManifestFile& file = manifest_.files[f];
      for (const ManifestPiece& piece : frozen ? file.frozen : file.trainable) {
        runs_[piece.param].push_back(
            {static_cast<uint32_t>(f), piece.param_offset, piece.count, element});
        element += piece.count;
      }
    }
  }
  for (auto& list : runs_) {
    std::sort(list.begin(), list.end(),
              [](const Run& a, const Run& b) { return a.param_offset < b.param_offset; });
  }
  return Status::ok();
}

Status CheckpointReader::verify_file(size_t index, uint64_t* actual) const {
  const ManifestFile& entry = manifest_.files.at(index);
  const std::string path = dir_ + "/" + entry.name;
  ReadFile file;
  ZRT_RETURN_IF_ERROR(file.open(path));
  if (file.size() != entry.bytes) {
    return Status::invalid_argument("{} is {}: {} bytes, the manifest says {}", path,
                                    file.size() < entry.bytes ? "truncated" : "the wrong size",
                                    file.size(), entry.bytes);
  }
  std::vector<char> buffer(kChunkBytes);
  Checksum checksum;
  for (uint64_t pos = 0; pos < file.size();) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(buffer.size(), file.size() - pos));
    ZRT_RETURN_IF_ERROR(file.read_at(pos, buffer.data(), n));
    checksum.update(buffer.data(), n);
    pos += n;
  }
  *actual = checksum.digest();
  if (*actual != entry.checksum) {
    return Status::invalid_argument("{} is corrupted: its {} checksum is {}, the manifest says {}",
                                    path, kChecksumAlgorithm, checksum_to_hex(*actual),
                                    checksum_to_hex(entry.checksum));
  }
  if (entry.identity_bytes != 0) {
    std::string identity(static_cast<size_t>(entry.identity_bytes), '\0');
    ZRT_RETURN_IF_ERROR(file.read_at(entry.identity_offset, identity.data(), identity.size()));
    ZRT_RETURN_IF_ERROR(
        check_shard_identity(identity, entry, manifest_.step, manifest_.params, path));
  }
  return Status::ok();
}

Status CheckpointReader::read_param(uint32_t param, uint64_t offset, uint64_t count,
                                    zrt_dtype_t dtype, void* out) const {
  if (param >= manifest_.params.size() || offset > manifest_.params[param].numel ||
      count > manifest_.params[param].numel - offset) {
    return Status::invalid_argument("read_param: no elements [{}, {}) of parameter {}", offset,
                                    offset + count, param);
  }
  const bool frozen = manifest_.params[param].frozen;
  const zrt_dtype_t from = frozen ? manifest_.param_dtype : ZRT_F32;
  const size_t in_size = dtype_size(from), out_size = dtype_size(dtype);
  std::vector<char> buffer;
  const auto& runs = runs_[param];
  for (const Run& run : runs) {
    const uint64_t lo = std::max(offset, run.param_offset);
    const uint64_t hi = std::min(offset + count, run.param_offset + run.count);
    if (lo >= hi) continue;
    const ManifestFile& file = manifest_.files[run.file];
    const ManifestSection* section = nullptr;
    for (const ManifestSection& s : file.sections) {
      if (s.kind == (frozen ? SectionKind::kFrozen : SectionKind::kMaster)) section = &s;
    }
    ReadFile in;
    ZRT_RETURN_IF_ERROR(in.open(dir_ + "/" + file.name));
    buffer.resize((hi - lo) * in_size);
    ZRT_RETURN_IF_ERROR(
        in.read_at(section->offset + (run.element + lo - run.param_offset) * in_size, buffer.data(),
                   buffer.size()));
    ops_->convert(from, buffer.data(), dtype, static_cast<char*>(out) + (lo - offset) * out_size,
                  hi - lo);
  }
  return Status::ok();
}

Status consolidate_checkpoint(const std::string& dir, const std::string& out, zrt_dtype_t dtype) {
  if (dtype != ZRT_F32 && dtype != ZRT_F16 && dtype != ZRT_BF16) {
    return Status::invalid_argument("dtype {} is not f32, f16 or bf16", dtype_name(dtype));
  }
  CheckpointReader reader;
  ZRT_RETURN_IF_ERROR(reader.open(dir));
  const Manifest& m = reader.manifest();
  for (size_t f = 0; f < m.files.size(); ++f) {
    uint64_t actual = 0;
    ZRT_RETURN_IF_ERROR(reader.verify_file(f, &actual));
  }
  std::vector<std::string> units, names;
  for (const ManifestParam& p : m.params) {
    units.push_back(p.unit);
    names.push_back(p.name);
  }
  const std::vector<std::string> keys = export_tensor_names(units, names);
  SafetensorsFile file;
  for (size_t p = 0; p < m.params.size(); ++p) {
    file.tensors.push_back({keys[p], dtype, m.params[p].numel, 0, 0, m.params[p].shape});
  }
  file.metadata["format"] = "pt";
  file.metadata["zrt_step"] = std::to_string(m.step);
  std::string header;
  ZRT_RETURN_IF_ERROR(safetensors_build(&file, &header));
  DurableWriter writer;
  ZRT_RETURN_IF_ERROR(writer.open(out));
  ZRT_RETURN_IF_ERROR(writer.write(header.data(), header.size()));
  const size_t out_size = dtype_size(dtype);
  const uint64_t per_chunk = kChunkBytes / out_size;
  std::vector<char> chunk(kChunkBytes);
  for (size_t p = 0; p < m.params.size(); ++p) {
    for (uint64_t done = 0; done < m.params[p].numel;) {
      const uint64_t n = std::min<uint64_t>(per_chunk, m.params[p].numel - done);
      ZRT_RETURN_IF_ERROR(
          reader.read_param(static_cast<uint32_t>(p), done, n, dtype, chunk.data()));
      ZRT_RETURN_IF_ERROR(writer.write(chunk.data(), n * out_size));
      done += n;
    }
  }
  return writer.commit();
}

}  // namespace zrt
