// What the step needs to know of the framework's optimizer beyond the function: whether it is
// one of zrt's fused optimizers, whose config is then checked before the step's first vote and
// which write nothing when they fail, so the segment backup has nothing to copy for them.
#pragma once

#include "zero/partition/step_transaction.h"
#include "zrt/zrt.h"

namespace zrt::api {

StepTransaction::Callback optimizer_callback(zrt_optimizer_fn fn, void* user_data);

}  // namespace zrt::api
