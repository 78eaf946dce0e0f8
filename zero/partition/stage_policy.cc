#include "zero/partition/stage_policy.h"

namespace zrt {

// The one place that reads the stage number.
StagePolicy::StagePolicy(const PartitionOptions& options)
    : stage_(options.stage),
      param_home_(options.stage == 0   ? ParamHome::kReplicated
                  : options.stage <= 2 ? ParamHome::kOwnedSlices
                                       : ParamHome::kShard),
      grad_home_(options.stage == 0   ? GradHome::kFull
                 : options.stage == 1 ? GradHome::kOwnedSlices
                                      : GradHome::kShard),
      shards_optimizer_state_(options.stage != 0),
      keeps_full_grads_(options.stage <= 1 || options.no_sync_accumulation) {}

}  // namespace zrt
