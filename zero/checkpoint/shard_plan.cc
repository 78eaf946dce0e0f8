#include "zero/checkpoint/shard_plan.h"

#include <algorithm>

#include <fmt/format.h>

#include "lib/core/dtype.h"

namespace zrt {
namespace {

// Elements [lo, hi) of the concatenation of `pieces`.
std::vector<WritePiece> select_range(const std::vector<WritePiece>& pieces, uint64_t lo,
                                     uint64_t hi) {
  std::vector<WritePiece> out;
  uint64_t at = 0;
  for (const WritePiece& piece : pieces) {
    const uint64_t begin = std::max(lo, at);
    const uint64_t end = std::min(hi, at + piece.count);
    if (begin < end) {
      WritePiece cut = piece;
      cut.param_offset += begin - at;
      cut.source_offset += begin - at;
      cut.count = end - begin;
      out.push_back(cut);
    }
    at += piece.count;
  }
  return out;
}

std::vector<WritePiece> even_share(const std::vector<WritePiece>& pieces, int rank, int world) {
  uint64_t total = 0;
  for (const WritePiece& piece : pieces) total += piece.count;
  const uint64_t lo = total * static_cast<uint64_t>(rank) / static_cast<uint64_t>(world);
  const uint64_t hi = total * static_cast<uint64_t>(rank + 1) / static_cast<uint64_t>(world);
  return select_range(pieces, lo, hi);
}

}  // namespace

RankContents rank_contents(const Layout& layout, int rank, int world) {
  RankContents contents;
  const bool sharded = layout.shards() == world;
  for (const ShardPiece& piece : layout.shard_pieces(sharded ? rank : 0)) {
    contents.trainable.push_back(
        {piece.param, piece.param_offset, piece.shard_offset, piece.count});
  }
  if (!sharded) contents.trainable = even_share(contents.trainable, rank, world);
  std::vector<WritePiece> frozen;
  const auto& params = layout.params();
  for (size_t p = 0; p < params.size(); ++p) {
    if (params[p].place != ParamPlace::kFrozen) continue;
    frozen.push_back({static_cast<int>(p), 0, params[p].view_offset, params[p].numel});
  }
  std::sort(frozen.begin(), frozen.end(), [](const WritePiece& a, const WritePiece& b) {
    return a.source_offset < b.source_offset;
  });
  contents.frozen = even_share(frozen, rank, world);
  return contents;
}

ManifestFile describe_rank_file(const RankContents& contents, zrt_dtype_t param_dtype, int slots,
                                const std::string& name, int rank) {
  ManifestFile file;
  file.name = name;
  file.rank = rank;
  uint64_t trainable = 0, frozen = 0;
  for (const WritePiece& piece : contents.trainable) {
    file.trainable.push_back({static_cast<uint32_t>(piece.param), piece.param_offset, piece.count});
    trainable += piece.count;
  }
  for (const WritePiece& piece : contents.frozen) {
    file.frozen.push_back({static_cast<uint32_t>(piece.param), piece.param_offset, piece.count});
    frozen += piece.count;
  }
  uint64_t offset = 0;
  auto add = [&](SectionKind kind, int slot, zrt_dtype_t dtype, uint64_t elements) {
    const uint64_t bytes = elements * dtype_size(dtype);
    file.sections.push_back({kind, slot, dtype, offset, bytes});
    offset += bytes;
  };
  add(SectionKind::kMaster, 0, ZRT_F32, trainable);
  for (int slot = 0; slot < slots; ++slot) add(SectionKind::kState, slot, ZRT_F32, trainable);
  if (param_dtype != ZRT_F32) add(SectionKind::kParam, 0, param_dtype, trainable);
  if (frozen > 0) add(SectionKind::kFrozen, 0, param_dtype, frozen);
  file.bytes = offset;
  return file;
}

std::string shard_file_name(const std::string& tag, int rank, int world) {
  return fmt::format("shard-{}-r{:05d}-of-{:05d}.bin", tag, rank, world);
}

bool is_checkpoint_data_file(const std::string& name) {
  const bool shard = name.rfind("shard-", 0) == 0 &&
                     (name.size() > 4 && (name.compare(name.size() - 4, 4, ".bin") == 0 ||
                                          name.find(".bin.tmp.") != std::string::npos));
  const bool manifest_temp = name.rfind(std::string(kManifestName) + ".tmp.", 0) == 0;
  return shard || manifest_temp;
}

}  // namespace zrt
