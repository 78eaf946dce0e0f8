#include "zero/partition/segment_pieces.h"

#include <algorithm>

namespace zrt {

std::vector<std::vector<zrt_shard_piece_t>> cut_pieces_by_segment(
    const std::vector<Segment>& segments, const std::vector<zrt_shard_piece_t>& pieces) {
  std::vector<std::vector<zrt_shard_piece_t>> cut(segments.size());
  for (const zrt_shard_piece_t& piece : pieces) {
    for (size_t s = 0; s < segments.size(); ++s) {
      const size_t begin = segments[s].shard_offset;
      const size_t end = begin + segments[s].slice;
      const size_t lo = std::max(begin, piece.shard_offset);
      const size_t hi = std::min(end, piece.shard_offset + piece.count);
      if (lo >= hi) continue;
      zrt_shard_piece_t part = piece;
      part.param_offset = piece.param_offset + (lo - piece.shard_offset);
      part.shard_offset = lo - begin;
      part.count = hi - lo;
      cut[s].push_back(part);
    }
  }
  return cut;
}

}  // namespace zrt
