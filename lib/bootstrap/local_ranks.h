// Local rank and size derived from host names: ranks that report the same host name share a
// node; the local rank is the position among them in global rank order.
#pragma once

#include "lib/bootstrap/bootstrap.h"
#include "lib/core/status.h"

namespace zrt {

// Collective over `bootstrap` (one allgather of fixed-size host-name records).
Status derive_local_ranks(Bootstrap& bootstrap, int* local_rank, int* local_size);

// Checks a rank/size/local-rank/local-size quadruple; local -1/-1 means "derive". `what` names
// the source in messages.
Status check_rank_layout(const char* what, int rank, int size, int local_rank, int local_size);

}  // namespace zrt
