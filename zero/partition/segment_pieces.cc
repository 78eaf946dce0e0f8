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

zrt_optimizer_args_t segment_optimizer_args(const PartitionContext& ctx, int segment,
                                            const std::vector<zrt_shard_piece_t>& pieces,
                                            const float* grad, int64_t step,
                                            zrt_mem_kind_t mem_kind, float** state) {
  const PartitionBuffers& buf = ctx.buffers;
  const Segment& seg = ctx.layout.segments()[segment];
  for (size_t i = 0; i < buf.state.size(); ++i) state[i] = buf.state[i] + seg.shard_offset;
  zrt_optimizer_args_t args{};
  args.size = sizeof(args);
  args.master = buf.master + seg.shard_offset;
  args.grad = grad;
  args.state = state;
  args.num_state = static_cast<int>(buf.state.size());
  args.count = seg.slice;
  args.pieces = pieces.data();
  args.num_pieces = pieces.size();
  args.step = step;
  args.mem_kind = mem_kind;
  args.param_dtype = ctx.options.param_dtype;
  return args;
}

}  // namespace zrt
