// The shard's pieces cut at segment boundaries (a parameter may straddle two segments), each
// rebased on its segment's slice: what zrt_optimizer_args_t::pieces means when the optimizer
// is called once per segment with that segment's slice (offload, step_backup = segment), and
// the rest of that call's arguments.
#pragma once

#include <vector>

#include "zero/partition/layout.h"
#include "zero/partition/partition_context.h"
#include "zrt/zrt.h"

namespace zrt {

std::vector<std::vector<zrt_shard_piece_t>> cut_pieces_by_segment(
    const std::vector<Segment>& segments, const std::vector<zrt_shard_piece_t>& pieces);

// The optimizer's arguments for segment s's slice: master, `grad` and each state slot (written
// into `state`, one pointer per slot) at the slice, `pieces` rebased on it, no param spans.
zrt_optimizer_args_t segment_optimizer_args(const PartitionContext& ctx, int segment,
                                            const std::vector<zrt_shard_piece_t>& pieces,
                                            const float* grad, int64_t step,
                                            zrt_mem_kind_t mem_kind, float** state);

}  // namespace zrt
