// The identity record that ends each shard file (manifest.h: shard_identity), and the check
// that a file read back is the one the manifest names.
#include "zero/checkpoint/manifest.h"

#include <string>
#include <vector>

#include "zero/checkpoint/checksum.h"

namespace zrt {
namespace {

constexpr char kIdentityMagic[8] = {'Z', 'R', 'T', 'P', 'I', 'E', 'C', 'E'};
constexpr size_t kIdentityHeaderWords = 5;  // magic, step, rank, trainable, frozen
constexpr size_t kIdentityPieceWords = 4;   // name hash, index, first element, count

void put_u64(std::string* out, uint64_t value) {
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

uint64_t get_u64(const std::string& in, size_t word) {
  uint64_t value = 0;
  for (int i = 7; i >= 0; --i) {
    value = (value << 8) | static_cast<unsigned char>(in[word * 8 + static_cast<size_t>(i)]);
  }
  return value;
}

}  // namespace

std::string shard_identity(const ManifestFile& file, int64_t step,
                           const std::vector<ManifestParam>& params) {
  std::string out(kIdentityMagic, sizeof(kIdentityMagic));
  put_u64(&out, static_cast<uint64_t>(step));
  put_u64(&out, static_cast<uint64_t>(file.rank));
  put_u64(&out, file.trainable.size());
  put_u64(&out, file.frozen.size());
  for (const auto* list : {&file.trainable, &file.frozen}) {
    for (const ManifestPiece& piece : *list) {
      const std::string& name = params[piece.param].name;
      put_u64(&out, checksum_of(name.data(), name.size()));
      put_u64(&out, piece.param);
      put_u64(&out, piece.param_offset);
      put_u64(&out, piece.count);
    }
  }
  return out;
}

void add_shard_identity(ManifestFile* file, int64_t step,
                        const std::vector<ManifestParam>& params) {
  file->identity_offset = file->bytes;
  file->identity_bytes = shard_identity(*file, step, params).size();
  file->bytes += file->identity_bytes;
}

Status check_shard_identity(const std::string& found, const ManifestFile& file, int64_t step,
                            const std::vector<ManifestParam>& params, const std::string& path) {
  const std::string expected = shard_identity(file, step, params);
  if (found == expected) return Status::ok();
  auto refuse = [&](const std::string& what) {
    return Status::invalid_argument(
        "checkpoint file {} does not hold what the manifest says: {}; it belongs to another save "
        "or was swapped with another file: use the files of one save together",
        path, what);
  };
  if (found.size() != expected.size() || found.compare(0, 8, expected, 0, 8) != 0) {
    return refuse(fmt::format("its identity record ({} bytes) is not the {} bytes expected",
                              found.size(), expected.size()));
  }
  if (get_u64(found, 1) != get_u64(expected, 1)) {
    return refuse(fmt::format("it was written at step {}, the manifest is of step {}",
                              get_u64(found, 1), step));
  }
  if (get_u64(found, 2) != get_u64(expected, 2)) {
    return refuse(fmt::format("it is rank {}'s shard, the manifest names rank {}",
                              get_u64(found, 2), file.rank));
  }
  const size_t pieces = file.trainable.size() + file.frozen.size();
  for (size_t i = 0; i < pieces; ++i) {
    const size_t word = kIdentityHeaderWords + i * kIdentityPieceWords;
    bool same = true;
    for (size_t k = 0; k < kIdentityPieceWords; ++k) {
      same = same && get_u64(found, word + k) == get_u64(expected, word + k);
    }
    if (same) continue;
    const ManifestPiece& piece =
        i < file.trainable.size() ? file.trainable[i] : file.frozen[i - file.trainable.size()];
    return refuse(fmt::format(
        "its piece {} holds parameter #{} elements [{}, {}), the manifest says parameter \"{}\" "
        "(#{}) elements [{}, {})",
        i, get_u64(found, word + 1), get_u64(found, word + 2),
        get_u64(found, word + 2) + get_u64(found, word + 3), params[piece.param].name, piece.param,
        piece.param_offset, piece.param_offset + piece.count));
  }
  return refuse("its identity record differs");
}

}  // namespace zrt
