// The shard's pieces cut at segment boundaries (a parameter may straddle two segments), each
// rebased on its segment's slice: what zrt_optimizer_args_t::pieces means when the optimizer
// is called once per segment with that segment's slice (offload, step_backup = segment).
#pragma once

#include <vector>

#include "zero/partition/layout.h"
#include "zrt/zrt.h"

namespace zrt {

std::vector<std::vector<zrt_shard_piece_t>> cut_pieces_by_segment(
    const std::vector<Segment>& segments, const std::vector<zrt_shard_piece_t>& pieces);

}  // namespace zrt
